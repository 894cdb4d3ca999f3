package jepsen

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// The scale scenario, 3 → 5 → 3 nodes on 4 data groups, under every
// workload: two nodes join, a group splits onto them, a replica moves to
// one, two original nodes (n1 among them) are drained, removed and
// stopped. Every checker must pass — no over-admission, no double spend,
// no fence going back, no acknowledged decision lost — and at the end the
// members are the three remaining nodes, every data group with three
// replicas serving on them.
func TestScaleThreeFiveThree(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real cluster of 3 to 5 nodes for ~50 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	began := time.Now()
	// Duration about the scenario's length, so token-bucket keys open
	// throughout it rather than all being spent before the nodes join.
	r, err := Run(ctx, Options{ReportDir: dir, Duration: 30 * time.Second, Seed: 11, Nodes: 3, Groups: 4, Scale: true,
		Workloads: serverWorkloads})
	if r != nil {
		t.Logf("report %s (%v):\n%s", dir, time.Since(began).Round(time.Second), r.Summary(err))
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !r.OK() {
		t.Fatal("a checker failed")
	}
	if len(r.Verdicts) != 9 { // the 7 of every run, group-replicas, scale
		t.Errorf("%d verdicts, want 9", len(r.Verdicts))
	}
	for _, name := range []string{"group-replicas", "scale"} {
		if !slices.ContainsFunc(r.Verdicts, func(v Verdict) bool { return v.Checker == name && v.OK }) {
			t.Errorf("no passing %s verdict", name)
		}
	}
	if len(r.Members) != 3 || slices.Contains(r.Members, "n1") || !slices.Contains(r.Members, "n4") || !slices.Contains(r.Members, "n5") {
		t.Errorf("members at the end %v: want three, n4 and n5 among them, n1 not", r.Members)
	}

	steps := map[string]int{}
	var last time.Time
	for _, f := range r.Faults {
		if f.Error != "" {
			t.Errorf("scale step %s %s: %s", f.Kind, f.Node, f.Error)
		}
		steps[f.Kind]++
		last = later(last, f.End)
	}
	for kind, want := range map[string]int{"scale-join": 2, "scale-split": 1, "scale-move-replica": 1, "scale-drain": 2, "scale-remove": 2, "scale-stop": 1} {
		if steps[kind] != want {
			t.Errorf("%d %s steps, want %d (steps: %v)", steps[kind], kind, want, steps)
		}
	}
	if s := PlanTotals(r.Faults); s.Done != 1 || s.Slots == 0 {
		t.Errorf("the split: %s", s)
	}

	// Traffic went on throughout: answered by the joined nodes, during
	// each step, and after the last one on the three nodes left.
	answeredBy := map[string]int{}
	after := 0
	for _, op := range r.Ops {
		if !op.Outcome.OK() {
			continue
		}
		answeredBy[op.Node]++
		if op.Start.After(last) {
			after++
		}
	}
	for _, id := range []string{"n4", "n5"} {
		if answeredBy[id] == 0 {
			t.Errorf("no call answered through %s (answers by node: %v)", id, answeredBy)
		}
	}
	if after == 0 {
		t.Error("no call answered after the scenario ended")
	}
	// The cluster answers throughout: some call is answered in every
	// step's window, counted over at least minWindow from its start (a step
	// of 0.3 s on a starved CPU may see a pause as long as a
	// garbage-collection cycle and a scheduler delay together; an outage
	// lasts longer).
	const minWindow = 2 * time.Second
	for _, f := range r.Faults {
		end := f.End
		if end.Sub(f.Start) < minWindow {
			end = f.Start.Add(minWindow)
		}
		n := 0
		for _, op := range r.Ops {
			if op.Outcome.OK() && op.End.After(f.Start) && op.Start.Before(end) {
				n++
			}
		}
		if n == 0 {
			t.Errorf("no call answered during %s %s (%s – %s)", f.Kind, f.Node, f.Start.Format("15:04:05.000"), end.Format("15:04:05.000"))
		}
	}
	if !strings.Contains(ReproduceCommand(r.Options), "--scale") {
		t.Errorf("the reproduce line lacks --scale: %s", ReproduceCommand(r.Options))
	}
}
