package yamllist

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testSpec is a list file of "items", each with a required name and
// optional values of every kind the accessors read.
var testSpec = Spec{
	Key:       "items",
	Fields:    []string{"name", "tags", "count", "on", "every"},
	Required:  []string{"name"},
	NameField: "name",
}

// item is one parsed entry of testSpec.
type item struct {
	name  string
	tags  []string
	count int64
	on    bool
	every time.Duration
}

func parseItems(s *Spec, data string) ([]item, error) {
	var out []item
	err := s.Parse("f.yaml", []byte(data), func(e *Entry) error {
		if err := e.Check(nil); err != nil {
			return err
		}
		var it item
		var err error
		if it.name, err = e.Scalar("name"); err != nil {
			return err
		}
		if it.tags, err = e.Names("tags", func(string) error { return nil }); err != nil {
			return err
		}
		if it.count, err = e.Int("count"); err != nil {
			return err
		}
		if it.on, err = e.Bool("on"); err != nil {
			return err
		}
		if it.every, err = e.Duration("every", "e.g. 1s"); err != nil {
			return err
		}
		out = append(out, it)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func TestParse(t *testing.T) {
	items, err := parseItems(&testSpec, "items:\n"+
		"  - name: a\n    tags: [x, y]\n    count: 3\n    on: true\n    every: 1m\n"+
		"  - &b {name: b}\n"+
		"  - *b\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 || items[0].name != "a" || len(items[0].tags) != 2 || items[0].count != 3 || !items[0].on ||
		items[0].every != time.Minute || items[1].name != "b" || items[2].name != "b" {
		t.Errorf("got %+v", items)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, file string
		want       string // the whole error text
		line       int
		index      int
		field      string
	}{
		{"empty", "", `f.yaml: empty file; expected a "items" list`, 0, -1, ""},
		{"syntax", "items:\n  - name: a\n    x: y: z\n", `f.yaml:3: invalid YAML: mapping values are not allowed in this context`, 3, -1, ""},
		{"two documents", "items:\n  - name: a\n---\nitems: []\n",
			`f.yaml:3: more than one YAML document; put every entry in one "items" list`, 3, -1, ""},
		{"top-level list", "- a\n", `f.yaml:1: expected a mapping with a "items" list, got a list`, 1, -1, ""},
		{"top-level value", "items\n", `f.yaml:1: expected a mapping with a "items" list, got a single value`, 1, -1, ""},
		{"other key", "things: []\n", `f.yaml:1: things: unknown field; the file has only a "items" list`, 1, -1, "things"},
		{"key twice", "items: [{name: a}]\nitems: [{name: b}]\n", `f.yaml:2: items: repeated field`, 2, -1, "items"},
		{"list a mapping", "items: {name: a}\n", `f.yaml:1: items: expected a list of entries, got a mapping`, 1, -1, "items"},
		{"no entries", "items: []\n", `f.yaml:1: items: no entries; the file needs a non-empty "items" list`, 1, -1, "items"},
		{"alias to nothing", "a: &n\nitems: *n\n", `f.yaml:1: a: unknown field; the file has only a "items" list`, 1, -1, "a"},
		{"entry a value", "items:\n  - a\n", `f.yaml:2: items[0]: expected a mapping of name, tags, count, on, every, got a single value`, 2, 0, ""},
		{"unknown field", "items:\n  - name: a\n  - name: b\n    size: 3\n",
			`f.yaml:4: items[1] (b): size: unknown field; known fields: name, tags, count, on, every`, 4, 1, "size"},
		{"repeated field", "items:\n  - name: a\n    count: 1\n    count: 2\n",
			`f.yaml:4: items[0] (a): count: repeated field (first at line 3)`, 4, 0, "count"},
		{"field name a list", "items:\n  - name: a\n    [x]: 1\n",
			`f.yaml:3: items[0] (a): a field name must be a plain string, got a list`, 3, 0, ""},
		{"missing required", "items:\n  - count: 1\n", `f.yaml:2: items[0]: name: missing; each entry needs name`, 2, 0, "name"},
		{"no value", "items:\n  - name: a\n    count:\n", `f.yaml:3: items[0] (a): count: no value; leave the field out or give it one`, 3, 0, "count"},
		{"null name", "items:\n  - name: ~\n", `f.yaml:2: items[0]: name: no value; leave the field out or give it one`, 2, 0, "name"},
		{"value a list", "items:\n  - name: [a]\n", `f.yaml:2: items[0]: name: expected a single value, got a list`, 2, 0, "name"},
		{"not an int", "items:\n  - name: a\n    count: many\n", `f.yaml:3: items[0] (a): count: expected an integer, got "many"`, 3, 0, "count"},
		{"not a bool", "items:\n  - name: a\n    on: yes\n", `f.yaml:3: items[0] (a): on: expected true or false, got "yes"`, 3, 0, "on"},
		{"not a duration", "items:\n  - name: a\n    every: often\n", `f.yaml:3: items[0] (a): every: invalid duration "often"; e.g. 1s`, 3, 0, "every"},
		{"names not a list", "items:\n  - name: a\n    tags: x\n", `f.yaml:3: items[0] (a): tags: expected a list, e.g. [a, b], got a single value`, 3, 0, "tags"},
		{"names empty", "items:\n  - name: a\n    tags: []\n", `f.yaml:3: items[0] (a): tags: empty list; leave the field out or name at least one`, 3, 0, "tags"},
		{"name twice", "items:\n  - name: a\n    tags: [x, x]\n", `f.yaml:3: items[0] (a): tags: "x" listed twice`, 3, 0, "tags"},
		{"name a mapping", "items:\n  - name: a\n    tags:\n      - {x: 1}\n", `f.yaml:4: items[0] (a): tags: expected a name, got a mapping`, 4, 0, "tags"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseItems(&testSpec, tt.file)
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("got %v (%T), want an *Error", err, err)
			}
			if err.Error() != tt.want {
				t.Errorf("got  %s\nwant %s", err, tt.want)
			}
			if fe.File != "f.yaml" || fe.Line != tt.line || fe.Index != tt.index || fe.Field != tt.field {
				t.Errorf("got file %q line %d index %d field %q, want line %d index %d field %q",
					fe.File, fe.Line, fe.Index, fe.Field, tt.line, tt.index, tt.field)
			}
			if fe.Index >= 0 && fe.List != "items" {
				t.Errorf("List = %q, want items", fe.List)
			}
		})
	}
}

// TestSpecWords checks the options that change what is accepted and how
// messages read.
func TestSpecWords(t *testing.T) {
	s := testSpec
	s.NullUnset, s.ShowValues = true, true
	s.Entries, s.Every, s.Entry, s.Example = "things", "all things", "a thing", "name and tags"
	items, err := parseItems(&s, "items:\n  - name: a\n    count:\n")
	if err != nil || len(items) != 1 || items[0].count != 0 {
		t.Errorf("null with NullUnset: got %+v, %v", items, err)
	}
	for file, want := range map[string]string{
		"items:\n  - name: a\n---\n": `f.yaml:3: more than one YAML document; put all things in one "items" list`,
		"items: 3\n":                 `f.yaml:1: items: expected a list of things (name and tags), got "3"`,
		"items: []\n":                `f.yaml:1: items: no things; the file needs a non-empty "items" list`,
		"items:\n  - a\n":            `f.yaml:2: items[0]: expected a thing (a mapping of name, tags, count, on, every), got "a"`,
		"items:\n  - name: a\n    count: ~\n    count: 1\n": `f.yaml:4: items[0] (a): count: repeated field (first at line 3)`,
	} {
		if _, err := parseItems(&s, file); err == nil || err.Error() != want {
			t.Errorf("%q: got  %v\nwant %s", file, err, want)
		}
	}
}

// TestCheckOrder checks that Check reports the first problem in document
// order, a value's included, and that Fail names the entry.
func TestCheckOrder(t *testing.T) {
	const file = "items:\n  - name: a\n    count: many\n    size: 1\n"
	err := testSpec.Parse("f.yaml", []byte(file), func(e *Entry) error {
		return e.Check(func(field string) error {
			_, err := e.Int("count")
			return err
		})
	})
	if want := `f.yaml:3: items[0] (a): count: expected an integer, got "many"`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	cause := errors.New("cause")
	err = testSpec.Parse("f.yaml", []byte("items:\n  - name: a\n  - *x\n"), func(*Entry) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "invalid YAML") {
		t.Errorf("unknown anchor: got %v", err)
	}
	err = testSpec.Parse("f.yaml", []byte("items:\n  - &e {name: a}\n  - *e\n"), func(e *Entry) error {
		if e.Index() == 1 {
			return e.Fail(e.At(), "name", cause, "seen before, at line %d", e.Line("name"))
		}
		return nil
	})
	if want := `f.yaml:3: items[1] (a): name: seen before, at line 2`; err == nil || err.Error() != want || !errors.Is(err, cause) {
		t.Errorf("got %v, want %s wrapping the cause", err, want)
	}
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.yaml")
	if err := os.WriteFile(path, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(path, 10); err != nil || string(data) != "0123456789" {
		t.Errorf("at the bound: got %q, %v", data, err)
	}
	_, err := ReadFile(path, 9)
	var fe *Error
	if !errors.As(err, &fe) || err.Error() != path+": larger than 9 bytes" || fe.Index != -1 {
		t.Errorf("over the bound: got %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "none.yaml"), 10); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v", err)
	}
	if _, err := Read("<stdin>", strings.NewReader("abc"), 2); err == nil || err.Error() != "<stdin>: larger than 2 bytes" {
		t.Errorf("reader over the bound: got %v", err)
	}
}
