package envoyrls

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/admission"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

const testConfig = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /api/login
    rate_limit: {unit: hour, requests_per_unit: 1}
    descriptors:
      - key: user
        rate_limit: {unit: month, requests_per_unit: 7}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
---
domain: "Other Domain!"
descriptors:
  - key: k
    shadow_mode: true
    rate_limit: {unit: day, unit_multiplier: 2, requests_per_unit: 5}
`

func mustParse(t *testing.T, s string) *Config {
	t.Helper()
	c, err := Parse([]string{"test.yaml"}, [][]byte{[]byte(s)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func entries(kv ...string) ([]string, []string) {
	var k, v []string
	for i := 0; i+1 < len(kv); i += 2 {
		k, v = append(k, kv[i]), append(v, kv[i+1])
	}
	return k, v
}

// TestLookup follows the reference service's matching: an exact value
// first, then a prefix, then the key alone; the limit of the last entry
// only.
func TestLookup(t *testing.T) {
	c := mustParse(t, testConfig)
	for _, tc := range []struct {
		kv   []string
		rpu  uint32 // 99: no limit
		unit rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{[]string{"remote_address", "10.0.0.1"}, 10, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{[]string{"path", "/api/items"}, 3, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{[]string{"path", "/api/login"}, 1, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{[]string{"path", "/api/login", "user", "ann"}, 7, rlsv3.RateLimitResponse_RateLimit_MONTH},
		{[]string{"path", "/api/items", "user", "ann"}, 99, 0},
		{[]string{"path", "/web"}, 99, 0},
		{[]string{"remote_address", "10.0.0.1", "more", "x"}, 99, 0},
		{[]string{"blocked", "x"}, 0, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{[]string{"unknown", "x"}, 99, 0},
	} {
		k, v := entries(tc.kv...)
		l := c.lookup("web", k, v)
		switch {
		case tc.rpu == 99 && l != nil:
			t.Errorf("%v: limit %+v, want none", tc.kv, l)
		case tc.rpu != 99 && (l == nil || l.rpu != tc.rpu || l.unit != tc.unit):
			t.Errorf("%v: limit %+v, want %d per %v", tc.kv, l, tc.rpu, tc.unit)
		}
	}
	if l := c.lookup("nowhere", []string{"remote_address"}, []string{"x"}); l != nil {
		t.Errorf("unknown domain: %+v", l)
	}
}

// TestPolicies maps each counted limit onto a policy with a valid name.
func TestPolicies(t *testing.T) {
	c := mustParse(t, testConfig)
	pols := c.Policies()
	if len(pols) != 5 {
		t.Fatalf("%d policies, want 5 (requests_per_unit 0 counts nothing): %v", len(pols), pols)
	}
	seen := map[string]bool{}
	for _, p := range pols {
		if len(p.GetName()) > 64 || strings.Trim(p.GetName(), "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" || seen[p.GetName()] {
			t.Errorf("policy name %q", p.GetName())
		}
		seen[p.GetName()] = true
	}
	want := []struct {
		alg, calendar string
		period        time.Duration
		shadow        bool
	}{
		{"fixed_window", "", time.Second, false}, {"fixed_window", "", time.Minute, false}, {"fixed_window", "", time.Hour, false},
		{"quota", "month", 0, false}, {"fixed_window", "", 48 * time.Hour, true},
	}
	for i, w := range want {
		p := pols[i]
		if p.GetAlgorithm() != w.alg || p.GetCalendar() != w.calendar || p.GetPeriod().AsDuration() != w.period || p.GetShadow() != w.shadow {
			t.Errorf("policy %d: %v, want %+v", i, p, w)
		}
	}
	for i, want := range []string{"envoy.web.remote_address", "envoy.web.path.api", "envoy.web.path.api_login",
		"envoy.web.path.api_login.user", "envoy.other_domain.k"} {
		if pols[i].GetName() != want {
			t.Errorf("policy %d named %q, want %q", i, pols[i].GetName(), want)
		}
	}
	// The name depends on the path, not on the limit.
	again := mustParse(t, strings.Replace(testConfig, "requests_per_unit: 10", "requests_per_unit: 20", 1))
	if again.Policies()[0].GetName() != pols[0].GetName() || again.Policies()[0].GetLimit() != 20 {
		t.Errorf("changed limit: %v, was %v", again.Policies()[0], pols[0])
	}
}

// TestPolicyNames names a descriptor from its path, readable: hashed only
// when too long for a policy name or read the same as another's, and then
// every one of those, whichever comes first; a rate_limit without a name
// of its own is answered and headed with its policy's.
func TestPolicyNames(t *testing.T) {
	long := strings.Repeat("segment", 12)
	c := mustParse(t, `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: header_match
    value: "10.0.0.1"
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: Path
    value: /API/v1
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /api/v1/
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tenant
    value: `+long+`
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: named
    rate_limit: {name: "Login attempts", unit: minute, requests_per_unit: 5}
`)
	pols := c.Policies()
	names := make([]string, len(pols))
	for i, p := range pols {
		names[i] = p.GetName()
		pol := admission.Policy{Name: p.GetName(), Algorithm: admission.AlgorithmFixedWindow, Limit: 1, Period: time.Minute}
		if err := pol.Validate(); err != nil {
			t.Errorf("policy name %q: %v", p.GetName(), err)
		}
	}
	t.Logf("names %q", names)
	hashed := regexp.MustCompile(`\.[0-9a-f]{16}$`)
	if names[0] != "envoy.edge.remote_address" || names[1] != "envoy.edge.header_match.10.0.0.1" {
		t.Errorf("names %q", names[:2])
	}
	// /API/v1 and /api/v1/ read the same: both hashed, apart.
	if !strings.HasPrefix(names[2], "envoy.edge.path.api_v1.") || !hashed.MatchString(names[2]) ||
		!strings.HasPrefix(names[3], "envoy.edge.path.api_v1.") || !hashed.MatchString(names[3]) || names[2] == names[3] {
		t.Errorf("names read the same: %q, %q, want both hashed, apart", names[2], names[3])
	}
	if len(names[4]) > admission.MaxNameBytes || !strings.HasPrefix(names[4], "envoy.edge.tenant.segmentsegment") || !hashed.MatchString(names[4]) {
		t.Errorf("long name %q, want the readable start and a hash", names[4])
	}
	if names[5] != "envoy.edge.named" || len(names) != 6 {
		t.Fatalf("names %q", names)
	}
	// The answer names an unnamed limit as its policy, even one that
	// counts nothing, and a named one by its name.
	for _, tc := range []struct{ key, name string }{
		{"remote_address", "envoy.edge.remote_address"}, {"blocked", "envoy.edge.blocked"}, {"named", "Login attempts"},
	} {
		if l := c.lookup("edge", []string{tc.key}, []string{"x"}); l == nil || l.name != tc.name {
			t.Errorf("%s: limit %+v, want it named %q", tc.key, l, tc.name)
		}
	}
	// Another file order names the same descriptors the same.
	again := mustParse(t, `
domain: edge
descriptors:
  - key: path
    value: /api/v1/
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: Path
    value: /API/v1
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	if p := again.Policies(); p[0].GetName() != names[3] || p[1].GetName() != names[2] {
		t.Errorf("names in another order %q %q, want %q %q", p[0].GetName(), p[1].GetName(), names[3], names[2])
	}
}

// TestParseErrors names the field at fault.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"descriptors: []", "domain: must not be empty"},
		{"domain: a\ndescriptors:\n  - value: x", "descriptors[0].key: must not be empty"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}", "descriptors[0].rate_limit.unit: must be one of"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}", "descriptors[0].rate_limit.requests_per_unit: is required"},
		{"domain: a\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: {unlimited: true, unit: second}", "descriptors[0].descriptors[0].rate_limit.unlimited: excludes"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, unit_multiplier: 2, requests_per_unit: 1}", "rate_limit.unit_multiplier: must be 1 for unit month"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, unit_multiplier: 367, requests_per_unit: 1}", "rate_limit.unit_multiplier: 367 days exceed 366 days"},
		{"domain: a\ndescriptors:\n  - key: k\n  - key: k", "descriptors[1]: key \"k\" without a value is configured twice"},
		{"domain: a\ndescriptors:\n  - key: k\n    shadow_mode: true", "descriptors[0].shadow_mode: needs a rate_limit"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: x}]}", "field replaces not found"},
		{"domain: a\n---\ndomain: a", "document 2): domain: \"a\" is configured twice"},
		{"domain: a\nlocal: {mode: reserve}", "local.mode: must be grant or sync (got \"reserve\")"},
		{"domain: a\nlocal: {mode: grant, ttl: soon}", "local.ttl: \"soon\" is not a duration"},
		{"domain: a\nlocal: {mode: grant, budget: 3}", "field budget not found"},
	} {
		_, err := Parse([]string{"f.yaml"}, [][]byte{[]byte(tc.yaml)})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "f.yaml") {
			t.Errorf("%q: error %v, want one naming f.yaml and %q", tc.yaml, err, tc.want)
		}
	}
}

func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	k, v := entries(kv...)
	for i := range k {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: k[i], Value: v[i]})
	}
	return d
}

// TestPlan builds one Admit of every counted descriptor, keyed under the
// domain's hash tag, with Envoy's request ID folded into request_id.
func TestPlan(t *testing.T) {
	c := mustParse(t, testConfig)
	req := &rlsv3.RateLimitRequest{Domain: "web", HitsAddend: 2, Descriptors: []*commonv3.RateLimitDescriptor{
		desc("remote_address", "10.0.0.1"), desc("nope", "x"), desc("path", "/api/a=b/c"),
	}}
	p, err := newPlan(c, req, "rid")
	if err != nil {
		t.Fatal(err)
	}
	a := p.admit
	if a == nil || a.GetKey() != "{envoy:web}remote_address=10.0.0.1" || a.GetCost() != 2 || len(a.GetAlso()) != 1 ||
		a.GetAlso()[0].GetKey() != "{envoy:web}path=%2Fapi%2Fa%3Db%2Fc" || a.GetRequestId() == "" || len(a.GetRequestId()) > 128 {
		t.Fatalf("admit %v", a)
	}
	q, _ := newPlan(c, req, "rid")
	r, _ := newPlan(c, &rlsv3.RateLimitRequest{Domain: "web", HitsAddend: 3, Descriptors: req.Descriptors}, "rid")
	if q.admit.GetRequestId() != a.GetRequestId() || r.admit.GetRequestId() == a.GetRequestId() {
		t.Errorf("request IDs %q %q %q: want the first two equal, the third other", a.GetRequestId(), q.admit.GetRequestId(), r.admit.GetRequestId())
	}
	if p, _ := newPlan(c, req, ""); p.admit.GetRequestId() != "" {
		t.Errorf("request_id %q without Envoy's", p.admit.GetRequestId())
	}

	// requests_per_unit 0 denies without an Admit; a long key is hashed.
	p, err = newPlan(c, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{
		desc("blocked", "x"), desc("remote_address", strings.Repeat("a", 600))}}, "")
	if err != nil || p.admit != nil || !p.over {
		t.Fatalf("blocked: %+v, %v", p, err)
	}
	resp := p.answer(nil, true)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.GetStatuses()[1].GetCode() != rlsv3.RateLimitResponse_OK || len(resp.GetResponseHeadersToAdd()) != 0 || resp.GetDynamicMetadata() != nil {
		t.Fatalf("blocked answer %v", resp)
	}
	if k := descriptorKey(hashTag("web"), []string{"k"}, []string{strings.Repeat("a", 600)}); len(k) > maxKeyBytes || !strings.HasPrefix(k, "{envoy:web}sha256:") {
		t.Errorf("long key %q", k)
	}

	for _, bad := range []struct {
		req   *rlsv3.RateLimitRequest
		field string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*commonv3.RateLimitDescriptor{desc("k", "v")}}, "domain"},
		{&rlsv3.RateLimitRequest{Domain: "web"}, "descriptors"},
		{&rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{{IsNegativeHits: true}}}, "descriptors[0].is_negative_hits"},
	} {
		if _, err := newPlan(c, bad.req, ""); err == nil || err.(*RequestError).Field != bad.field {
			t.Errorf("%v: error %v, want one on %s", bad.req, err, bad.field)
		}
	}
	many := &rlsv3.RateLimitRequest{Domain: "web"}
	for range admission.MaxChecks {
		many.Descriptors = append(many.Descriptors, desc("remote_address", "x"))
	}
	if p, err := newPlan(c, many, ""); err != nil || len(p.checks) != admission.MaxChecks {
		t.Errorf("%d counted descriptors: %v", admission.MaxChecks, err)
	}
	many.Descriptors = append(many.Descriptors, desc("remote_address", "x"))
	want := fmt.Sprintf("descriptors: at most %d descriptors with a counted rate_limit in one request, decided together in one Admit (got %d)",
		admission.MaxChecks, admission.MaxChecks+1)
	if _, err := newPlan(c, many, ""); err == nil || err.Error() != want {
		t.Errorf("%d counted descriptors: %v, want %q", admission.MaxChecks+1, err, want)
	}
}

// TestAnswer maps a multi-check Admit's answer onto the statuses, and puts
// the RateLimit fields of the descriptor with the fewest left.
func TestAnswer(t *testing.T) {
	c := mustParse(t, testConfig)
	p, err := newPlan(c, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{
		desc("internal", "x"), desc("remote_address", "a"), desc("path", "/api/x")}}, "")
	if err != nil {
		t.Fatal(err)
	}
	resp := p.answer(&quoratev1.AdmitResponse{Allowed: false, DeniedCheck: proto.Int32(1), Checks: []*quoratev1.CheckResult{
		{Allowed: true, Limit: 10, Remaining: 4, ResetAfter: durationpb.New(300 * time.Millisecond)},
		{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: durationpb.New(42 * time.Second)},
	}}, true)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("overall %v", resp)
	}
	st := resp.GetStatuses()
	if st[0].GetCode() != rlsv3.RateLimitResponse_OK || st[0].GetCurrentLimit() != nil ||
		st[1].GetCode() != rlsv3.RateLimitResponse_OK || st[1].GetLimitRemaining() != 4 || st[1].GetCurrentLimit().GetRequestsPerUnit() != 10 ||
		st[2].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st[2].GetLimitRemaining() != 0 || st[2].GetDurationUntilReset().AsDuration() != 42*time.Second {
		t.Fatalf("statuses %v", st)
	}
	name := c.Policies()[1].GetName()
	h := resp.GetResponseHeadersToAdd()
	if len(h) != 2 || h[0].GetKey() != "RateLimit-Policy" || h[0].GetValue() != `"`+name+`";q=3;w=60` ||
		h[1].GetKey() != "RateLimit" || h[1].GetValue() != `"`+name+`";r=0;t=42` {
		t.Fatalf("headers %v", h)
	}
}

// TestAnswerOneVersion: an answer's limit is the one its decision used. A
// call right after the file changed from 5 to 50 a minute may be decided
// under the policy's version before (a group not yet caught up): its
// remaining is then of 5, and so is the limit it reports, with the
// decision's window when that changed too.
func TestAnswerOneVersion(t *testing.T) {
	c := mustParse(t, "domain: web\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 50}\n")
	name := c.Policies()[0].GetName()
	for _, tc := range []struct {
		window time.Duration
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
		mult   uint32
		policy string
	}{
		{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0, `"` + name + `";q=5;w=60`},
		{0, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0, `"` + name + `";q=5;w=60`},
		{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR, 0, `"` + name + `";q=5;w=3600`},
		{2 * time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR, 2, `"` + name + `";q=5;w=7200`},
		{90 * time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND, 90, `"` + name + `";q=5;w=90`},
	} {
		p, err := newPlan(c, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{desc("k", "x")}}, "")
		if err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 12, 6, 9, 30, 0, 123456789, time.UTC)
		decided := &quoratev1.AdmitResponse{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: durationpb.New(30 * time.Second),
			DecidedAt: timestamppb.New(at)}
		if tc.window > 0 {
			decided.Window = durationpb.New(tc.window)
		}
		resp := p.answer(decided, true)
		st := resp.GetStatuses()[0]
		cl := st.GetCurrentLimit()
		if cl.GetRequestsPerUnit() != 5 || st.GetLimitRemaining() != 4 || cl.GetUnit() != tc.unit || cl.GetUnitMultiplier().GetValue() != tc.mult || cl.GetName() != name {
			t.Errorf("window %v: status %v, want 5 per %d %v with 4 remaining", tc.window, st, max(tc.mult, 1), tc.unit)
		}
		if got := resp.GetDynamicMetadata().GetFields()[MetadataDecidedAt].GetStringValue(); got != "2026-12-06T09:30:00.123456789Z" {
			t.Errorf("window %v: dynamic metadata %s = %q, want the decision's log time", tc.window, MetadataDecidedAt, got)
		}
		if h := resp.GetResponseHeadersToAdd(); len(h) != 2 || h[0].GetValue() != tc.policy {
			t.Errorf("window %v: headers %v, want RateLimit-Policy %s", tc.window, h, tc.policy)
		}
	}
}

// TestDomainLocal: a domain's local block (Quorate's own key) is the local
// block of every policy its descriptors make; another domain's stay
// without.
func TestDomainLocal(t *testing.T) {
	c := mustParse(t, `
domain: hot
local: {mode: grant, max_grant: 50, ttl: 5s}
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 1000}
---
domain: cold
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
`)
	n := 0
	for _, p := range c.Policies() {
		l := p.GetLocal()
		switch {
		case strings.Contains(p.GetName(), "hot"):
			n++
			if l.GetMode() != "grant" || l.GetMaxGrant() != 50 || l.GetTtl().AsDuration() != 5*time.Second {
				t.Errorf("%s: local %v, want the domain's", p.GetName(), l)
			}
		case l != nil:
			t.Errorf("%s: local %v, want none", p.GetName(), l)
		}
	}
	if n != 2 {
		t.Fatalf("%d policies of domain hot, want 2: %v", n, c.Policies())
	}
}
