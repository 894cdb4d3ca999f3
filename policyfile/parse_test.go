package policyfile

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/node"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestParsePolicyFileGood parses good files into the policies they say,
// compared on the wire: a field left out or null stays unset.
func TestParsePolicyFileGood(t *testing.T) {
	tests := []struct {
		name string
		file string
		want []*quoratev1.Policy
	}{
		{"fields", `
# comment
policies:
  - name: api-free
    algorithm: token_bucket
    limit: 60
    period: 1m
    burst: 20
    max_cost: 10
    on_unavailable: allow
    dedupe_retention: 30m
  - name: login
    algorithm: token_bucket
    limit: 5
    period: 15m
    burst: ~          # null: unset, like absent
    dedupe_retention: ~
`, []*quoratev1.Policy{
			{Name: "api-free", Algorithm: "token_bucket", Limit: 60, Period: durationpb.New(time.Minute), Burst: proto.Int64(20), MaxCost: proto.Int64(10), OnUnavailable: "allow",
				DedupeRetention: durationpb.New(30 * time.Minute)},
			{Name: "login", Algorithm: "token_bucket", Limit: 5, Period: durationpb.New(15 * time.Minute)},
		}},
		{"calendar and shadow", `
policies:
  - name: reports
    algorithm: quota
    limit: 1000
    calendar: month
    shadow: true
  - name: api
    algorithm: token_bucket
    limit: 60
    period: 1m
    shadow: false
  - name: daily
    algorithm: quota
    limit: 5
    calendar: day
    shadow: ~      # null: unset, like absent
`, []*quoratev1.Policy{
			{Name: "reports", Algorithm: "quota", Limit: 1000, Period: durationpb.New(0), Calendar: "month", Shadow: true},
			{Name: "api", Algorithm: "token_bucket", Limit: 60, Period: durationpb.New(time.Minute)},
			{Name: "daily", Algorithm: "quota", Limit: 5, Period: durationpb.New(0), Calendar: "day"},
		}},
		{"lease_ttl", `
policies:
  - name: reports-active
    algorithm: concurrency
    limit: 2
    lease_ttl: 2m
  - name: jobs
    algorithm: concurrency   # lease_ttl unset: the server's default, 1m
    limit: 10
  - name: nightly
    algorithm: concurrency
    limit: 1
    lease_ttl: ~             # null: unset, like absent
    on_unavailable: deny
    dedupe_retention: 1h
  - name: exports
    algorithm: concurrency
    limit: 3
    lease_ttl: 24h
    burst: 3                 # equal to limit: allowed
    max_cost: 1
`, []*quoratev1.Policy{
			{Name: "reports-active", Algorithm: "concurrency", Limit: 2, Period: durationpb.New(0), LeaseTtl: durationpb.New(2 * time.Minute)},
			{Name: "jobs", Algorithm: "concurrency", Limit: 10, Period: durationpb.New(0)},
			{Name: "nightly", Algorithm: "concurrency", Limit: 1, Period: durationpb.New(0), OnUnavailable: "deny", DedupeRetention: durationpb.New(time.Hour)},
			{Name: "exports", Algorithm: "concurrency", Limit: 3, Period: durationpb.New(0), Burst: proto.Int64(3), MaxCost: proto.Int64(1),
				LeaseTtl: durationpb.New(24 * time.Hour)},
		}},
		{"local grant", `
policies:
  - name: a
    algorithm: fixed_window
    limit: 1000
    period: 1m
    local:
      mode: grant
      max_grant: 50
      ttl: 2s
  - name: b
    algorithm: token_bucket
    limit: 10
    period: 1s
    local: {mode: grant}
`, []*quoratev1.Policy{
			{Name: "a", Algorithm: "fixed_window", Limit: 1000, Period: durationpb.New(time.Minute),
				Local: &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(50), Ttl: durationpb.New(2 * time.Second)}},
			{Name: "b", Algorithm: "token_bucket", Limit: 10, Period: durationpb.New(time.Second), Local: &quoratev1.LocalDecisions{Mode: "grant"}},
		}},
		{"local sync", `
policies:
  - name: a
    algorithm: token_bucket
    limit: 100
    period: 1s
    local: {mode: sync, sync_interval: 500ms}
  - name: b
    algorithm: quota
    limit: 86400
    calendar: day
    local:
      mode: sync
`, []*quoratev1.Policy{
			{Name: "a", Algorithm: "token_bucket", Limit: 100, Period: durationpb.New(time.Second),
				Local: &quoratev1.LocalDecisions{Mode: "sync", SyncInterval: durationpb.New(500 * time.Millisecond)}},
			{Name: "b", Algorithm: "quota", Limit: 86400, Period: durationpb.New(0), Calendar: "day", Local: &quoratev1.LocalDecisions{Mode: "sync"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse("p.yaml", []byte(tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d policies, want %d", len(got), len(tt.want))
			}
			for i := range tt.want {
				if !proto.Equal(got[i], tt.want[i]) {
					t.Errorf("policy %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestParsePolicyFileErrors(t *testing.T) {
	// head is a valid first policy, so that errors in the second one show
	// that index and name are reported.
	const head = "policies:\n" +
		"  - name: ok\n" +
		"    algorithm: token_bucket\n" +
		"    limit: 1\n" +
		"    period: 1s\n"
	tests := []struct {
		name   string
		file   string
		field  string
		line   int
		index  int
		policy string
		cause  error // wrapped, when not nil
	}{
		{"unknown field", head + "  - name: login\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    brust: 3\n",
			"brust", 10, 1, "login", nil},
		{"bad duration", head + "  - name: login\n    algorithm: token_bucket\n    limit: 5\n    period: fast\n",
			"period", 9, 1, "login", nil},
		{"duration without unit", head + "  - name: login\n    algorithm: token_bucket\n    limit: 5\n    period: 60\n",
			"period", 9, 1, "login", nil},
		{"missing name", head + "  - algorithm: token_bucket\n    limit: 5\n    period: 1m\n",
			"name", 6, 1, "", admission.ErrInvalidPolicy},
		{"bad algorithm", head + "  - name: login\n    algorithm: leaky\n    limit: 5\n    period: 1m\n",
			"algorithm", 7, 1, "login", admission.ErrInvalidPolicy},
		{"limit 0", head + "  - name: login\n    algorithm: token_bucket\n    limit: 0\n    period: 1m\n",
			"limit", 8, 1, "login", admission.ErrInvalidPolicy},
		{"limit not a number", head + "  - name: login\n    algorithm: token_bucket\n    limit: lots\n    period: 1m\n",
			"limit", 8, 1, "login", nil},
		{"max_cost over burst", head + "  - name: login\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    burst: 2\n    max_cost: 3\n",
			"max_cost", 11, 1, "login", admission.ErrInvalidPolicy},
		{"repeated field", head + "  - name: login\n    limit: 5\n    limit: 6\n",
			"limit", 8, 1, "login", nil},
		{"duplicate name", head + "  - name: ok\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n",
			"name", 6, 1, "ok", nil},
		{"unknown top-level field", "policy:\n  - name: x\n", "policy", 1, -1, "", nil},
		{"no policies", "policies: []\n", "policies", 1, -1, "", nil},
		{"policy not a mapping", "policies:\n  - just-a-name\n", "", 2, 0, "", nil},
		{"dedupe_retention not a duration", head + "  - name: login\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    dedupe_retention: forever\n",
			"dedupe_retention", 10, 1, "login", nil},
		{"dedupe_retention without unit", head + "  - name: login\n    algorithm: token_bucket\n    limit: 5\n    dedupe_retention: 600\n    period: 1m\n",
			"dedupe_retention", 9, 1, "login", nil},
		{"dedupe_retention below 1s", head + "  - name: login\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    dedupe_retention: 0.5s\n",
			"dedupe_retention", 10, 1, "login", admission.ErrInvalidPolicy},
		{"dedupe_retention over 24h", head + "  - name: login\n    algorithm: token_bucket\n    dedupe_retention: 25h\n    limit: 5\n    period: 1m\n",
			"dedupe_retention", 8, 1, "login", admission.ErrInvalidPolicy},
		{"burst 0", head + "  - name: login\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    burst: 0\n",
			"burst", 10, 1, "login", admission.ErrInvalidPolicy},
		{"max_cost 0", head + "  - name: login\n    algorithm: token_bucket\n    limit: 5\n    max_cost: 0\n    period: 1m\n",
			"max_cost", 9, 1, "login", admission.ErrInvalidPolicy},
		{"dedupe_retention 0s", head + "  - name: login\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    dedupe_retention: 0s\n",
			"dedupe_retention", 10, 1, "login", admission.ErrInvalidPolicy},
		{"lease_ttl 0s", head + "  - name: jobs\n    algorithm: concurrency\n    limit: 5\n    lease_ttl: 0s\n",
			"lease_ttl", 9, 1, "jobs", admission.ErrInvalidPolicy},
		{"dedupe_retention a list", head + "  - name: login\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    dedupe_retention: [1m]\n",
			"dedupe_retention", 10, 1, "login", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tt.file))
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("got %v (%T), want a *Error", err, err)
			}
			if pe.Field != tt.field || pe.Line != tt.line || pe.Index != tt.index || pe.Name != tt.policy || pe.File != "p.yaml" {
				t.Errorf("got field %q line %d index %d name %q file %q, want field %q line %d index %d name %q",
					pe.Field, pe.Line, pe.Index, pe.Name, pe.File, tt.field, tt.line, tt.index, tt.policy)
			}
			if tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Errorf("error %v does not wrap %v", err, tt.cause)
			}
			if !strings.Contains(err.Error(), tt.field) || !strings.HasPrefix(err.Error(), "p.yaml:") {
				t.Errorf("error %q does not name the file and field %q", err, tt.field)
			}
		})
	}
}

// TestParsePolicyFileFieldErrors checks the error of each bad field of a
// second policy, q: its field, line, index and name, what it says, and the
// error it wraps.
func TestParsePolicyFileFieldErrors(t *testing.T) {
	const head = "policies:\n" +
		"  - name: ok\n" +
		"    algorithm: token_bucket\n" +
		"    limit: 1\n" +
		"    period: 1s\n"
	// local is head and a policy q to which a row adds a local: block.
	const local = head + "  - name: q\n    algorithm: fixed_window\n    limit: 100\n    period: 1m\n"
	tests := []struct {
		name   string
		file   string
		field  string
		line   int
		reason string // a part of the message
		cause  error  // wrapped, when not nil
	}{
		{"quota without calendar", head + "  - name: q\n    algorithm: quota\n    limit: 5\n",
			"calendar", 6, "required", admission.ErrInvalidPolicy},
		{"bad calendar", head + "  - name: q\n    algorithm: quota\n    limit: 5\n    calendar: fortnight\n",
			"calendar", 9, "fortnight", admission.ErrInvalidPolicy},
		{"calendar on a token bucket", head + "  - name: q\n    algorithm: token_bucket\n    calendar: day\n    limit: 5\n    period: 1m\n",
			"calendar", 8, "only for algorithm quota", admission.ErrInvalidPolicy},
		{"calendar a list", head + "  - name: q\n    algorithm: quota\n    limit: 5\n    calendar: [month]\n",
			"calendar", 9, "single value", nil},
		{"quota with a period", head + "  - name: q\n    algorithm: quota\n    limit: 5\n    calendar: week\n    period: 1h\n",
			"period", 10, "unset for quota", admission.ErrInvalidPolicy},
		{"shadow yes", head + "  - name: q\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    shadow: yes\n",
			"shadow", 10, `expected true or false, got "yes"`, nil},
		{"shadow 1", head + "  - name: q\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    shadow: 1\n",
			"shadow", 10, `expected true or false, got "1"`, nil},
		{"shadow quoted", head + "  - name: q\n    algorithm: token_bucket\n    limit: 5\n    shadow: \"true\"\n    period: 1m\n",
			"shadow", 9, "expected true or false", nil},
		{"shadow a mapping", head + "  - name: q\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    shadow: {on: true}\n",
			"shadow", 10, "single value", nil},
		{"shadow repeated", head + "  - name: q\n    shadow: true\n    algorithm: token_bucket\n    shadow: false\n",
			"shadow", 9, "repeated field (first at line 7)", nil},
		{"shadow misspelt", head + "  - name: q\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    shadows: true\n",
			"shadows", 10, "known fields: name, algorithm, limit, period, calendar, burst, max_cost, on_unavailable, shadow, dedupe_retention, lease_ttl", nil},
		{"lease_ttl not a duration", head + "  - name: q\n    algorithm: concurrency\n    limit: 2\n    lease_ttl: forever\n",
			"lease_ttl", 9, `invalid duration "forever"`, nil},
		{"lease_ttl without unit", head + "  - name: q\n    algorithm: concurrency\n    lease_ttl: 120\n    limit: 2\n",
			"lease_ttl", 8, `invalid duration "120"`, nil},
		{"lease_ttl below 1s", head + "  - name: q\n    algorithm: concurrency\n    limit: 2\n    lease_ttl: 500ms\n",
			"lease_ttl", 9, "must be between 1s and 24h (got 500ms)", admission.ErrInvalidPolicy},
		{"lease_ttl negative", head + "  - name: q\n    algorithm: concurrency\n    limit: 2\n    lease_ttl: -1m\n",
			"lease_ttl", 9, "must be between 1s and 24h (got -1m0s)", admission.ErrInvalidPolicy},
		{"lease_ttl over 24h", head + "  - name: q\n    lease_ttl: 25h\n    algorithm: concurrency\n    limit: 2\n",
			"lease_ttl", 7, "must be between 1s and 24h (got 25h0m0s)", admission.ErrInvalidPolicy},
		{"lease_ttl on a token bucket", head + "  - name: q\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    lease_ttl: 2m\n",
			"lease_ttl", 10, "only for algorithm concurrency", admission.ErrInvalidPolicy},
		{"lease_ttl on a quota", head + "  - name: q\n    algorithm: quota\n    lease_ttl: 2m\n    limit: 5\n    calendar: day\n",
			"lease_ttl", 8, "only for algorithm concurrency", admission.ErrInvalidPolicy},
		{"lease_ttl a list", head + "  - name: q\n    algorithm: concurrency\n    limit: 2\n    lease_ttl: [2m]\n",
			"lease_ttl", 9, "single value", nil},
		{"lease_ttl repeated", head + "  - name: q\n    algorithm: concurrency\n    lease_ttl: 1m\n    limit: 2\n    lease_ttl: 2m\n",
			"lease_ttl", 10, "repeated field (first at line 8)", nil},
		{"lease_ttl misspelt", head + "  - name: q\n    algorithm: concurrency\n    limit: 2\n    lease_tll: 2m\n",
			"lease_tll", 9, "unknown field; known fields: ", nil},
		{"concurrency with a period", head + "  - name: q\n    algorithm: concurrency\n    limit: 2\n    period: 2m\n",
			"period", 9, "use lease_ttl", admission.ErrInvalidPolicy},
		{"concurrency without limit", head + "  - name: q\n    algorithm: concurrency\n    lease_ttl: 2m\n",
			"limit", 6, "between 1 and 10000 slots", admission.ErrInvalidPolicy},
		{"concurrency limit too high", head + "  - name: q\n    algorithm: concurrency\n    limit: 10001\n",
			"limit", 8, "between 1 and 10000 slots", admission.ErrInvalidPolicy},
		{"concurrency burst", head + "  - name: q\n    algorithm: concurrency\n    limit: 2\n    burst: 3\n",
			"burst", 9, "equal to limit", admission.ErrInvalidPolicy},
		{"concurrency calendar", head + "  - name: q\n    algorithm: concurrency\n    limit: 2\n    calendar: day\n",
			"calendar", 9, "only for algorithm quota", admission.ErrInvalidPolicy},
		{"local mode unknown", local + "    local: {mode: eventually}\n", "local.mode", 6, "eventually", nil},
		{"local mode missing", local + "    local: {max_grant: 5}\n", "local.mode", 10, "missing", nil},
		{"local unknown field", local + "    local: {mode: grant, budget: 5}\n", "local.budget", 10, "unknown field", nil},
		{"local max_grant 0", local + "    local: {mode: grant, max_grant: 0}\n", "local.max_grant", 10, "must not be 0", nil},
		{"local max_grant over the burst", local + "    local: {mode: grant, max_grant: 101}\n", "local.max_grant", 6, "101", nil},
		{"local ttl 0", local + "    local: {mode: grant, ttl: 0s}\n", "local.ttl", 10, "must not be 0", nil},
		{"local ttl too short", local + "    local: {mode: grant, ttl: 10ms}\n", "local.ttl", 6, "10ms", nil},
		{"local not a mapping", local + "    local: reserve\n", "local", 10, "expected a mapping", nil},
		{"local on a sliding_log", head + "  - name: q\n    algorithm: sliding_log\n    limit: 5\n    period: 1m\n    local: {mode: grant}\n",
			"local.mode", 6, "sliding_log", nil},
		{"local sync_interval 0", local + "    local: {mode: sync, sync_interval: 0s}\n", "local.sync_interval", 10, "must not be 0", nil},
		{"local sync_interval too short", local + "    local: {mode: sync, sync_interval: 5ms}\n", "local.sync_interval", 6, "5ms", nil},
		{"local sync_interval too long", local + "    local: {mode: sync, sync_interval: 2m}\n", "local.sync_interval", 6, "between", nil},
		{"local sync_interval not a duration", local + "    local: {mode: sync, sync_interval: soon}\n", "local.sync_interval", 10, "10ms and 1m", nil},
		{"local sync_interval in grant mode", local + "    local: {mode: grant, sync_interval: 1s}\n", "local.sync_interval", 6, "sync only", nil},
		{"local max_grant in sync mode", local + "    local: {mode: sync, max_grant: 5}\n", "local.max_grant", 6, "grant mode only", nil},
		{"local ttl in sync mode", local + "    local: {mode: sync, ttl: 5s}\n", "local.ttl", 6, "grant mode only", nil},
		{"local sync_interval without a mode", local + "    local: {sync_interval: 1s}\n", "local.mode", 10, "need a mode", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tt.file))
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("got %v (%T), want a *Error", err, err)
			}
			if pe.Field != tt.field || pe.Line != tt.line || pe.Index != 1 || pe.Name != "q" {
				t.Errorf("got field %q line %d index %d name %q, want field %q line %d index 1 name q",
					pe.Field, pe.Line, pe.Index, pe.Name, tt.field, tt.line)
			}
			prefix := fmt.Sprintf("p.yaml:%d: policies[1] (q): %s: ", tt.line, tt.field)
			if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("error %q, want it to start with %q and contain %q", err, prefix, tt.reason)
			}
			if tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Errorf("error %v does not wrap %v", err, tt.cause)
			}
		})
	}
}

// TestPolicyFileErrorText pins whole messages: the file, the line, the
// policy and the field, then what is wrong.
func TestPolicyFileErrorText(t *testing.T) {
	const head = "policies:\n" +
		"  - name: api\n" +
		"    algorithm: token_bucket\n" +
		"    limit: 1\n" +
		"    period: 1s\n"
	for _, tc := range []struct{ path, file, want string }{
		{"examples/policies.yaml", head + "  - name: login\n    period: fast\n",
			`examples/policies.yaml:7: policies[1] (login): period: invalid duration "fast"`},
		{"p.yaml", head + "    dedupe_retention: forever\n", `p.yaml:6: policies[0] (api): dedupe_retention: invalid duration "forever"`},
		{"p.yaml", head + "    dedupe_retention: 0.5s\n",
			`p.yaml:6: policies[0] (api): dedupe_retention: must be between 1s and 24h0m0s (got 500ms)`},
	} {
		_, err := Parse(tc.path, []byte(tc.file))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("got %v, want it to start with %s", err, tc.want)
		}
	}
}

// TestPolicyFileNullName checks that a name written without a value is
// not shown as the policy's name: "(~)" would read as a policy called "~".
func TestPolicyFileNullName(t *testing.T) {
	for _, null := range []string{"~", "null", ""} {
		file := "policies:\n  - name: " + null + "\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n"
		_, err := Parse("p.yaml", []byte(file))
		var pe *Error
		if !errors.As(err, &pe) || pe.Name != "" || pe.Field != "name" || pe.Line != 2 ||
			!strings.HasPrefix(err.Error(), "p.yaml:2: policies[0]: name: ") {
			t.Errorf("name: %s: got %v", null, err)
		}
	}
}

func TestParsePolicyFileSyntax(t *testing.T) {
	for name, file := range map[string]string{
		"empty":           "",
		"not a mapping":   "- a\n- b\n",
		"bad YAML":        "policies: [\n",
		"two documents":   "policies:\n  - name: a\n---\npolicies: []\n",
		"policies scalar": "policies: 3\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(file))
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("got %v (%T), want a *Error", err, err)
			}
		})
	}
}

func TestExamplePoliciesFile(t *testing.T) {
	policies, err := Read("../examples/policies.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]admission.Policy{
		"api-free": {Algorithm: "token_bucket", Limit: 60, Period: time.Minute, Burst: 20, MaxCost: 10, OnUnavailable: "allow",
			Local: admission.Local{Mode: admission.LocalGrant, MaxGrant: 10}},
		"api-paid":          {Algorithm: "token_bucket", Limit: 5000, Period: time.Minute, Burst: 500, DedupeRetention: 30 * time.Minute},
		"provider-webhooks": {Algorithm: "token_bucket", Limit: 20, Period: time.Second, Burst: 1, OnUnavailable: "deny"},
		"login-attempts":    {Algorithm: "token_bucket", Limit: 5, Period: 15 * time.Minute, Burst: 5, OnUnavailable: "deny"},
		"login-failures":    {Algorithm: "sliding_log", Limit: 5, Period: 15 * time.Minute, OnUnavailable: "deny"},
		"reports-monthly":   {Algorithm: "quota", Limit: 1000, Calendar: "month"},
		"search": {Algorithm: "fixed_window", Limit: 100, Period: time.Minute, MaxCost: 10,
			Local: admission.Local{Mode: admission.LocalGrant}},
		"search-smooth":  {Algorithm: "sliding_window", Limit: 100, Period: time.Minute, Shadow: true},
		"reports-active": {Algorithm: "concurrency", Limit: 2, LeaseTTL: 2 * time.Minute},
		"tokens":         {Algorithm: "token_bucket", Limit: 100000, Period: time.Minute, Burst: 20000, MaxCost: 8000},
		"internal-search": {Algorithm: "token_bucket", Limit: 20000, Period: time.Second,
			Local: admission.Local{Mode: admission.LocalGrant, MaxGrant: 2000, TTL: 5 * time.Second}},
	}
	if len(policies) != len(want) {
		t.Fatalf("got %d policies, want %d", len(policies), len(want))
	}
	for _, p := range policies {
		w, ok := want[p.GetName()]
		if !ok {
			t.Errorf("unexpected policy %q", p.GetName())
			continue
		}
		w.Name = p.GetName()
		got := node.PolicyFromAPI(p)
		if got != w {
			t.Errorf("policy %s = %+v, want %+v", p.GetName(), got, w)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("policy %s: %v", p.GetName(), err)
		}
	}
	if _, err := Read("no-such-file.yaml", nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want fs.ErrNotExist", err)
	}
}
