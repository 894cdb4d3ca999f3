package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/node"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// A policy file is YAML:
//
//	policies:
//	  - name: api-free
//	    algorithm: token_bucket  # or fixed_window, sliding_window, sliding_log, quota, concurrency
//	    limit: 60
//	    period: 1m          # a Go duration: 500ms, 1s, 15m, 24h; unset for quota
//	    burst: 20           # optional, default limit (0 is refused: leave it out)
//	    max_cost: 10        # optional, default burst (0 is refused: leave it out)
//	    on_unavailable: allow  # optional: allow, deny (default) or local
//	    dedupe_retention: 30m  # optional, a Go duration, 1s..24h; default 10m (not 0s)
//	    shadow: false       # optional: true decides and counts but never denies
//	  - name: reports-monthly
//	    algorithm: quota
//	    limit: 1000
//	    calendar: month     # quota only, required there: day, week, month or year (UTC)
//	  - name: reports-active
//	    algorithm: concurrency  # a semaphore of `limit` leases per key (quorate lease)
//	    limit: 2
//	    lease_ttl: 2m       # concurrency only, optional: a Go duration, 1s..24h; default 1m
//
// It is read strictly: an unknown or repeated field, a value of the wrong
// type or a policy that admission.Policy.Validate refuses is an error naming
// the file, line, policy and field, so a bad file fails before any RPC.

// policyFields are the fields of one policy, in the order they are documented.
var policyFields = []string{"name", "algorithm", "limit", "period", "calendar", "burst", "max_cost", "on_unavailable", "shadow", "dedupe_retention", "lease_ttl"}

// yamlLineRE takes the line out of a YAML syntax error, which the library
// reports only as text: "yaml: line 3: did not find expected key".
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// maxPolicyFileBytes bounds what we read: a policy file is small.
const maxPolicyFileBytes = 4 << 20

// PolicyFileError is a problem in a policy file. Test it with errors.As; it
// unwraps to its cause (an *admission.FieldError for a value Validate
// refused, a YAML or duration error, or nil).
type PolicyFileError struct {
	File   string // the path as given
	Line   int    // 1-based; 0 when unknown
	Index  int    // index in the policies list; -1 when not about one policy
	Name   string // the policy's name, when it has one
	Field  string // the field at fault, e.g. "period"; "" when not about one field
	Reason string // what is wrong, with the offending value
	Err    error  // the cause, or nil
}

// Error returns e.g.
// `examples/policies.yaml:7: policies[1] (login): period: invalid duration "fast"`.
func (e *PolicyFileError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Index >= 0 {
		fmt.Fprintf(&b, "policies[%d]", e.Index)
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

func (e *PolicyFileError) Unwrap() error { return e.Err }

// readPolicyFile reads and checks the policy file at path ("-" is stdin).
func readPolicyFile(path string, stdin io.Reader) ([]*quoratev1.Policy, error) {
	var r io.Reader = stdin
	name := "<stdin>"
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r, name = f, path
	}
	data, err := io.ReadAll(io.LimitReader(r, maxPolicyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > maxPolicyFileBytes {
		return nil, &PolicyFileError{File: name, Index: -1, Reason: fmt.Sprintf("larger than %d bytes", maxPolicyFileBytes)}
	}
	return parsePolicyFile(name, data)
}

// parsePolicyFile parses and validates a policy file; file names it in errors.
// The policies are returned in file order, as written (defaults are left to
// the server, which applies the same ones).
func parsePolicyFile(file string, data []byte) ([]*quoratev1.Policy, error) {
	fileErr := func(line int, field, format string, args ...any) error {
		return &PolicyFileError{File: file, Line: line, Index: -1, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	// The file is decoded to a yaml.Node tree and walked by hand rather than
	// into a struct with KnownFields(true): that way every error carries the
	// policy's index and name, the field and its line as typed fields.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fileErr(0, "", "empty file; expected a \"policies\" list")
		}
		pe := &PolicyFileError{File: file, Index: -1, Reason: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			pe.Line, _ = strconv.Atoi(m[1])
			pe.Reason = "invalid YAML: " + m[2]
		}
		return nil, pe
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fileErr(extra.Line, "", "more than one YAML document; put all policies in one \"policies\" list")
	}
	root := resolve(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = resolve(root.Content[0])
	}
	if root.Kind != yaml.MappingNode {
		return nil, fileErr(root.Line, "", "expected a mapping with a \"policies\" list, got %s", describe(root))
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolve(root.Content[i+1])
		switch {
		case k.Value != "policies":
			return nil, fileErr(k.Line, k.Value, "unknown field; the file has only a \"policies\" list")
		case list != nil:
			return nil, fileErr(k.Line, k.Value, "repeated field")
		case v.Kind != yaml.SequenceNode:
			return nil, fileErr(v.Line, "policies", "expected a list of policies, got %s", describe(v))
		}
		list = v
	}
	if list == nil || len(list.Content) == 0 {
		return nil, fileErr(root.Line, "policies", "no policies; the file needs a non-empty \"policies\" list")
	}

	out := make([]*quoratev1.Policy, 0, len(list.Content))
	seen := make(map[string]int) // name → line
	for i, item := range list.Content {
		p, err := parsePolicy(file, i, resolve(item))
		if err != nil {
			return nil, err
		}
		if first, ok := seen[p.GetName()]; ok {
			return nil, &PolicyFileError{File: file, Line: item.Line, Index: i, Name: p.GetName(), Field: "name",
				Reason: fmt.Sprintf("duplicate policy name %q (first at line %d)", p.GetName(), first)}
		}
		seen[p.GetName()] = item.Line
		out = append(out, p)
	}
	return out, nil
}

// parsePolicy decodes and validates policies[index].
func parsePolicy(file string, index int, n *yaml.Node) (*quoratev1.Policy, error) {
	e := &PolicyFileError{File: file, Line: n.Line, Index: index}
	fail := func(line int, field, format string, args ...any) error {
		e.Line, e.Field, e.Reason = line, field, fmt.Sprintf(format, args...)
		return e
	}
	if n.Kind != yaml.MappingNode {
		return nil, fail(n.Line, "", "expected a policy (a mapping of %s), got %s", strings.Join(policyFields, ", "), describe(n))
	}
	// The name first, so that every later error can mention it.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if v := resolve(n.Content[i+1]); n.Content[i].Value == "name" && v.Kind == yaml.ScalarNode {
			e.Name = v.Value
		}
	}

	var (
		p     admission.Policy
		lines = make(map[string]int) // field → line of its value
	)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		field := k.Value
		if k.Kind != yaml.ScalarNode {
			return nil, fail(k.Line, "", "a field name must be a plain string, got %s", describe(k))
		}
		if _, dup := lines[field]; dup {
			return nil, fail(k.Line, field, "repeated field (first at line %d)", lines[field])
		}
		lines[field] = v.Line
		if v.Kind != yaml.ScalarNode {
			if isKnownField(field) {
				return nil, fail(v.Line, field, "expected a single value, got %s", describe(v))
			}
		} else if v.Tag == "!!null" && isKnownField(field) {
			continue // "burst:" with no value: unset, like an absent field
		}
		var err error
		switch field {
		case "name":
			p.Name = v.Value
		case "algorithm":
			p.Algorithm = admission.Algorithm(v.Value)
		case "on_unavailable":
			p.OnUnavailable = admission.OnUnavailable(v.Value)
		case "calendar":
			p.Calendar = admission.Calendar(v.Value)
		case "shadow":
			if p.Shadow, err = decodeBool(v); err != nil {
				e.Err = err
				return nil, fail(v.Line, field, "expected true or false, got %q", v.Value)
			}
		case "period":
			if p.Period, err = parseDuration(v); err != nil {
				e.Err = err
				return nil, fail(v.Line, field, "invalid duration %q; use a number and a unit, e.g. 500ms, 1s, 1m, 15m, 24h", v.Value)
			}
		case "dedupe_retention":
			if p.DedupeRetention, err = parseDuration(v); err != nil {
				e.Err = err
				return nil, fail(v.Line, field, "invalid duration %q; use a number and a unit between 1s and 24h, e.g. 30s, 10m, 1h", v.Value)
			}
		case "lease_ttl":
			if p.LeaseTTL, err = parseDuration(v); err != nil {
				e.Err = err
				return nil, fail(v.Line, field, "invalid duration %q; use a number and a unit between 1s and 24h, e.g. 30s, 2m, 1h", v.Value)
			}
		case "limit":
			p.Limit, err = decodeInt(v)
		case "burst":
			p.Burst, err = decodeInt(v)
		case "max_cost":
			p.MaxCost, err = decodeInt(v)
		default:
			return nil, fail(k.Line, field, "unknown field; known fields: %s", strings.Join(policyFields, ", "))
		}
		if err != nil {
			e.Err = err
			return nil, fail(v.Line, field, "expected an integer, got %q", v.Value)
		}
		if def, ok := zeroMeansDefault[field]; ok && isZero(field, p) {
			e.Err = admission.ErrInvalidPolicy
			return nil, fail(v.Line, field, "must not be 0: leave it out for the default (%s)", def)
		}
	}

	if err := p.Validate(); err != nil {
		e.Err = err
		var fe *admission.FieldError
		if !errors.As(err, &fe) {
			return nil, fail(n.Line, "", "%v", err)
		}
		line, ok := lines[fe.Field]
		if !ok {
			line = n.Line // the field is missing: point at the policy
		}
		return nil, fail(line, fe.Field, "%s", fe.Reason)
	}
	return node.PolicyToAPI(p, 0), nil
}

// zeroMeansDefault are the fields whose zero is the default, and that
// default: a file that writes 0 is refused rather than silently given it.
var zeroMeansDefault = map[string]string{
	"burst": "limit", "max_cost": "burst",
	"dedupe_retention": admission.DefaultDedupeRetention.String(), "lease_ttl": admission.DefaultLeaseTTL.String(),
}

// isZero reports whether field of p, just decoded, is zero.
func isZero(field string, p admission.Policy) bool {
	switch field {
	case "burst":
		return p.Burst == 0
	case "max_cost":
		return p.MaxCost == 0
	case "dedupe_retention":
		return p.DedupeRetention == 0
	case "lease_ttl":
		return p.LeaseTTL == 0
	}
	return false
}

// parseDuration reads a Go duration string such as 1m or 500ms.
func parseDuration(v *yaml.Node) (time.Duration, error) {
	return time.ParseDuration(v.Value)
}

func decodeInt(v *yaml.Node) (int64, error) {
	if v.Tag != "!!int" {
		return 0, fmt.Errorf("not an integer: %s", v.Tag)
	}
	var x int64
	err := v.Decode(&x)
	return x, err
}

// decodeBool reads a YAML boolean: true or false (YAML 1.2; also True, TRUE,
// False, FALSE). yes, no, on, off, 1 and 0 are refused, not guessed.
func decodeBool(v *yaml.Node) (bool, error) {
	if v.Tag != "!!bool" {
		return false, fmt.Errorf("not a boolean: %s", v.Tag)
	}
	var b bool
	err := v.Decode(&b)
	return b, err
}

func isKnownField(f string) bool {
	for _, k := range policyFields {
		if k == f {
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

// describe names a node's kind for error messages.
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
		return fmt.Sprintf("%q", n.Value)
	default:
		return "a YAML document"
	}
}
