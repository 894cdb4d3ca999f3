package middleware

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// sfItem is one member of a structured-field List whose items are Strings
// with Integer or String parameters: the shape of RateLimit-Policy and
// RateLimit.
type sfItem struct {
	name   string
	keys   []string
	params map[string]int64
	strs   map[string]string // String parameters
}

// parseSFList parses s strictly as an RFC 9651 List of String items with
// Integer or String parameters, and fails on anything else.
func parseSFList(s string) ([]sfItem, error) {
	p := &sfParser{s: s}
	var items []sfItem
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

type sfParser struct {
	s string
	i int
}

func (p *sfParser) end() bool { return p.i >= len(p.s) }
func (p *sfParser) sp() {
	for !p.end() && p.s[p.i] == ' ' {
		p.i++
	}
}
func (p *sfParser) ows() {
	for !p.end() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) str() (string, error) {
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

func (p *sfParser) item() (sfItem, error) {
	it := sfItem{params: map[string]int64{}, strs: map[string]string{}}
	name, err := p.str()
	if err != nil {
		return it, fmt.Errorf("item: %w", err)
	}
	it.name = name
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
		if _, dup := it.params[key]; !dup {
			if _, dup := it.strs[key]; !dup {
				it.keys = append(it.keys, key)
			}
		}
		if !p.end() && p.s[p.i] == '"' {
			v, err := p.str()
			if err != nil {
				return it, fmt.Errorf("parameter %s: %w", key, err)
			}
			delete(it.params, key)
			it.strs[key] = v
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
		delete(it.strs, key)
		it.params[key] = n
	}
	return it, nil
}

func TestSFParser(t *testing.T) {
	good := `"a";q=100;w=60, "b\"c";q=5,"d";r=-1, "e";q=2;qu="concurrent-requests";quorate-burst=3`
	items, err := parseSFList(good)
	if err != nil || len(items) != 4 || items[1].name != `b"c` || items[0].params["w"] != 60 || items[2].params["r"] != -1 ||
		items[3].strs["qu"] != "concurrent-requests" || items[3].params["quorate-burst"] != 3 {
		t.Fatalf("parse %s: %+v, %v", good, items, err)
	}
	for _, bad := range []string{``, `a;q=1`, `"a";q=1.5`, `"a";q=`, `"a",`, `"a";Q=1`, `"a" "b"`, `"a";q=1234567890123456`,
		`"a";qu="x`, `"a";qu=x`, `"a";-b=1`} {
		if _, err := parseSFList(bad); err == nil {
			t.Errorf("parse %q: no error", bad)
		}
	}
}
