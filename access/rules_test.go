package access

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const exampleRules = `# Who may do what on this cluster.
callers:
  - caller: ops
    roles: [admin]
  - caller: gateway-eu
    roles: [client]
    policies: [api-paid, api-free]
  - caller: spiffe://example.org/ns/batch/sa/runner
    roles:
      - client
      - admin
  - caller: reporting
    roles: [client]
`

func TestParseRules(t *testing.T) {
	r, err := ReadRules(writeFile(t, t.TempDir(), "access.yaml", exampleRules))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Callers(), []string{"gateway-eu", "ops", "reporting", "spiffe://example.org/ns/batch/sa/runner"}; !slices.Equal(got, want) {
		t.Fatalf("Callers() = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		caller   string
		roles    []Role
		policies []string
	}{
		{"ops", []Role{RoleAdmin}, nil},
		{"gateway-eu", []Role{RoleClient}, []string{"api-free", "api-paid"}},
		{"spiffe://example.org/ns/batch/sa/runner", []Role{RoleAdmin, RoleClient}, nil},
		{"reporting", []Role{RoleClient}, nil},
	} {
		g, ok := r.Lookup(tc.caller)
		if !ok || g.Caller() != tc.caller {
			t.Fatalf("Lookup(%q) = %v, %v", tc.caller, g, ok)
		}
		if !slices.Equal(g.Roles(), tc.roles) || !slices.Equal(g.Policies(), tc.policies) || g.Limited() != (tc.policies != nil) {
			t.Errorf("%s: roles %v policies %v limited %v; want %v %v", tc.caller, g.Roles(), g.Policies(), g.Limited(), tc.roles, tc.policies)
		}
		for _, p := range []string{"api-free", "api-paid", "other"} {
			if want := tc.policies == nil || slices.Contains(tc.policies, p); g.AllowsPolicy(p) != want {
				t.Errorf("%s: AllowsPolicy(%s) = %v", tc.caller, p, !want)
			}
		}
	}
	if _, ok := r.Lookup("OPS"); ok {
		t.Error("callers are case-sensitive")
	}
	if g := (Grant{}); g.Has(RoleAdmin) || g.Has(RoleClient) || g.Has("root") || g.Roles() != nil {
		t.Error("the zero Grant holds a role")
	}
	var none *Rules
	if _, ok := none.Lookup("ops"); ok || none.Callers() != nil {
		t.Error("nil Rules grants something")
	}
}

func TestParseRulesErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"empty", "", []string{"a.yaml: ", "empty file", `"callers"`}},
		{"syntax", "callers:\n  - caller: ops\n   roles: [admin]\n", []string{"a.yaml:", "invalid YAML"}},
		{"unknown top field", "callers:\n  - {caller: ops, roles: [admin]}\ntokens: []\n", []string{"a.yaml:3:", "tokens: unknown field; the file has only a \"callers\" list"}},
		{"no callers", "callers: []\n", []string{"callers: no entries"}},
		{"callers a mapping", "callers:\n  ops: [admin]\n", []string{"a.yaml:2:", "callers: expected a list"}},
		{"entry a list", "callers:\n  - [ops, admin]\n", []string{"a.yaml:2:", "callers[0]: expected a mapping of caller, roles, policies"}},
		{"unknown field", "callers:\n  - caller: ops\n    roles: [admin]\n    role: client\n", []string{"a.yaml:4:", "callers[0] (ops): role: unknown field; known fields: caller, roles, policies"}},
		{"repeated field", "callers:\n  - caller: ops\n    roles: [admin]\n    roles: [client]\n", []string{"a.yaml:4:", "callers[0] (ops): roles: repeated field (first at line 3)"}},
		{"missing caller", "callers:\n  - roles: [admin]\n", []string{"a.yaml:2:", "callers[0]: caller: missing"}},
		{"missing roles", "callers:\n  - {caller: ops, roles: [admin]}\n  - caller: gw\n", []string{"a.yaml:3:", "callers[1] (gw): roles: missing"}},
		{"empty caller", "callers:\n  - caller: ''\n    roles: [admin]\n", []string{"a.yaml:2:", "caller: empty caller name"}},
		{"roles a string", "callers:\n  - caller: ops\n    roles: admin\n", []string{"a.yaml:3:", "roles: expected a list"}},
		{"roles empty", "callers:\n  - caller: ops\n    roles: []\n", []string{"a.yaml:3:", "roles: empty list"}},
		{"roles null", "callers:\n  - caller: ops\n    roles:\n", []string{"a.yaml:3:", "roles: no value"}},
		{"unknown role", "callers:\n  - caller: ops\n    roles: [admin, root]\n", []string{"a.yaml:3:", `callers[0] (ops): roles: unknown role "root"; roles are admin, client`}},
		{"role a list", "callers:\n  - caller: ops\n    roles: [[admin]]\n", []string{"a.yaml:3:", "roles: expected a name, got a list"}},
		{"role twice", "callers:\n  - caller: ops\n    roles:\n      - admin\n      - admin\n", []string{"a.yaml:5:", `roles: "admin" listed twice`}},
		{"policies a string", "callers:\n  - caller: gw\n    roles: [client]\n    policies: api\n", []string{"a.yaml:4:", "callers[0] (gw): policies: expected a list"}},
		{"policies empty", "callers:\n  - caller: gw\n    roles: [client]\n    policies: []\n", []string{"a.yaml:4:", "policies: empty list; leave the field out"}},
		{"policy twice", "callers:\n  - caller: gw\n    roles: [client]\n    policies: [a, b, a]\n", []string{"a.yaml:4:", `policies: "a" listed twice`}},
		{"policy blank", "callers:\n  - caller: gw\n    roles: [client]\n    policies: [' ']\n", []string{"a.yaml:4:", "policies: a policy name must be non-empty"}},
		{"policies without client", "callers:\n  - caller: ops\n    roles: [admin]\n    policies: [a]\n", []string{"a.yaml:4:", `callers[0] (ops): policies: limits data calls, which need the "client" role`}},
		{"caller twice", "callers:\n  - caller: ops\n    roles: [admin]\n  - caller: gw\n    roles: [client]\n  - caller: ops\n    roles: [client]\n", []string{"a.yaml:6:", "callers[2] (ops): caller: caller listed twice (first at line 2)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRules("a.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("parsed into %v; want an error", r.Callers())
			}
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("%v: not a *FileError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
