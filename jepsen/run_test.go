package jepsen

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestShortMatrix is CI's fault-injection matrix: every workload at once
// under partitions, then kills and pauses, then clock jumps and rolling
// restarts, 20 s each on a real 3-node cluster. Every checker must pass.
func TestShortMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real 3-node clusters for ~1.5 min")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var progress strings.Builder
	results := RunMatrix(ctx, Options{ReportDir: dir, Duration: 20 * time.Second, Seed: 42}, ShortMatrix(), &progress)
	t.Logf("%s\n%s", progress.String(), FormatMatrix(results))
	if len(results) != len(ShortMatrix()) {
		t.Fatalf("%d runs finished, want %d", len(results), len(ShortMatrix()))
	}
	for _, m := range results {
		if m.Err != nil {
			t.Errorf("%s: %v", m.Run.Name, m.Err)
		}
		if m.Report == nil {
			continue
		}
		r := m.Report
		if !r.OK() {
			t.Errorf("%s: a checker failed:\n%s", m.Run.Name, r.Summary(m.Err))
		}
		if len(r.Verdicts) != 7 { // at-most-once + 3 token-bucket + 2 fixed-window + leases
			t.Errorf("%s: %d verdicts, want 7", m.Run.Name, len(r.Verdicts))
		}
		if len(r.Faults) < 2 {
			t.Errorf("%s: only %d faults injected, want ≥ 2", m.Run.Name, len(r.Faults))
		}
		for _, f := range r.Faults {
			if !faultInFamilies(f, m.Run.Families) {
				t.Errorf("%s: fault %s is not of families %v", m.Run.Name, f.Kind, m.Run.Families)
			}
		}
		moves := 0
		for _, f := range r.Faults {
			if strings.HasPrefix(f.Kind, "move-replica") && f.Error == "" {
				moves++
			}
		}
		if slices.Contains(m.Run.Families, FamilyMove) && moves == 0 {
			t.Errorf("%s: no replica was moved", m.Run.Name)
		}
		perKind := map[OpKind]map[Outcome]int{}
		for _, op := range r.Ops {
			if perKind[op.Kind] == nil {
				perKind[op.Kind] = map[Outcome]int{}
			}
			perKind[op.Kind][op.Outcome]++
		}
		for _, k := range []OpKind{KindAdmit, KindAcquire} {
			if perKind[k][OutcomeAllowed] == 0 || perKind[k][OutcomeDenied] == 0 {
				t.Errorf("%s: want both allowed and denied %s answers, got %v", m.Run.Name, k, perKind[k])
			}
		}
		if perKind[KindRelease][OutcomeAllowed] == 0 || perKind[KindRenew][OutcomeAllowed] == 0 {
			t.Errorf("%s: want acknowledged renews and releases, got %v", m.Run.Name, perKind)
		}
		for _, name := range []string{"summary.txt", "index.html", "history.jsonl", "seed", "logs/n1.log"} {
			if _, err := os.Stat(filepath.Join(r.Dir, name)); err != nil {
				t.Errorf("%s: report lacks %s: %v", m.Run.Name, name, err)
			}
		}
	}
}

func faultInFamilies(f Fault, families []string) bool {
	for _, fam := range families {
		if strings.HasPrefix(f.Kind, fam) || (fam == FamilyRestart && f.Kind == "rolling-restart") {
			return true
		}
	}
	return false
}

// The planted-bug self-tests: a server built with a planted bug must make
// some checker fail. A checker that cannot fail proves nothing.
func TestPlantedBugsAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real 3-node clusters for ~25s")
	}
	for _, tc := range []struct {
		bug       string
		families  []string
		workloads []string
		want      []string // at least one of these checkers must fail
	}{
		// Retries with the same request ID spend again: kills and pauses
		// make clients retry.
		{"dedupe", []string{FamilyKill, FamilyPause}, []string{WorkloadTokenBucket}, []string{"at-most-once", "no-over-admission", "durability"}},
		// Answers from a lagging replica: no faults needed.
		{"local-read", nil, []string{WorkloadTokenBucket, WorkloadFixedWindow},
			[]string{"no-over-admission", "token-bucket/linearizable", "fixed-window/linearizable", "no-over-admission-per-window"}},
	} {
		t.Run(tc.bug, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			dir := t.TempDir()
			r, err := Run(ctx, Options{ReportDir: dir, Duration: 8 * time.Second, Seed: 7, Keys: 3, Capacity: 60,
				BuildTags: PlantedBugs[tc.bug], Workloads: tc.workloads, Nemesis: NemesisOptions{Families: tc.families}})
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
			caught := false
			for _, c := range tc.want {
				caught = caught || failed[c]
			}
			if !caught {
				t.Fatalf("none of %v failed against a server built with the %s bug (failed: %v)", tc.want, tc.bug, failed)
			}
			t.Logf("checkers that caught the %s bug: %v", tc.bug, failed)
			if len(r.Timelines) == 0 && (failed["token-bucket/linearizable"] || failed["fixed-window/linearizable"]) {
				t.Errorf("a linearizability failure wrote no timeline")
			}
		})
	}
}
