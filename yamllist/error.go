package yamllist

import (
	"fmt"
	"strings"
)

// Error is a problem in a list file. Test for it with errors.As; it unwraps
// to its cause (a YAML, I/O or value error of the caller's), if any.
type Error struct {
	File   string // the path as given
	Line   int    // 1-based; 0 when unknown
	List   string // the list key ("policies", "callers") when about one entry, else ""
	Index  int    // the entry's index in List; -1 when not about one entry
	Name   string // the entry's name (its Spec.NameField), when it has one
	Field  string // the field at fault, e.g. "roles"; "" when not about one field
	Reason string // what is wrong
	Err    error  // the cause, or nil
}

// Error returns e.g.
// `access.yaml:7: callers[1] (gateway-eu): roles: unknown role "root"; roles are admin, client`.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Index >= 0 {
		fmt.Fprintf(&b, "%s[%d]", e.List, e.Index)
		if e.Name != "" {
			fmt.Fprintf(&b, " (%s)", e.Name)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }
