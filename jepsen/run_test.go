package jepsen

import (
	"context"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestShortMatrix is CI's fault-injection matrix: every workload at once
// under partitions, then kills and pauses, then clock jumps and rolling
// restarts, replica moves and slot moves, 20 s each on a real cluster, and
// kills with partitions on a TLS cluster for 15 s.
// Every checker must pass. Each row is a subtest (-run
// 'TestShortMatrix/slots' runs one), with the seed it has in the matrix.
func TestShortMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real 3-node clusters for ~2 min")
	}
	for i, row := range ShortMatrix() {
		t.Run(row.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var progress strings.Builder
			results := RunMatrix(ctx, Options{ReportDir: t.TempDir(), Duration: 20 * time.Second, Seed: 42 + uint64(i)}, []MatrixRun{row}, &progress)
			t.Logf("%s\n%s", progress.String(), FormatMatrix(results))
			if len(results) != 1 {
				t.Fatalf("%d runs finished, want 1", len(results))
			}
			checkMatrixRun(t, results[0])
		})
	}
}

// checkMatrixRun checks one run of the short matrix.
func checkMatrixRun(t *testing.T, m MatrixResult) {
	t.Helper()
	if m.Err != nil {
		t.Errorf("%s: %v", m.Run.Name, m.Err)
	}
	if m.Report == nil {
		return
	}
	r := m.Report
	if !r.OK() {
		t.Errorf("%s: a checker failed:\n%s", m.Run.Name, r.Summary(m.Err))
	}
	want := 7 // at-most-once + 3 token-bucket + 2 fixed-window + leases
	runs := func(w string) bool { return m.Run.Workloads == nil || slices.Contains(m.Run.Workloads, w) }
	grant := runs(WorkloadGrant)
	if grant {
		want += 4 // grant and grant-sync: no over-admission per window, decisions
		checkGrantRun(t, r, policyGrant, r.Grant)
		checkGrantRun(t, r, policyGrantSync, r.GrantSync)
	}
	if runs(WorkloadGrantBucket) {
		want += 2 // grant-bucket: no over-admission, decisions
		checkGrantBucketRun(t, r)
	}
	if grant || runs(WorkloadGrantSync) || runs(WorkloadGrantBucket) {
		want++ // node-grants: what the nodes decided from the grants they hold
	}
	if m.Run.Groups > 0 {
		want++ // group-replicas
	}
	if m.Options.TLS {
		want++ // tls
		checkTLSVerdict(t, m.Run.Name, r.Verdicts)
	}
	if len(r.Verdicts) != want {
		t.Errorf("%s: %d verdicts, want %d", m.Run.Name, len(r.Verdicts), want)
	}
	if len(r.Faults) < 2 {
		t.Errorf("%s: only %d faults injected, want ≥ 2", m.Run.Name, len(r.Faults))
	}
	for _, f := range r.Faults {
		if !faultInFamilies(f, m.Run.Families) && !(grant && faultInFamilies(f, []string{FamilyClientKill, FamilyClientPause})) {
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
	if slices.Contains(m.Run.Families, FamilySlots) {
		checkSlotMoves(t, r)
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
	checkReportFiles(t, m)
}

// checkReportFiles wants summary.txt to open with the verdict and the
// reproduce command, and index.html to show the banner, the command, the
// fault families that ran and the charts.
func checkReportFiles(t *testing.T, m MatrixResult) {
	t.Helper()
	r := m.Report
	sum, err := os.ReadFile(filepath.Join(r.Dir, "summary.txt"))
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(r.Dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	verdict, banner := "PASS: ", `class="banner pass"`
	if !m.OK() {
		verdict, banner = "FAIL: ", `class="banner failed"`
	}
	cmd := ReproduceCommand(r.Options)
	lines := strings.SplitN(string(sum), "\n", 3)
	if len(lines) < 3 || !strings.HasPrefix(lines[0], verdict) || lines[1] != "reproduce: "+cmd {
		t.Errorf("%s: summary.txt does not open with %q and the reproduce command %q:\n%s", m.Run.Name, verdict, cmd, sum)
	}
	want := []string{banner, `id="reproduce">` + template.HTMLEscapeString(cmd) + "<", `<svg class="chart throughput"`, `<svg class="chart latency"`}
	for _, c := range FaultFamilies(r.Faults) {
		want = append(want, fmt.Sprintf(`data-family="%s"><td>`, c.Family), fmt.Sprintf("%s×%d", c.Family, c.Count))
	}
	for _, w := range want {
		if !strings.Contains(string(page), w) {
			t.Errorf("%s: index.html lacks %q", m.Run.Name, w)
		}
	}
}

// checkTLSVerdict wants a run on a TLS cluster to have checked, at the end,
// that the nodes served TLS and refused plaintext (CheckTLS).
func checkTLSVerdict(t *testing.T, run string, verdicts []Verdict) {
	t.Helper()
	for _, v := range verdicts {
		if v.Checker == "tls" {
			if !v.OK {
				t.Errorf("%s: the cluster did not serve TLS: %s %v", run, v.Summary, v.Violations)
			}
			return
		}
	}
	t.Errorf("%s: a TLS run without the tls verdict", run)
}

// checkSlotMoves wants a run of the slots family to have moved slots: at
// least two plans done, one of which carried state (records) with it.
func checkSlotMoves(t *testing.T, r *Report) {
	t.Helper()
	s := PlanTotals(r.Faults)
	t.Logf("slot plans: %s", s)
	if s.Done < 2 {
		t.Errorf("%d slot plans done, want ≥ 2 (%s)", s.Done, s)
	}
	if s.Records == 0 {
		t.Errorf("no slot move carried state (%s)", s)
	}
	kinds := map[string]int{} // of the faults that got as far as choosing
	for _, f := range r.Faults {
		if strings.HasPrefix(f.Kind, "slots-") {
			kinds[f.Kind]++
		}
		if strings.HasPrefix(f.Kind, "slots") {
			t.Logf("%s %s: %v %s", f.Kind, f.Node, f.Plan, f.Error)
		}
	}
	// Kinds come in turn: four faults see each.
	want := []string{"slots-move", "slots-move-cancel", "slots-split"}
	if slices.Contains(r.Families, FamilyKill) {
		want = append(want, "slots-move-kill-leader")
	}
	decided := 0
	for _, k := range kinds {
		decided += k
	}
	for _, k := range want {
		if decided >= 4 && kinds[k] == 0 {
			t.Errorf("slot faults by kind %v: want each of %v", kinds, want)
			break
		}
	}
	for _, f := range r.Faults {
		if f.Kind == "slots-move-kill-leader" && f.Error == "" && f.Plan.State != "done" {
			t.Errorf("%s %s: the move ended %s after its coordinator was killed", f.Kind, f.Node, f.Plan)
		}
	}
	cancels := 0
	for _, f := range r.Faults {
		if f.Kind == "slots-move-cancel" && f.Error == "" {
			cancels++
		}
	}
	if s.Cancelled+s.CancelRefused != cancels {
		t.Errorf("%d cancels asked, %d rolled back and %d refused (%s)", cancels, s.Cancelled, s.CancelRefused, s)
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
		// The nodes spend past the grants they hold for plain callers
		// (this harness's own clients are built without the bug): no
		// faults needed.
		{"overspend", nil, []string{WorkloadGrant}, []string{"grant/no-over-admission-per-window"}},
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
