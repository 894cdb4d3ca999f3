package ratelimitheadertest

import (
	"fmt"
	"strconv"
	"strings"
)

// Item is one member of a structured-field List whose items are Strings
// with Integer or String parameters: the shape of RateLimit-Policy and
// RateLimit.
type Item struct {
	// Name is the item's String.
	Name string
	// Keys are the parameters' keys in the order they stand.
	Keys []string
	// Params are the Integer parameters, Strings the String ones.
	Params  map[string]int64
	Strings map[string]string
}

// ParseList parses s strictly as an RFC 9651 List of String items with
// Integer or String parameters, and fails on anything else.
func ParseList(s string) ([]Item, error) {
	p := &parser{s: s}
	var items []Item
	p.sp()
	if p.end() {
		return nil, fmt.Errorf("empty list")
	}
	for {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.ows()
		if p.end() {
			return items, nil
		}
		if p.s[p.i] != ',' {
			return nil, fmt.Errorf("offset %d: want ',' got %q", p.i, p.s[p.i])
		}
		p.i++
		p.ows()
		if p.end() {
			return nil, fmt.Errorf("trailing comma")
		}
	}
}

type parser struct {
	s string
	i int
}

func (p *parser) end() bool { return p.i >= len(p.s) }
func (p *parser) sp() {
	for !p.end() && p.s[p.i] == ' ' {
		p.i++
	}
}
func (p *parser) ows() {
	for !p.end() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *parser) str() (string, error) {
	if p.end() || p.s[p.i] != '"' {
		return "", fmt.Errorf("offset %d: not a String", p.i)
	}
	p.i++
	var b strings.Builder
	for {
		if p.end() {
			return "", fmt.Errorf("unterminated String")
		}
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.end() || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return "", fmt.Errorf("bad escape")
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("byte %#x in String", c)
		default:
			b.WriteByte(c)
		}
	}
}

func (p *parser) item() (Item, error) {
	it := Item{Params: map[string]int64{}, Strings: map[string]string{}}
	name, err := p.str()
	if err != nil {
		return it, fmt.Errorf("item: %w", err)
	}
	it.Name = name
	for !p.end() && p.s[p.i] == ';' {
		p.i++
		p.sp()
		start := p.i
		for !p.end() && (p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.i > start && (p.s[p.i] >= '0' && p.s[p.i] <= '9' || strings.IndexByte("_-.*", p.s[p.i]) >= 0)) {
			p.i++
		}
		key := p.s[start:p.i]
		if key == "" {
			return it, fmt.Errorf("offset %d: empty parameter key", start)
		}
		if p.end() || p.s[p.i] != '=' {
			return it, fmt.Errorf("parameter %s: no Integer value", key)
		}
		p.i++
		if _, dup := it.Params[key]; !dup {
			if _, dup := it.Strings[key]; !dup {
				it.Keys = append(it.Keys, key)
			}
		}
		if !p.end() && p.s[p.i] == '"' {
			v, err := p.str()
			if err != nil {
				return it, fmt.Errorf("parameter %s: %w", key, err)
			}
			delete(it.Params, key)
			it.Strings[key] = v
			continue
		}
		start = p.i
		if !p.end() && p.s[p.i] == '-' {
			p.i++
		}
		for !p.end() && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		digits := strings.TrimPrefix(p.s[start:p.i], "-")
		if digits == "" || len(digits) > 15 {
			return it, fmt.Errorf("parameter %s: %q is not an Integer", key, p.s[start:p.i])
		}
		n, _ := strconv.ParseInt(p.s[start:p.i], 10, 64)
		delete(it.Strings, key)
		it.Params[key] = n
	}
	return it, nil
}
