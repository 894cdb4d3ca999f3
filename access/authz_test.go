package access

import (
	"errors"
	"strings"
	"testing"

	"github.com/quorate/quorate/dedupe"
)

func mustRules(t *testing.T, yaml string) *Rules {
	t.Helper()
	r, err := ParseRules("access.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func fixed(r *Rules) func() *Rules { return func() *Rules { return r } }

func TestMaxCallerBytesMatchesDedupe(t *testing.T) {
	if MaxCallerBytes != dedupe.MaxCallerBytes {
		t.Fatalf("MaxCallerBytes = %d, dedupe.MaxCallerBytes = %d", MaxCallerBytes, dedupe.MaxCallerBytes)
	}
}

func TestActions(t *testing.T) {
	names := make(map[string]bool)
	for _, a := range Actions() {
		if a.Class() == ClassNone {
			t.Errorf("%s has no class", a)
		}
		if names[a.String()] || a.String() == "" || strings.HasPrefix(a.String(), "action(") {
			t.Errorf("action %d: name %q empty or repeated", a, a)
		}
		names[a.String()] = true
		if a.NeedsPolicies() != (a.Class() == ClassData && a != ActionRefund && a != ActionPolicies) {
			t.Errorf("%s: NeedsPolicies() = %v", a, a.NeedsPolicies())
		}
	}
	if len(Actions()) != int(actionEnd)-1 {
		t.Errorf("Actions() has %d, want %d", len(Actions()), actionEnd-1)
	}
	if ActionNone.Class() != ClassNone || Action(200).Class() != ClassNone || Action(200).String() != "action(200)" || Action(200).NeedsPolicies() {
		t.Error("ActionNone or an out-of-range action has a class")
	}
	for c, want := range map[Class]string{ClassNone: "none", ClassHealth: "health", ClassAdmin: "admin", ClassData: "data", ClassRouting: "routing"} {
		if c.String() != want {
			t.Errorf("Class(%d).String() = %q, want %q", c, c, want)
		}
	}
	if ActionApplyPolicies.String() != "apply_policies" || ActionAdmit.Class() != ClassData || ActionRemoveNode.Class() != ClassAdmin || ActionHealth.Class() != ClassHealth {
		t.Error("spot check of names and classes failed")
	}
}

// TestAuthorizeClasses checks every action against every kind of caller:
// roles are independent, and only health is open to all.
func TestAuthorizeClasses(t *testing.T) {
	a := Enforce(fixed(mustRules(t, `callers:
  - {caller: ops, roles: [admin]}
  - {caller: gw, roles: [client]}
  - {caller: both, roles: [admin, client]}
`)))
	allowed := map[string]map[Class]bool{
		"ops":     {ClassHealth: true, ClassAdmin: true, ClassRouting: true},
		"gw":      {ClassHealth: true, ClassData: true, ClassRouting: true},
		"both":    {ClassHealth: true, ClassAdmin: true, ClassData: true, ClassRouting: true},
		"unknown": {ClassHealth: true},
	}
	for caller, classes := range allowed {
		for _, src := range []Source{SourceCertificate, SourceToken} {
			for _, action := range Actions() {
				err := a.Authorize(Identity{Caller: caller, Source: src}, action, []string{"any"})
				switch {
				case classes[action.Class()] && err != nil:
					t.Errorf("%s (%s) %s: %v, want allowed", caller, src, action, err)
				case !classes[action.Class()] && !errors.Is(err, ErrPermissionDenied):
					t.Errorf("%s (%s) %s: %v, want ErrPermissionDenied", caller, src, action, err)
				}
			}
		}
	}
	for _, id := range []Identity{{}, Anonymous(), {Caller: "ops"}, {Caller: "ops", Source: SourceNone}, {Caller: "ops", Source: "guess"}, {Source: SourceToken}} {
		for _, action := range Actions() {
			err := a.Authorize(id, action, nil)
			if action.Class() == ClassHealth {
				if err != nil {
					t.Errorf("%+v health: %v", id, err)
				}
			} else if !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("%+v %s: %v, want ErrUnauthenticated", id, action, err)
			}
		}
	}
}

func TestAuthorize(t *testing.T) {
	a := Enforce(fixed(mustRules(t, exampleRules)))
	cert := func(c string) Identity { return Identity{Caller: c, Source: SourceCertificate} }
	tok := func(c string) Identity { return Identity{Caller: c, Source: SourceToken} }
	for _, tc := range []struct {
		id       Identity
		action   Action
		policies []string
		want     error
		msg      []string
	}{
		{tok("ops"), ActionApplyPolicies, []string{"api-paid"}, nil, nil},
		{tok("ops"), ActionAdmit, []string{"api-paid"}, ErrPermissionDenied, []string{`caller "ops" lacks the client role, which admit needs`}},
		{tok("gateway-eu"), ActionAdmit, []string{"api-paid"}, nil, nil},
		{tok("gateway-eu"), ActionAdmitBatch, []string{"api-paid", "api-free", "api-paid"}, nil, nil},
		{tok("gateway-eu"), ActionAdmitBatch, []string{"api-paid", "api-us"}, ErrPermissionDenied, []string{`caller "gateway-eu" may not use policy "api-us"`}},
		{tok("gateway-eu"), ActionPeek, []string{"api-us"}, ErrPermissionDenied, []string{`policy "api-us"`}},
		{tok("gateway-eu"), ActionCommit, []string{"api-free"}, nil, nil},
		{tok("gateway-eu"), ActionCommit, nil, ErrPermissionDenied, []string{`caller "gateway-eu" may use only some policies, and this commit names none`}},
		{tok("gateway-eu"), ActionRenewLease, []string{}, ErrPermissionDenied, []string{"renew_lease names none"}},
		{tok("gateway-eu"), ActionRefund, nil, nil, nil}, // refunds only its own request
		{tok("gateway-eu"), ActionRefund, []string{"api-us"}, ErrPermissionDenied, []string{`policy "api-us"`}},
		{tok("gateway-eu"), ActionGetPolicy, []string{"api-paid"}, ErrPermissionDenied, []string{"lacks the admin role, which get_policy needs"}},
		{tok("gateway-eu"), ActionHealth, nil, nil, nil},
		{tok("reporting"), ActionAcquireLease, []string{"anything"}, nil, nil},
		{tok("reporting"), ActionCommit, nil, nil, nil}, // not limited: policies not needed
		{cert("spiffe://example.org/ns/batch/sa/runner"), ActionSplitGroup, nil, nil, nil},
		{cert("spiffe://example.org/ns/batch/sa/runner"), ActionReserve, []string{"x"}, nil, nil},
		{cert("spiffe://example.org/ns/other"), ActionReserve, []string{"x"}, ErrPermissionDenied, []string{`caller "spiffe://example.org/ns/other" is not in the access file`}},
		{cert(strings.Repeat("x", 100)), ActionReserve, nil, ErrPermissionDenied, []string{strings.Repeat("x", 64) + `"…`}},
		{Anonymous(), ActionAdmit, []string{"api-paid"}, ErrUnauthenticated, []string{"admit needs a client certificate or a bearer token"}},
		{tok("ops"), ActionNone, nil, ErrPermissionDenied, []string{"none is not a classified action"}},
		{tok("ops"), Action(99), nil, ErrPermissionDenied, []string{"action(99) is not a classified action"}},
	} {
		err := a.Authorize(tc.id, tc.action, tc.policies)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("Authorize(%+v, %s, %v) = %v, want %v", tc.id, tc.action, tc.policies, err, tc.want)
			continue
		}
		for _, m := range tc.msg {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("Authorize(%+v, %s, %v) = %q, want it to contain %q", tc.id, tc.action, tc.policies, err, m)
			}
		}
	}
}

func TestAuthorizeModes(t *testing.T) {
	open := Open()
	if !open.IsOpen() || Enforce(nil).IsOpen() || (*Authorizer)(nil).IsOpen() {
		t.Fatal("IsOpen")
	}
	for _, action := range Actions() {
		if err := open.Authorize(Anonymous(), action, []string{"any"}); err != nil {
			t.Errorf("open mode, %s: %v", action, err)
		}
	}
	if err := open.Authorize(Anonymous(), ActionNone, nil); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("open mode, ActionNone: %v", err)
	}
	// Without rules, every authorizer but Open denies all but health.
	noRules := func() *Rules { return nil }
	for name, a := range map[string]*Authorizer{"zero": {}, "nil": nil, "Enforce(nil)": Enforce(nil), "no rules": Enforce(noRules)} {
		for _, action := range Actions() {
			err := a.Authorize(Identity{Caller: "ops", Source: SourceToken}, action, nil)
			if (action == ActionHealth) != (err == nil) || (err != nil && !errors.Is(err, ErrPermissionDenied)) {
				t.Errorf("%s authorizer, %s: %v", name, action, err)
			}
		}
	}
	// The rules are asked at each decision: a reload applies at once.
	rules := mustRules(t, "callers:\n  - {caller: ops, roles: [admin]}\n")
	a := Enforce(func() *Rules { return rules })
	id := Identity{Caller: "ops", Source: SourceToken}
	if err := a.Authorize(id, ActionAdmit, nil); err == nil {
		t.Fatal("ops admitted without the client role")
	}
	rules = mustRules(t, "callers:\n  - {caller: ops, roles: [admin, client]}\n")
	if err := a.Authorize(id, ActionAdmit, nil); err != nil {
		t.Fatalf("after the change: %v", err)
	}
}

func TestResolveCaller(t *testing.T) {
	enforce := Enforce(fixed(mustRules(t, exampleRules)))
	gw := Identity{Caller: "gateway-eu", Source: SourceToken}
	for _, tc := range []struct {
		a         *Authorizer
		id        Identity
		requested string
		caller    string
		want      error
		msg       string
	}{
		{enforce, gw, "", "gateway-eu", nil, ""},
		{enforce, gw, "gateway-eu", "gateway-eu", nil, ""},
		{enforce, gw, "gateway-us", "", ErrPermissionDenied, `caller "gateway-eu" may not send requests as caller "gateway-us"`},
		{enforce, gw, "Gateway-EU", "", ErrPermissionDenied, `as caller "Gateway-EU"`},
		{enforce, Identity{Caller: "nobody-listed", Source: SourceCertificate}, "", "nobody-listed", nil, ""}, // Authorize decides rights
		{enforce, Anonymous(), "", "", ErrUnauthenticated, "needs a client certificate or a bearer token"},
		{enforce, Anonymous(), "gateway-eu", "", ErrUnauthenticated, ""},
		{enforce, Identity{Caller: "gateway-eu"}, "gateway-eu", "", ErrUnauthenticated, ""},
		{&Authorizer{}, gw, "", "gateway-eu", nil, ""},
		{Open(), Anonymous(), "", "", nil, ""},
		{Open(), Anonymous(), "anyone", "anyone", nil, ""},
		{Open(), gw, "gateway-us", "gateway-us", nil, ""}, // open mode: as requested
	} {
		caller, err := tc.a.ResolveCaller(tc.id, tc.requested)
		if caller != tc.caller || !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("ResolveCaller(%+v, %q) open=%v = %q, %v; want %q, %v", tc.id, tc.requested, tc.a.IsOpen(), caller, err, tc.caller, tc.want)
			continue
		}
		if tc.msg != "" && !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ResolveCaller(%+v, %q) = %q, want it to contain %q", tc.id, tc.requested, err, tc.msg)
		}
	}
}

// MayUse: the policies a caller's data calls may use, as the node filters
// the Policies answer by them; a limited caller may ask for them naming
// none.
func TestMayUse(t *testing.T) {
	a := Enforce(fixed(mustRules(t, exampleRules)))
	tok := func(c string) Identity { return Identity{Caller: c, Source: SourceToken} }
	for _, tc := range []struct {
		id     Identity
		policy string
		want   bool
	}{
		{tok("gateway-eu"), "api-paid", true},
		{tok("gateway-eu"), "api-us", false},
		{tok("ops"), "api-paid", false}, // admin only: no data call
		{tok("stranger"), "api-paid", false},
		{Anonymous(), "api-paid", false},
	} {
		if got := a.MayUse(tc.id, tc.policy); got != tc.want {
			t.Errorf("MayUse(%s, %s) = %v, want %v", tc.id.Caller, tc.policy, got, tc.want)
		}
	}
	if err := a.Authorize(tok("gateway-eu"), ActionPolicies, nil); err != nil {
		t.Errorf("a limited caller asking for its policies, naming none: %v", err)
	}
	if err := a.Authorize(tok("ops"), ActionPolicies, nil); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("an admin-only caller asking for the client's read of policies: %v, want ErrPermissionDenied", err)
	}
	if !Open().MayUse(Anonymous(), "any") || (*Authorizer)(nil).MayUse(tok("gateway-eu"), "api-paid") {
		t.Error("open mode allows every policy, the zero Authorizer none")
	}
}
