package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/node"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// The text table of the policy commands (writePolicies) shows what a policy
// file sets.

func TestWritePoliciesRetentionAndLocal(t *testing.T) {
	var b strings.Builder
	err := writePolicies(&b, []*quoratev1.Policy{
		{Name: "set", Version: 2, Algorithm: "token_bucket", Limit: 1, Period: durationpb.New(time.Second), DedupeRetention: durationpb.New(30 * time.Minute)},
		{Name: "unset", Version: 1, Algorithm: "token_bucket", Limit: 1, Period: durationpb.New(time.Second)},
		{Name: "local", Version: 1, Algorithm: "fixed_window", Limit: 1000, Period: durationpb.New(time.Minute),
			Local: &quoratev1.LocalDecisions{Mode: "grant"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	column := func(line, name string) string {
		header := lines[0]
		i := strings.Index(header, name)
		if i < 0 || i >= len(line) {
			return ""
		}
		return strings.Fields(line[i:])[0]
	}
	if len(lines) != 4 || column(lines[1], "DEDUPE_RETENTION") != "30m0s" || column(lines[2], "DEDUPE_RETENTION") != "10m0s" {
		t.Errorf("want a DEDUPE_RETENTION column, 30m0s as set and the default 10m0s when unset:\n%s", b.String())
	}
	// LOCAL shows the defaults the cluster applies: a tenth of the burst, 10s.
	if !strings.HasSuffix(lines[1], " -") || !strings.HasSuffix(lines[3], "grant max=100 ttl=10s nodes=hot") {
		t.Errorf("want LOCAL - without local decisions, and grant with its defaults:\n%s", b.String())
	}
}

func TestWritePoliciesCalendarAndShadow(t *testing.T) {
	var b strings.Builder
	err := writePolicies(&b, []*quoratev1.Policy{
		node.PolicyToAPI(admission.Policy{Name: "reports", Algorithm: "quota", Limit: 1000, Calendar: "month", Shadow: true}, 3),
		node.PolicyToAPI(admission.Policy{Name: "api", Algorithm: "token_bucket", Limit: 60, Period: time.Minute}, 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := tableRows(t, b.String())
	for name, want := range map[string]map[string]string{
		"reports": {"VERSION": "3", "ALGORITHM": "quota", "PERIOD": "-", "CALENDAR": "month", "SHADOW": "yes"},
		"api":     {"VERSION": "1", "ALGORITHM": "token_bucket", "PERIOD": "1m0s", "CALENDAR": "-", "SHADOW": "no"},
	} {
		for col, v := range want {
			if got := rows[name][col]; got != v {
				t.Errorf("%s %s = %q, want %q:\n%s", name, col, got, v, b.String())
			}
		}
	}
}

func TestWritePoliciesLeaseTTL(t *testing.T) {
	var b strings.Builder
	err := writePolicies(&b, []*quoratev1.Policy{
		node.PolicyToAPI(admission.Policy{Name: "reports-active", Algorithm: "concurrency", Limit: 2, LeaseTTL: 2 * time.Minute}, 1),
		node.PolicyToAPI(admission.Policy{Name: "jobs", Algorithm: "concurrency", Limit: 10}, 2),
		node.PolicyToAPI(admission.Policy{Name: "api", Algorithm: "token_bucket", Limit: 60, Period: time.Minute}, 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := tableRows(t, b.String())
	for name, want := range map[string]map[string]string{
		"reports-active": {"ALGORITHM": "concurrency", "LIMIT": "2", "PERIOD": "-", "LEASE_TTL": "2m0s", "BURST": "=limit"},
		"jobs":           {"VERSION": "2", "LEASE_TTL": "1m0s"}, // unset: the server's default
		"api":            {"LEASE_TTL": "-", "PERIOD": "1m0s"},
	} {
		for col, v := range want {
			if got := rows[name][col]; got != v {
				t.Errorf("%s %s = %q, want %q:\n%s", name, col, got, v, b.String())
			}
		}
	}
}

// tableRows reads a table of writePolicies: name → column → value. Every row
// must have as many columns as the header.
func tableRows(tb testing.TB, table string) map[string]map[string]string {
	tb.Helper()
	rows := make(map[string]map[string]string)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	header := strings.Fields(lines[0])
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != len(header) {
			tb.Fatalf("row %q has %d columns, header %d:\n%s", l, len(f), len(header), table)
		}
		row := make(map[string]string)
		for i, h := range header {
			row[h] = f[i]
		}
		rows[f[0]] = row
	}
	return rows
}

func TestWritePoliciesLocalSyncBound(t *testing.T) {
	var b strings.Builder
	err := writePolicies(&b, []*quoratev1.Policy{
		{Name: "feed", Version: 1, Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Second),
			Local: &quoratev1.LocalDecisions{Mode: "sync", SyncInterval: durationpb.New(250 * time.Millisecond)}},
		{Name: "daily", Version: 1, Algorithm: "quota", Limit: 86400, Calendar: "day", Local: &quoratev1.LocalDecisions{Mode: "sync"}},
		{Name: "lease", Version: 1, Algorithm: "fixed_window", Limit: 1000, Period: durationpb.New(time.Minute),
			Local: &quoratev1.LocalDecisions{Mode: "grant"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	// The bound is ceil(limit × sync_interval / period): 1000 × 0.25s / 1s,
	// and 86400 a day × 1s (the default interval).
	if len(lines) != 4 || !strings.HasSuffix(lines[1], "sync every=250ms bound=250 nodes=hot") ||
		!strings.HasSuffix(lines[2], "sync every=1s bound=1 nodes=hot") || !strings.HasSuffix(lines[3], "grant max=100 ttl=10s nodes=hot") {
		t.Errorf("want LOCAL with the sync bound:\n%s", b.String())
	}
}
