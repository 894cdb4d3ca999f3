package yamllist

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Entry is one list entry being parsed: its fields, and the error template
// that names it (file, list, index and name).
type Entry struct {
	spec   *Spec
	node   *yaml.Node            // the mapping, aliases resolved
	at     int                   // line of the list item as written
	err    Error                 // template for errors about this entry
	values map[string]*yaml.Node // field → value (aliases resolved); set by Check
	lines  map[string]int        // field → line of its value, unset ones too
	prefix string                // names a nested entry's fields in errors ("local.")
}

// newEntry refuses an item that is not a mapping and picks the entry's name.
func (s *Spec) newEntry(file string, index int, item *yaml.Node) (*Entry, error) {
	n := Resolve(item)
	e := &Entry{
		spec:   s,
		node:   n,
		at:     item.Line,
		err:    Error{File: file, Line: n.Line, List: s.Key, Index: index},
		values: make(map[string]*yaml.Node),
		lines:  make(map[string]int),
	}
	if n.Kind != yaml.MappingNode {
		fields := strings.Join(s.Fields, ", ")
		if s.Entry != "" {
			return nil, e.Fail(n.Line, "", nil, "expected %s (a mapping of %s), got %s", s.Entry, fields, s.describe(n))
		}
		return nil, e.Fail(n.Line, "", nil, "expected a mapping of %s, got %s", fields, s.describe(n))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if v := Resolve(n.Content[i+1]); n.Content[i].Value == s.NameField && v.Kind == yaml.ScalarNode && v.Tag != "!!null" {
			e.err.Name = v.Value
		}
	}
	return e, nil
}

// Check walks the entry's fields in document order: each name must be a
// plain string, a known field, not repeated, and have a value (unless the
// Spec's NullUnset, when one without is unset). It calls field, if not nil,
// for each field with a value as it is reached, so that its errors come in
// document order too; then it checks the required fields.
func (e *Entry) Check(field func(name string) error) error {
	s, n := e.spec, e.node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], Resolve(n.Content[i+1])
		name := k.Value
		switch {
		case k.Kind != yaml.ScalarNode:
			return e.Fail(k.Line, "", nil, "a field name must be a plain string, got %s", s.describe(k))
		case !slices.Contains(s.Fields, name):
			return e.Fail(k.Line, name, nil, "unknown field; known fields: %s", strings.Join(s.Fields, ", "))
		case e.has(name):
			return e.Fail(k.Line, name, nil, "repeated field (first at line %d)", e.lines[name])
		}
		e.lines[name] = v.Line
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			if s.NullUnset {
				continue
			}
			return e.Fail(v.Line, name, nil, "no value; leave the field out or give it one")
		}
		e.values[name] = v
		if field != nil {
			if err := field(name); err != nil {
				return err
			}
		}
	}
	for _, name := range s.Required {
		if e.values[name] == nil {
			return e.Fail(n.Line, name, nil, "missing; each entry needs %s", strings.Join(s.Required, " and "))
		}
	}
	return nil
}

// has reports whether field has been seen, with or without a value.
func (e *Entry) has(field string) bool {
	_, ok := e.lines[field]
	return ok
}

// Name returns the entry's name (its Spec.NameField), or "".
func (e *Entry) Name() string { return e.err.Name }

// Index returns the entry's index in the list.
func (e *Entry) Index() int { return e.err.Index }

// At returns the line where the list item is written (an alias's own line,
// not its anchor's).
func (e *Entry) At() int { return e.at }

// Line returns the line of field's value, or the entry's line when the
// field is not in the entry.
func (e *Entry) Line(field string) int {
	if line, ok := e.lines[field]; ok {
		return line
	}
	return e.node.Line
}

// Fail returns an *Error about this entry: at line, about field (or the
// whole entry when ""), wrapping cause (or nil).
func (e *Entry) Fail(line int, field string, cause error, format string, args ...any) error {
	fe := e.err
	if field != "" {
		field = e.prefix + field
	} else if e.prefix != "" {
		field = strings.TrimSuffix(e.prefix, ".")
	}
	fe.Line, fe.Field, fe.Reason, fe.Err = line, field, fmt.Sprintf(format, args...), cause
	return &fe
}

// Nested returns field's value, a mapping of the fields fields, as an entry
// of its own (nil when unset): its errors name the entry as e's do, and its
// fields as field.name ("local.ttl"). Call Check on it before reading values.
func (e *Entry) Nested(field string, fields []string) (*Entry, error) {
	v := e.values[field]
	if v == nil {
		return nil, nil
	}
	if v.Kind != yaml.MappingNode {
		return nil, e.Fail(v.Line, field, nil, "expected a mapping of %s, got %s", strings.Join(fields, ", "), e.spec.describe(v))
	}
	sub := *e.spec
	sub.Fields, sub.Required, sub.NameField = fields, nil, ""
	return &Entry{spec: &sub, node: v, at: v.Line, err: e.err, values: make(map[string]*yaml.Node),
		lines: make(map[string]int), prefix: e.prefix + field + "."}, nil
}

// scalar returns field's value node, nil when unset, refusing a
// mapping or list.
func (e *Entry) scalar(field string) (*yaml.Node, error) {
	v := e.values[field]
	if v == nil {
		return nil, nil
	}
	if v.Kind != yaml.ScalarNode {
		return nil, e.Fail(v.Line, field, nil, "expected a single value, got %s", e.spec.describe(v))
	}
	return v, nil
}

// Scalar returns field's text as written, or "" when unset.
func (e *Entry) Scalar(field string) (string, error) {
	v, err := e.scalar(field)
	if v == nil {
		return "", err
	}
	return v.Value, nil
}

// Int returns field's value, a YAML integer; 0 when unset.
func (e *Entry) Int(field string) (int64, error) {
	v, err := e.scalar(field)
	if v == nil {
		return 0, err
	}
	var x int64
	if v.Tag != "!!int" {
		err = fmt.Errorf("not an integer: %s", v.Tag)
	} else {
		err = v.Decode(&x)
	}
	if err != nil {
		return 0, e.Fail(v.Line, field, err, "expected an integer, got %q", v.Value)
	}
	return x, nil
}

// Bool returns field's value, a YAML boolean: true or false (YAML 1.2; also
// True, TRUE, False, FALSE). yes, no, on, off, 1 and 0 are refused, not
// guessed. false when unset.
func (e *Entry) Bool(field string) (bool, error) {
	v, err := e.scalar(field)
	if v == nil {
		return false, err
	}
	var b bool
	if v.Tag != "!!bool" {
		err = fmt.Errorf("not a boolean: %s", v.Tag)
	} else {
		err = v.Decode(&b)
	}
	if err != nil {
		return false, e.Fail(v.Line, field, err, "expected true or false, got %q", v.Value)
	}
	return b, nil
}

// Duration returns field's value, a Go duration such as 1m or 500ms; 0 when
// unset. hint, if set, follows the error's "invalid duration" and says what
// to write.
func (e *Entry) Duration(field, hint string) (time.Duration, error) {
	v, err := e.scalar(field)
	if v == nil {
		return 0, err
	}
	d, err := time.ParseDuration(v.Value)
	if err != nil {
		if hint != "" {
			return 0, e.Fail(v.Line, field, err, "invalid duration %q; %s", v.Value, hint)
		}
		return 0, e.Fail(v.Line, field, err, "invalid duration %q", v.Value)
	}
	return d, nil
}

// Names returns field's list of values, each checked by check (whose error
// becomes the reason), refusing an empty list and repeated values; nil when
// unset.
func (e *Entry) Names(field string, check func(string) error) ([]string, error) {
	v := e.values[field]
	if v == nil {
		return nil, nil
	}
	if v.Kind != yaml.SequenceNode {
		return nil, e.Fail(v.Line, field, nil, "expected a list, e.g. [a, b], got %s", e.spec.describe(v))
	}
	if len(v.Content) == 0 {
		return nil, e.Fail(v.Line, field, nil, "empty list; leave the field out or name at least one")
	}
	out := make([]string, 0, len(v.Content))
	for _, item := range v.Content {
		item = Resolve(item)
		if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
			return nil, e.Fail(item.Line, field, nil, "expected a name, got %s", e.spec.describe(item))
		}
		if slices.Contains(out, item.Value) {
			return nil, e.Fail(item.Line, field, nil, "%q listed twice", item.Value)
		}
		if err := check(item.Value); err != nil {
			return nil, e.Fail(item.Line, field, nil, "%v", err)
		}
		out = append(out, item.Value)
	}
	return out, nil
}
