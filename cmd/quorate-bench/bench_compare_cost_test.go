package main

import (
	"math"
	"testing"
)

// The fit recovers the costs that made the runs: 900 µs per entry and
// 145 µs per unary decision, 40 µs per decision in a batch, with the idle
// cluster's CPU taken out; it refuses runs that cannot tell an entry from
// a decision.
func TestFitCost(t *testing.T) {
	const a, idle = 900e-6, 0.05
	run := func(entries, decisions int64, perDecision, secs float64) BenchSummary {
		cpu := a*float64(entries) + perDecision*float64(decisions) + idle*secs
		return BenchSummary{LogEntries: entries, Decisions: decisions, Calls: decisions, Seconds: secs,
			NodeCPUSeconds: []float64{cpu / 2, cpu / 4, cpu / 4}}
	}
	unary := run(4000, 9600, 145e-6, 10)  // 64 clients: 2.4 decisions an entry
	half := run(3000, 4800, 145e-6, 10)   // open loop at half
	one := run(3500, 3500, 145e-6, 10)    // one client
	batch := run(2000, 300000, 40e-6, 10) // AdmitBatch 100
	unread := BenchSummary{Decisions: 5, Calls: 5, Seconds: 1}
	m := fitCost([]BenchSummary{unary, half, one, unread}, batch, idle)
	if m == nil {
		t.Fatal("no model from three unary runs")
	}
	for _, f := range []struct {
		name      string
		got, want float64
	}{{"per entry", m.PerEntryUs, 900}, {"per decision", m.PerDecisionUs, 145}, {"per batched decision", m.PerBatchedDecisionUs, 40}} {
		if math.Abs(f.got-f.want) > 1e-6*f.want {
			t.Errorf("%s: %v µs, want %v", f.name, f.got, f.want)
		}
	}
	if m.Runs != 3 || m.IdleCPUPerSec != idle {
		t.Errorf("model %+v: want 3 runs, idle %v", m, idle)
	}
	// The same decisions per entry in every run: an entry cannot be told
	// from a decision.
	if m := fitCost([]BenchSummary{run(1000, 2000, 145e-6, 5), run(3000, 6000, 145e-6, 10)}, batch, idle); m != nil {
		t.Errorf("runs of 2 decisions an entry gave %+v", m)
	}
	if m := fitCost([]BenchSummary{unary}, batch, idle); m != nil {
		t.Errorf("one run gave %+v", m)
	}
}
