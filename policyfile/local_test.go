package policyfile

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func TestParsePolicyFileLocal(t *testing.T) {
	const file = `
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
`
	got, err := Parse("p.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	want := []*quoratev1.Policy{
		{Name: "a", Algorithm: "fixed_window", Limit: 1000, Period: durationpb.New(time.Minute),
			Local: &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(50), Ttl: durationpb.New(2 * time.Second)}},
		{Name: "b", Algorithm: "token_bucket", Limit: 10, Period: durationpb.New(time.Second), Local: &quoratev1.LocalDecisions{Mode: "grant"}},
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("policy %d = %v, want %v", i, got[i], want[i])
		}
	}
}

// Every bad local: block, in reserve and sync mode, names its field.
func TestParsePolicyFileLocalErrors(t *testing.T) {
	const head = "policies:\n  - name: q\n    algorithm: fixed_window\n    limit: 100\n    period: 1m\n"
	tests := []struct {
		name, file, field, reason string
	}{
		{"unknown mode", head + "    local: {mode: eventually}\n", "local.mode", "eventually"},
		{"no mode", head + "    local: {max_grant: 5}\n", "local.mode", "missing"},
		{"unknown field", head + "    local: {mode: grant, budget: 5}\n", "local.budget", "unknown field"},
		{"zero max_grant", head + "    local: {mode: grant, max_grant: 0}\n", "local.max_grant", "must not be 0"},
		{"max_grant over the burst", head + "    local: {mode: grant, max_grant: 101}\n", "local.max_grant", "101"},
		{"zero ttl", head + "    local: {mode: grant, ttl: 0s}\n", "local.ttl", "must not be 0"},
		{"ttl too short", head + "    local: {mode: grant, ttl: 10ms}\n", "local.ttl", "10ms"},
		{"not a mapping", head + "    local: reserve\n", "local", "expected a mapping"},
		{"sliding_log", "policies:\n  - name: q\n    algorithm: sliding_log\n    limit: 5\n    period: 1m\n    local: {mode: grant}\n", "local.mode", "sliding_log"},
		// Sync mode (local-plus-global).
		{"zero sync_interval", head + "    local: {mode: sync, sync_interval: 0s}\n", "local.sync_interval", "must not be 0"},
		{"sync_interval too short", head + "    local: {mode: sync, sync_interval: 5ms}\n", "local.sync_interval", "5ms"},
		{"sync_interval too long", head + "    local: {mode: sync, sync_interval: 2m}\n", "local.sync_interval", "between"},
		{"sync_interval not a duration", head + "    local: {mode: sync, sync_interval: soon}\n", "local.sync_interval", "10ms and 1m"},
		{"sync_interval in grant mode", head + "    local: {mode: grant, sync_interval: 1s}\n", "local.sync_interval", "sync only"},
		{"max_grant in sync mode", head + "    local: {mode: sync, max_grant: 5}\n", "local.max_grant", "grant mode only"},
		{"ttl in sync mode", head + "    local: {mode: sync, ttl: 5s}\n", "local.ttl", "grant mode only"},
		{"sync_interval without a mode", head + "    local: {sync_interval: 1s}\n", "local.mode", "reserve or sync"},
	}
	for _, tc := range tests {
		_, err := Parse("p.yaml", []byte(tc.file))
		var pe *Error
		if !errors.As(err, &pe) || pe.Field != tc.field || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: got %v (field %q), want field %s and %q", tc.name, err, fieldOfPolicyErr(pe), tc.field, tc.reason)
		}
	}
}

func fieldOfPolicyErr(pe *Error) string {
	if pe == nil {
		return ""
	}
	return pe.Field
}
