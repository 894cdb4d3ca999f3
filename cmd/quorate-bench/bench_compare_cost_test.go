package main

import (
	"math"
	"strings"
	"testing"
)

// The model recovers the costs that made the runs: 900 µs per entry and
// 50 µs per decision, with the idle cluster's CPU taken out; it refuses
// runs that cannot tell an entry from a decision, and runs whose CPU or
// entries were not read.
func TestFitCost(t *testing.T) {
	const a, b, idle = 900e-6, 50e-6, 0.05
	run := func(entries, decisions int64, secs float64) BenchSummary {
		cpu := a*float64(entries) + b*float64(decisions) + idle*secs
		return BenchSummary{LogEntries: entries, Decisions: decisions, Calls: decisions, Seconds: secs,
			NodeCPUSeconds: []float64{cpu / 2, cpu / 4, cpu / 4}}
	}
	unary := run(10000, 38000, 10) // 64 clients: 3.8 decisions an entry
	batch := run(2400, 268000, 10) // AdmitBatch 100: 111 an entry
	m := fitCost(unary, batch, idle)
	if m == nil {
		t.Fatal("no model")
	}
	for _, f := range []struct {
		name      string
		got, want float64
	}{{"per entry", m.PerEntryUs, 900}, {"per decision", m.PerDecisionUs, 50}} {
		if math.Abs(f.got-f.want) > 1e-6*f.want {
			t.Errorf("%s: %v µs, want %v", f.name, f.got, f.want)
		}
	}
	if m.IdleCPUPerSec != idle {
		t.Errorf("model %+v: want idle %v", m, idle)
	}
	// The entry's bound: three replicas' append + fdatasync CPU.
	m.withBound(&Floor{FdatasyncCPUUs: 100})
	if m.EntryBoundUs != 300 || !strings.Contains(m.String(), "alone take 300 µs of CPU, the entry 3.00× that") {
		t.Errorf("bound %v: %s", m.EntryBoundUs, m)
	}
	var none *CostModel
	none.withBound(&Floor{FdatasyncCPUUs: 100}) // no model: nothing to bound
	if m := fitCost(run(1000, 2000, 5), run(3000, 6000, 10), idle); m != nil {
		t.Errorf("runs of 2 decisions an entry each gave %+v", m)
	}
	if m := fitCost(unary, BenchSummary{Decisions: 5, Seconds: 1}, idle); m != nil {
		t.Errorf("a run without CPU gave %+v", m)
	}
}
