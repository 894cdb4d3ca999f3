package jepsen

import (
	"context"
	"testing"
	"time"
)

func TestShortRunWithKillsAndPauses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real 3-node cluster for ~20s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	r, err := Run(ctx, Options{ReportDir: dir, Duration: 20 * time.Second, Seed: 42, Capacity: 100, Keys: 6, Clients: 8})
	if r != nil {
		t.Logf("report %s:\n%s", dir, r.Summary(err))
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, v := range r.Verdicts {
		if !v.OK {
			t.Errorf("checker %s failed: %v", v.Checker, v.Violations)
		}
	}
	if len(r.Verdicts) != 3 {
		t.Errorf("got %d verdicts, want 3", len(r.Verdicts))
	}
	if len(r.Faults) < 2 {
		t.Errorf("only %d faults injected, want ≥ 2", len(r.Faults))
	}
	if r.Counts[OutcomeAllowed] == 0 || r.Counts[OutcomeDenied] == 0 {
		t.Errorf("want both allowed and denied answers, got %v", r.Counts)
	}
}

// The planted-bug self-test: a binary built with -tags quorate_planted_bug
// ignores request IDs, so retried and re-sent requests spend again. The
// at-most-once checker must report it: a checker that cannot fail proves
// nothing.
func TestPlantedBugIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real 3-node cluster for ~10s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	r, err := Run(ctx, Options{ReportDir: dir, Duration: 8 * time.Second, Seed: 7, Capacity: 100, Keys: 3, Clients: 6,
		BuildTags: "quorate_planted_bug"})
	if r != nil {
		t.Logf("report %s:\n%s", dir, r.Summary(err))
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	failed := map[string]bool{}
	for _, v := range r.Verdicts {
		if !v.OK {
			failed[v.Checker] = true
		}
	}
	if len(failed) == 0 {
		t.Fatal("every checker passed against a server that ignores request IDs")
	}
	t.Logf("checkers that caught the planted bug: %v", failed)
}
