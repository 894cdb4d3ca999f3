package yamllist

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Spec describes one kind of list file: its list key, the fields of an
// entry, and the words its messages use.
type Spec struct {
	// Key is the file's one top-level field, the list: "policies".
	Key string
	// Fields are an entry's known fields, in the order they are documented
	// (messages list them in this order).
	Fields []string
	// Required are the fields every entry must set; Entry.Check refuses an
	// entry without one. Fields the caller checks itself need not be here.
	Required []string
	// NameField is the field that names an entry ("caller", "name"): its
	// value, when a plain one, is put in every error about the entry.
	NameField string
	// NullUnset makes a field written without a value ("burst:") unset, as
	// if left out; otherwise it is an error.
	NullUnset bool
	// ShowValues makes messages quote a single value where they describe a
	// node ("got \"3\""); otherwise they say "a single value", for files
	// whose values may be secrets.
	ShowValues bool

	// Entries names the entries in messages ("no entries; ..."); default
	// "entries".
	Entries string
	// Every names all of them ("put every entry in one list"); default
	// "every entry".
	Every string
	// Entry, if set, names one entry with its article ("a policy"):
	// "expected a policy (a mapping of name, ...)" rather than "expected a
	// mapping of name, ...".
	Entry string
	// Example, if set, says what an entry holds ("caller and sha256"), in
	// "expected a list of entries (caller and sha256)".
	Example string
}

// Read reads r whole, refusing more than max bytes; name names it in
// errors.
func Read(name string, r io.Reader, max int) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > max {
		return nil, &Error{File: name, Index: -1, Reason: fmt.Sprintf("larger than %d bytes", max)}
	}
	return data, nil
}

// ReadFile reads the file at path whole, refusing one larger than max
// bytes. A file that cannot be opened gives os.Open's error as it is.
func ReadFile(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(path, f, max)
}

// yamlLineRE takes the line out of a YAML syntax error, which the library
// reports only as text: "yaml: line 3: did not find expected key".
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Document decodes data, which must hold at most one YAML document, and
// returns its top node with aliases followed, or nil when data holds no
// document (it is empty or only comments). file names the file in errors;
// putAll ends the message refusing a second document, saying where
// everything goes: "more than one YAML document; put " + putAll. Every
// error is an *Error naming the file and, when known, the line; a syntax
// error unwraps to the YAML library's.
func Document(file string, data []byte, putAll string) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil
	} else if err != nil {
		fe := &Error{File: file, Index: -1, Reason: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			fe.Line, _ = strconv.Atoi(m[1])
			fe.Reason = "invalid YAML: " + m[2]
		}
		return nil, fe
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &Error{File: file, Line: extra.Line, Index: -1, Reason: "more than one YAML document; put " + putAll, Err: err}
	}
	root := Resolve(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = Resolve(root.Content[0])
	}
	return root, nil
}

// Parse decodes data, which must be one YAML document holding a mapping
// with the single field s.Key, a non-empty list; it calls each for every
// entry in order and stops at the first error. file names the file in
// errors. An entry that is not a mapping is refused before each sees it;
// each must call Entry.Check before reading values.
func (s *Spec) Parse(file string, data []byte, each func(e *Entry) error) error {
	fileErr := func(line int, field, format string, args ...any) error {
		return &Error{File: file, Line: line, Index: -1, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	root, err := Document(file, data, fmt.Sprintf("%s in one %q list", s.every(), s.Key))
	if err != nil {
		return err
	}
	if root == nil {
		return fileErr(0, "", "empty file; expected a %q list", s.Key)
	}
	if root.Kind != yaml.MappingNode {
		return fileErr(root.Line, "", "expected a mapping with a %q list, got %s", s.Key, s.describe(root))
	}
	var items *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], Resolve(root.Content[i+1])
		switch {
		case k.Value != s.Key:
			return fileErr(k.Line, k.Value, "unknown field; the file has only a %q list", s.Key)
		case items != nil:
			return fileErr(k.Line, k.Value, "repeated field")
		case v.Kind != yaml.SequenceNode:
			example := ""
			if s.Example != "" {
				example = " (" + s.Example + ")"
			}
			return fileErr(v.Line, s.Key, "expected a list of %s%s, got %s", s.entries(), example, s.describe(v))
		}
		items = v
	}
	if items == nil || len(items.Content) == 0 {
		return fileErr(root.Line, s.Key, "no %s; the file needs a non-empty %q list", s.entries(), s.Key)
	}
	for i, item := range items.Content {
		e, err := s.newEntry(file, i, item)
		if err != nil {
			return err
		}
		if err := each(e); err != nil {
			return err
		}
	}
	return nil
}

func (s *Spec) entries() string {
	if s.Entries == "" {
		return "entries"
	}
	return s.Entries
}

func (s *Spec) every() string {
	if s.Every == "" {
		return "every entry"
	}
	return s.Every
}

// Resolve follows YAML aliases (*anchor) to the node they stand for.
func Resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// describe names a node's kind for error messages; a single value is
// quoted only when s.ShowValues.
func (s *Spec) describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		if s.ShowValues {
			return strconv.Quote(n.Value)
		}
		return "a single value"
	default:
		return "a YAML document"
	}
}
