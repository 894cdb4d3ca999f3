package main

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/admission"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func TestParsePolicyFileGood(t *testing.T) {
	const file = `
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
`
	got, err := parsePolicyFile("p.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	want := []*quoratev1.Policy{
		{Name: "api-free", Algorithm: "token_bucket", Limit: 60, Period: durationpb.New(time.Minute), Burst: 20, MaxCost: 10, OnUnavailable: "allow",
			DedupeRetention: durationpb.New(30 * time.Minute)},
		{Name: "login", Algorithm: "token_bucket", Limit: 5, Period: durationpb.New(15 * time.Minute)},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d policies, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("policy %d = %v, want %v", i, got[i], want[i])
		}
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
		{"dedupe_retention a list", head + "  - name: login\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    dedupe_retention: [1m]\n",
			"dedupe_retention", 10, 1, "login", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parsePolicyFile("p.yaml", []byte(tt.file))
			var pe *PolicyFileError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v (%T), want a *PolicyFileError", err, err)
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

func TestPolicyFileErrorText(t *testing.T) {
	const file = "policies:\n" +
		"  - name: api\n" +
		"    algorithm: token_bucket\n" +
		"    limit: 1\n" +
		"    period: 1s\n" +
		"  - name: login\n" +
		"    period: fast\n"
	_, err := parsePolicyFile("examples/policies.yaml", []byte(file))
	want := `examples/policies.yaml:7: policies[1] (login): period: invalid duration "fast"`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want it to start with %s", err, want)
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
			_, err := parsePolicyFile("p.yaml", []byte(file))
			var pe *PolicyFileError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v (%T), want a *PolicyFileError", err, err)
			}
		})
	}
}

func TestExamplePoliciesFile(t *testing.T) {
	policies, err := readPolicyFile("../../examples/policies.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		limit, burst int64
		period       time.Duration
		onUnavail    string
		retention    time.Duration // 0: unset
	}{
		"api-free":          {60, 20, time.Minute, "allow", 0},
		"api-paid":          {5000, 500, time.Minute, "", 30 * time.Minute},
		"provider-webhooks": {20, 1, time.Second, "deny", 0},
		"login-attempts":    {5, 5, 15 * time.Minute, "deny", 0},
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
		if p.GetLimit() != w.limit || p.GetBurst() != w.burst || p.GetPeriod().AsDuration() != w.period || p.GetOnUnavailable() != w.onUnavail ||
			(p.GetDedupeRetention() != nil) != (w.retention != 0) || p.GetDedupeRetention().AsDuration() != w.retention {
			t.Errorf("policy %s = %v", p.GetName(), p)
		}
		ap := admission.Policy{Name: p.GetName(), Algorithm: admission.Algorithm(p.GetAlgorithm()), Limit: p.GetLimit(),
			Period: p.GetPeriod().AsDuration(), Burst: p.GetBurst(), MaxCost: p.GetMaxCost(),
			OnUnavailable: admission.OnUnavailable(p.GetOnUnavailable()), DedupeRetention: p.GetDedupeRetention().AsDuration()}
		if err := ap.Validate(); err != nil {
			t.Errorf("policy %s: %v", p.GetName(), err)
		}
	}
	if _, err := readPolicyFile("no-such-file.yaml", nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want fs.ErrNotExist", err)
	}
}

func TestDedupeRetentionErrorText(t *testing.T) {
	const head = "policies:\n" +
		"  - name: api\n" +
		"    algorithm: token_bucket\n" +
		"    limit: 1\n" +
		"    period: 1s\n"
	for value, want := range map[string]string{
		"forever": `p.yaml:6: policies[0] (api): dedupe_retention: invalid duration "forever"`,
		"0.5s":    `p.yaml:6: policies[0] (api): dedupe_retention: must be between 1s and 24h0m0s (got 500ms)`,
	} {
		_, err := parsePolicyFile("p.yaml", []byte(head+"    dedupe_retention: "+value+"\n"))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("dedupe_retention %s: got %v, want it to start with %s", value, err, want)
		}
	}
}

func TestWritePoliciesRetention(t *testing.T) {
	var b strings.Builder
	err := writePolicies(&b, []*quoratev1.Policy{
		{Name: "set", Version: 2, Algorithm: "token_bucket", Limit: 1, Period: durationpb.New(time.Second), DedupeRetention: durationpb.New(30 * time.Minute)},
		{Name: "unset", Version: 1, Algorithm: "token_bucket", Limit: 1, Period: durationpb.New(time.Second)},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasSuffix(strings.TrimSpace(lines[0]), "DEDUPE_RETENTION") ||
		!strings.HasSuffix(lines[1], "30m0s") || !strings.HasSuffix(lines[2], "10m0s") {
		t.Errorf("want a DEDUPE_RETENTION column, 30m0s as set and the default 10m0s when unset:\n%s", b.String())
	}
}
