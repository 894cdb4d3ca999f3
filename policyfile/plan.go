package policyfile

import (
	"fmt"
	"io"
	"strings"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/node"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Change is what applying one policy of a file would do.
type Change struct {
	name    string
	current *quoratev1.Policy // nil: the policy is new
	next    admission.Policy  // as the cluster would store it (defaults filled)
	version uint64            // its version after the apply
	fields  []fieldChange     // the fields that change; none when unchanged
}

// fieldChange is one field of a policy that an apply changes; "" is unset.
type fieldChange struct{ name, from, to string }

// Plan compares the policies of a file with the cluster's
// current ones as the cluster does when applying them (each with its
// defaults filled in): a new policy gets version 1, a changed one its
// version+1, an unchanged one keeps its version. Apply deletes nothing, so
// the cluster's other policies are left out.
func Plan(file, current []*quoratev1.Policy) []Change {
	byName := make(map[string]*quoratev1.Policy, len(current))
	for _, p := range current {
		byName[p.GetName()] = p
	}
	out := make([]Change, 0, len(file))
	for _, p := range file {
		c := Change{name: p.GetName(), next: node.PolicyFromAPI(p).WithDefaults(), version: 1}
		if cur, ok := byName[c.name]; ok {
			c.current, c.version = cur, cur.GetVersion()
			if old := node.PolicyFromAPI(cur).WithDefaults(); old != c.next {
				c.version++
				c.fields = diffFields(policyFileFields(old), policyFileFields(c.next))
			}
		}
		out = append(out, c)
	}
	return out
}

// diffFields lists the fields whose values differ between from and to, in
// policy file order.
func diffFields(from, to []policyField) []fieldChange {
	value := func(fs []policyField, name string) string {
		for _, f := range fs {
			if f.name == name {
				return f.value
			}
		}
		return ""
	}
	var out []fieldChange
	for _, name := range policyFieldNames() {
		if a, b := value(from, name), value(to, name); a != b {
			out = append(out, fieldChange{name, a, b})
		}
	}
	return out
}

// WritePlan prints what applying the file would do, one block per
// policy: "+" new, "~" changed (each changed field, from → to), "="
// unchanged; then the counts.
func WritePlan(w io.Writer, file string, changes []Change) error {
	var b strings.Builder
	added, changed := 0, 0
	for _, c := range changes {
		switch {
		case c.current == nil:
			added++
			fmt.Fprintf(&b, "+ %s  (new, version 1)\n", c.name)
			for _, f := range policyFileFields(c.next)[1:] {
				fmt.Fprintf(&b, "    %s: %s\n", f.name, f.value)
			}
		case len(c.fields) > 0:
			changed++
			fmt.Fprintf(&b, "~ %s  (version %d → %d)\n", c.name, c.current.GetVersion(), c.version)
			for _, f := range c.fields {
				fmt.Fprintf(&b, "    %s: %s → %s\n", f.name, orUnset(f.from), orUnset(f.to))
			}
		default:
			fmt.Fprintf(&b, "= %s  (unchanged, version %d)\n", c.name, c.version)
		}
	}
	fmt.Fprintf(&b, "dry run of %s: %d to add, %d to change, %d unchanged; nothing applied (apply deletes no policy)\n",
		file, added, changed, len(changes)-added-changed)
	_, err := io.WriteString(w, b.String())
	return err
}

func orUnset(v string) string {
	if v == "" {
		return "(unset)"
	}
	return v
}

// Planned are the policies as the apply would leave them, with
// their versions: the answer a dry run prints with -o json or yaml.
func Planned(changes []Change) *quoratev1.ApplyPoliciesResponse {
	out := &quoratev1.ApplyPoliciesResponse{}
	for _, c := range changes {
		out.Policies = append(out.Policies, node.PolicyToAPI(c.next, c.version))
	}
	return out
}
