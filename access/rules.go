package access

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/quorate/quorate/yamllist"
)

// An access file is YAML:
//
//	callers:
//	  - caller: ops                 # a certificate's URI SAN or CN, or a token file's caller
//	    roles: [admin]
//	  - caller: gateway-eu
//	    roles: [client]
//	    policies: [api-paid, api-free]  # optional: data calls only on these (omitted: all)
//	  - caller: spiffe://example.org/ns/batch/sa/runner
//	    roles: [admin, client]
//
// It is read strictly: an unknown, repeated or missing field, an unknown
// role, an empty list, a caller listed twice, or policies on a caller
// without the client role (whose only use they would be) is an error
// naming the file, line, entry and field.

// rulesFile is the shape of an access file.
var rulesFile = yamllist.Spec{
	Key:       "callers",
	Fields:    []string{"caller", "roles", "policies"},
	Required:  []string{"caller", "roles"},
	NameField: "caller",
	Example:   "caller, roles and optional policies",
}

// Role is a right an access file grants.
type Role string

const (
	// RoleAdmin allows the admin actions (ClassAdmin), and routing
	// (ClassRouting).
	RoleAdmin Role = "admin"
	// RoleClient allows the data actions (ClassData), within the caller's
	// policies if it has a list, and routing (ClassRouting).
	RoleClient Role = "client"
)

// Roles returns every role, in the order documented.
func Roles() []Role { return []Role{RoleAdmin, RoleClient} }

// Grant is what the access file gives one caller. It is immutable.
type Grant struct {
	caller   string
	admin    bool
	client   bool
	policies map[string]struct{} // nil: every policy
}

// Caller returns the caller the grant is for.
func (g Grant) Caller() string { return g.caller }

// Has reports whether the grant holds role r.
func (g Grant) Has(r Role) bool {
	switch r {
	case RoleAdmin:
		return g.admin
	case RoleClient:
		return g.client
	}
	return false
}

// Roles returns the roles held, in the order of Roles().
func (g Grant) Roles() []Role {
	var out []Role
	for _, r := range Roles() {
		if g.Has(r) {
			out = append(out, r)
		}
	}
	return out
}

// Limited reports whether the grant's data calls are limited to a list of
// policies (Policies).
func (g Grant) Limited() bool { return g.policies != nil }

// Policies returns the policies data calls are limited to, sorted; nil when
// not limited.
func (g Grant) Policies() []string {
	if g.policies == nil {
		return nil
	}
	out := make([]string, 0, len(g.policies))
	for p := range g.policies {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// AllowsPolicy reports whether data calls may use policy: always when not
// limited.
func (g Grant) AllowsPolicy(policy string) bool {
	if g.policies == nil {
		return true
	}
	_, ok := g.policies[policy]
	return ok
}

// Rules is a parsed access file: immutable, safe for concurrent use.
type Rules struct {
	grants map[string]Grant
}

// Lookup returns the grant of caller.
func (r *Rules) Lookup(caller string) (Grant, bool) {
	if r == nil {
		return Grant{}, false
	}
	g, ok := r.grants[caller]
	return g, ok
}

// Callers returns the callers of the file, sorted.
func (r *Rules) Callers() []string {
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.grants))
	for c := range r.grants {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// ReadRules reads and parses the access file at path.
func ReadRules(path string) (*Rules, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return ParseRules(path, data)
}

// ParseRules parses an access file; file names it in errors.
func ParseRules(file string, data []byte) (*Rules, error) {
	r := &Rules{grants: make(map[string]Grant)}
	callers := make(map[string]int) // caller → line
	err := rulesFile.Parse(file, data, func(e *yamllist.Entry) error {
		caller, err := checkEntry(e, callers, "give one entry all its roles")
		if err != nil {
			return err
		}
		roles, err := e.Names("roles", checkRole)
		if err != nil {
			return err
		}
		g := Grant{caller: caller, admin: slices.Contains(roles, string(RoleAdmin)), client: slices.Contains(roles, string(RoleClient))}
		policies, err := e.Names("policies", checkPolicyName)
		if err != nil {
			return err
		}
		if policies != nil {
			if !g.client {
				return e.Fail(e.Line("policies"), "policies", nil, "limits data calls, which need the %q role; add it to roles or drop policies", RoleClient)
			}
			g.policies = make(map[string]struct{}, len(policies))
			for _, p := range policies {
				g.policies[p] = struct{}{}
			}
		}
		r.grants[caller] = g
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func checkRole(name string) error {
	for _, r := range Roles() {
		if string(r) == name {
			return nil
		}
	}
	all := make([]string, 0, 2)
	for _, r := range Roles() {
		all = append(all, string(r))
	}
	return fmt.Errorf("unknown role %s; roles are %s", quote(name), strings.Join(all, ", "))
}

// checkPolicyName refuses what can never name a policy. The policy rules
// proper are package admission's; a name that passes here but no policy
// has simply never matches.
func checkPolicyName(name string) error {
	if name == "" || strings.TrimSpace(name) != name {
		return errors.New("a policy name must be non-empty, without surrounding spaces")
	}
	return nil
}
