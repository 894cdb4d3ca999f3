package main

import (
	"math"
	"strings"
	"testing"
)

// The model recovers the costs that made the runs: 900 µs per entry, 150
// µs per unary decision and 20 µs per batched one, with each cluster's idle
// CPU taken out; it refuses runs that cannot tell an entry from a
// decision, and runs whose CPU or entries were not read.
func TestFitCost(t *testing.T) {
	const a, b, bBatch, idle, idleOne = 900e-6, 150e-6, 20e-6, 0.09, 0.04
	run := func(entries, decisions int64, secs, perDecision, idle float64) BenchSummary {
		cpu := a*float64(entries) + perDecision*float64(decisions) + idle*secs
		return BenchSummary{LogEntries: entries, Decisions: decisions, Calls: decisions, Seconds: secs,
			NodeCPUSeconds: []float64{cpu / 2, cpu / 4, cpu / 4}}
	}
	unary := run(5000, 44000, 10, b, idle)       // three groups: 8.8 decisions an entry
	unaryOne := run(2500, 62000, 10, b, idleOne) // one group: 24.8
	batch := run(1300, 330000, 10, bBatch, idle) // AdmitBatch 100: 254 an entry
	m := fitCost(unary, unaryOne, batch, idle, idleOne)
	if m == nil {
		t.Fatal("no model")
	}
	for _, f := range []struct {
		name      string
		got, want float64
	}{{"per entry", m.PerEntryUs, 900}, {"per decision", m.PerDecisionUs, 150}, {"per batched decision", m.PerBatchedDecisionUs, 20}} {
		if math.Abs(f.got-f.want) > 1e-6*f.want {
			t.Errorf("%s: %v µs, want %v", f.name, f.got, f.want)
		}
	}
	if m.IdleCPUPerSec != idle {
		t.Errorf("model %+v: want idle %v", m, idle)
	}
	// The entry's bound: three replicas' append + fdatasync CPU and two
	// round trips'.
	m.withBound(&Floor{FdatasyncCPUUs: 100, RoundTripCPUUs: 50})
	if m.EntryBoundUs != 400 || !strings.Contains(m.String(), "alone take 400 µs of CPU, the entry 2.25× that") {
		t.Errorf("bound %v: %s", m.EntryBoundUs, m)
	}
	var none *CostModel
	none.withBound(&Floor{FdatasyncCPUUs: 100}) // no model: nothing to bound
	if m := fitCost(run(1000, 2000, 5, b, idle), run(3000, 6000, 10, b, idleOne), batch, idle, idleOne); m != nil {
		t.Errorf("runs of 2 decisions an entry each gave %+v", m)
	}
	if m := fitCost(unary, BenchSummary{Decisions: 5, Seconds: 1}, batch, idle, idleOne); m != nil {
		t.Errorf("a run without CPU gave %+v", m)
	}
	if m := fitCost(unary, unaryOne, BenchSummary{Decisions: 5, Seconds: 1}, idle, idleOne); m == nil || m.PerBatchedDecisionUs != 0 {
		t.Errorf("a batch run without CPU gave %+v", m)
	}
}
