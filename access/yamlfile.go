package access

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// MaxFileBytes bounds a token or access file: both are small.
const MaxFileBytes = 4 << 20

// MaxCallerBytes bounds a caller name; it is the request-ID namespace's own
// bound, so that every caller an identity yields fits a request's caller.
const MaxCallerBytes = 128

// FileError is a problem in a token or access file. Test for it with
// errors.As; it unwraps to its cause (a YAML or I/O error), if any. It never
// repeats a token hash, in case a token was pasted where its hash belongs.
type FileError struct {
	File   string // the path as given
	Line   int    // 1-based; 0 when unknown
	List   string // "tokens" or "callers" when about one entry, else ""
	Index  int    // the entry's index in List; -1 when not about one entry
	Caller string // the entry's caller, when it has one
	Field  string // the field at fault, e.g. "roles"; "" when not about one field
	Reason string // what is wrong
	Err    error  // the cause, or nil
}

// Error returns e.g.
// `access.yaml:7: callers[1] (gateway-eu): roles: unknown role "root"; roles are admin, client`.
func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Index >= 0 {
		fmt.Fprintf(&b, "%s[%d]", e.List, e.Index)
		if e.Caller != "" {
			fmt.Fprintf(&b, " (%s)", e.Caller)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

func (e *FileError) Unwrap() error { return e.Err }

// readFile reads the file at path, refusing one larger than MaxFileBytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, &FileError{File: path, Index: -1, Reason: fmt.Sprintf("larger than %d bytes", MaxFileBytes)}
	}
	return data, nil
}

// yamlLineRE takes the line out of a YAML syntax error, which the library
// reports only as text: "yaml: line 3: did not find expected key".
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseList decodes data, which must be one YAML document holding a mapping
// with the single field list, a non-empty list; it calls each for every
// entry in order and stops at the first error.
//
// The document is walked as a yaml.Node tree rather than decoded into a
// struct, so that every error names its entry, field and line.
func parseList(file string, data []byte, list, example string, each func(index int, n *yaml.Node) error) error {
	fileErr := func(line int, field, format string, args ...any) error {
		return &FileError{File: file, Line: line, Index: -1, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return fileErr(0, "", "empty file; expected a %q list", list)
		}
		fe := &FileError{File: file, Index: -1, Reason: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			fe.Line, _ = strconv.Atoi(m[1])
			fe.Reason = "invalid YAML: " + m[2]
		}
		return fe
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fileErr(extra.Line, "", "more than one YAML document; put every entry in one %q list", list)
	}
	root := resolve(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = resolve(root.Content[0])
	}
	if root.Kind != yaml.MappingNode {
		return fileErr(root.Line, "", "expected a mapping with a %q list, got %s", list, describe(root))
	}
	var items *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolve(root.Content[i+1])
		switch {
		case k.Value != list:
			return fileErr(k.Line, k.Value, "unknown field; the file has only a %q list", list)
		case items != nil:
			return fileErr(k.Line, k.Value, "repeated field")
		case v.Kind != yaml.SequenceNode:
			return fileErr(v.Line, list, "expected a list of entries (%s), got %s", example, describe(v))
		}
		items = v
	}
	if items == nil || len(items.Content) == 0 {
		return fileErr(root.Line, list, "no entries; the file needs a non-empty %q list", list)
	}
	for i, item := range items.Content {
		if err := each(i, resolve(item)); err != nil {
			return err
		}
	}
	return nil
}

// entry is one list entry being parsed: its fields, and an error builder
// that names the entry.
type entry struct {
	err    FileError             // template for errors about this entry
	values map[string]*yaml.Node // field → value (aliases resolved)
	lines  map[string]int        // field → line of its value
}

// newEntry checks that n is a mapping of known fields, none repeated, and
// that the required ones are set. The caller field, if present as a plain
// value, is put in every error.
func newEntry(file, list string, index int, n *yaml.Node, known, required []string) (*entry, error) {
	e := &entry{
		err:    FileError{File: file, Line: n.Line, List: list, Index: index},
		values: make(map[string]*yaml.Node),
		lines:  make(map[string]int),
	}
	if n.Kind != yaml.MappingNode {
		return nil, e.fail(n.Line, "", "expected a mapping of %s, got %s", strings.Join(known, ", "), describe(n))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if v := resolve(n.Content[i+1]); n.Content[i].Value == "caller" && v.Kind == yaml.ScalarNode && v.Tag != "!!null" {
			e.err.Caller = v.Value
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		field := k.Value
		switch {
		case k.Kind != yaml.ScalarNode:
			return nil, e.fail(k.Line, "", "a field name must be a plain string, got %s", describe(k))
		case !contains(known, field):
			return nil, e.fail(k.Line, field, "unknown field; known fields: %s", strings.Join(known, ", "))
		case e.values[field] != nil:
			return nil, e.fail(k.Line, field, "repeated field (first at line %d)", e.lines[field])
		case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
			return nil, e.fail(v.Line, field, "no value; leave the field out or give it one")
		}
		e.values[field], e.lines[field] = v, v.Line
	}
	for _, field := range required {
		if e.values[field] == nil {
			return nil, e.fail(n.Line, field, "missing; each entry needs %s", strings.Join(required, " and "))
		}
	}
	return e, nil
}

// fail returns an error about this entry.
func (e *entry) fail(line int, field, format string, args ...any) error {
	fe := e.err
	fe.Line, fe.Field, fe.Reason = line, field, fmt.Sprintf(format, args...)
	return &fe
}

// scalar returns field's text as written, or "" and false when absent.
func (e *entry) scalar(field string) (string, error) {
	v := e.values[field]
	if v == nil {
		return "", nil
	}
	if v.Kind != yaml.ScalarNode {
		return "", e.fail(v.Line, field, "expected a single value, got %s", describe(v))
	}
	return v.Value, nil
}

// names returns field's list of values, each checked by check, refusing
// an empty list and repeated values; nil when the field is absent.
func (e *entry) names(field string, check func(string) error) ([]string, error) {
	v := e.values[field]
	if v == nil {
		return nil, nil
	}
	if v.Kind != yaml.SequenceNode {
		return nil, e.fail(v.Line, field, "expected a list, e.g. [a, b], got %s", describe(v))
	}
	if len(v.Content) == 0 {
		return nil, e.fail(v.Line, field, "empty list; leave the field out or name at least one")
	}
	out := make([]string, 0, len(v.Content))
	for _, item := range v.Content {
		item = resolve(item)
		if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
			return nil, e.fail(item.Line, field, "expected a name, got %s", describe(item))
		}
		if contains(out, item.Value) {
			return nil, e.fail(item.Line, field, "%q listed twice", item.Value)
		}
		if err := check(item.Value); err != nil {
			return nil, e.fail(item.Line, field, "%v", err)
		}
		out = append(out, item.Value)
	}
	return out, nil
}

// checkCaller checks a caller name: 1 to MaxCallerBytes bytes of UTF-8,
// with no control characters and no surrounding spaces.
func checkCaller(c string) error {
	switch {
	case c == "":
		return errors.New("empty caller name")
	case len(c) > MaxCallerBytes:
		return fmt.Errorf("caller name is %d bytes; at most %d", len(c), MaxCallerBytes)
	case !utf8.ValidString(c):
		return errors.New("caller name is not valid UTF-8")
	case strings.TrimSpace(c) != c:
		return fmt.Errorf("caller name %s has leading or trailing spaces", quote(c))
	case strings.IndexFunc(c, unicode.IsControl) >= 0:
		return fmt.Errorf("caller name %s has a control character", quote(c))
	}
	return nil
}

// quote quotes s for an error message, cut to 64 bytes: errors repeat at
// most that much of a string a client sent.
func quote(s string) string {
	const limit = 64
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// resolve follows YAML aliases (*anchor) to the node they stand for.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// describe names a node's kind for error messages, without its value.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return "a single value"
	default:
		return "a YAML document"
	}
}
