package jepsen

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestRecoveryFromLostMajority is the recovery scenario on 2 data groups
// under the token-bucket, fixed-window and lease workloads: two of three
// nodes lost for good (killed, data directories deleted), the survivor
// stopped, `quorate admin recover --data-dir DIR --yes` run on it as a
// process, the survivor started again, two new nodes joined, the lost ones
// removed with force. The scenario kills the second node only once the
// survivor holds every committed entry, so nothing acknowledged may be
// lost: every checker must pass unchanged (no over-admission, durability,
// linearizability, at-most-once, leases), the survivor answers calls after
// its recovery, and every group ends with the survivor and the two new
// nodes as its voters.
func TestRecoveryFromLostMajority(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real cluster through the loss of two nodes for ~40 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	began := time.Now()
	r, err := Run(ctx, Options{ReportDir: dir, Recovery: true, Duration: 10 * time.Second, Seed: 5, Groups: 2,
		Workloads: serverWorkloads, Clients: 4})
	if r != nil {
		t.Logf("report %s (%v):\n%s", dir, time.Since(began).Round(time.Second), r.Summary(err))
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !r.OK() {
		t.Fatal("a checker failed")
	}
	if !slices.ContainsFunc(r.Verdicts, func(v Verdict) bool { return v.Checker == "recovery" && v.OK }) {
		t.Error("no passing recovery verdict")
	}
	steps := map[string][]string{}
	var restarted, last time.Time
	for _, f := range r.Faults {
		if f.Error != "" {
			t.Errorf("%s %s: %s", f.Kind, f.Node, f.Error)
		}
		steps[f.Kind] = append(steps[f.Kind], f.Node)
		if f.Kind == "recover-start" {
			restarted = f.End
		}
		last = later(last, f.End)
	}
	for kind, want := range map[string]int{"recover-lose": 2, "recover-catch-up": 1, "recover-stop": 1, "recover-run": 1,
		"recover-start": 1, "recover-join": 2, "recover-remove": 2, "recover-whole": 1} {
		if len(steps[kind]) != want {
			t.Errorf("%d %s steps, want %d (steps: %v)", len(steps[kind]), kind, want, steps)
		}
	}
	if len(steps["recover-run"]) != 1 {
		t.FailNow()
	}
	survivor := steps["recover-run"][0]
	want := []string{survivor, "n4", "n5"}
	slices.Sort(want)
	if !slices.Equal(r.Members, want) {
		t.Errorf("members at the end %v, want %v", r.Members, want)
	}
	// The survivor serves after its recovery, and the cluster after the
	// scenario.
	bySurvivor, after := 0, 0
	for _, op := range r.Ops {
		if !op.Outcome.OK() {
			continue
		}
		if op.Node == survivor && op.Start.After(restarted) {
			bySurvivor++
		}
		if op.Start.After(last) {
			after++
		}
	}
	if bySurvivor == 0 {
		t.Errorf("no call answered by the survivor %s after its recovery", survivor)
	}
	if after == 0 {
		t.Error("no call answered after the scenario")
	}
}
