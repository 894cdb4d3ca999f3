package main

// The cost model of quorate-bench compare: what the three nodes' CPU
// spends per log entry and per decision, from the closed-loop unary runs of
// all the clients against the default cluster and against one group. Both
// make the same calls, one Admit per decision, but put a different number
// of decisions in an entry (one group fills its entries best). Each spends
// C CPU-seconds (every node's, less what its idle cluster spends in as
// long) on E log entries (proposed by the groups' leaders, each stored and
// applied by three replicas) and D decisions; C = a·E + b·D in both gives
// a, an entry's cost, and b, a unary decision's beyond its share of an
// entry (its call, routing, apply on three replicas). A decision of an
// AdmitBatch call is priced from the default cluster's batch run with that
// a. The one-client and half-rate runs, whose entries each carry raft's
// whole round of wakeups alone, are left out (their per-entry quotient is
// in the CPU table).

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// entriesMetric counts the entries a node proposed as a group's leader.
const entriesMetric = "quorate_group_entries_total"

// idleSample is how long compare watches the idle cluster's CPU.
const idleSample = 2 * time.Second

// CostModel is the cost of each unit of work, in CPU-microseconds of the
// three nodes together.
type CostModel struct {
	PerEntryUs    float64 `json:"perEntryUs"`    // a log entry: proposed, stored and applied on three replicas
	PerDecisionUs float64 `json:"perDecisionUs"` // a unary decision (its own call), beyond its share of an entry
	// PerBatchedDecisionUs is a decision of an AdmitBatch call beyond its
	// share of an entry (0 when the batch run's CPU was not read).
	PerBatchedDecisionUs float64 `json:"perBatchedDecisionUs,omitempty"`
	IdleCPUPerSec        float64 `json:"idleCpuPerSec"` // CPU-seconds per second the idle default cluster spends (subtracted)
	// EntryBoundUs is the CPU of three replicas' append + fdatasync of one
	// entry and of the leader's round trip to each of its two followers, as
	// the floor measured them on the nodes' disk and loopback (0: unknown):
	// what replicating an entry costs the kernel before anything else is
	// done with it.
	EntryBoundUs float64 `json:"entryBoundUs,omitempty"`
}

// withBound sets the model's entry bound from the floor.
func (m *CostModel) withBound(f *Floor) {
	if m != nil && f != nil {
		m.EntryBoundUs = compareNodes*f.FdatasyncCPUUs + (compareNodes-1)*f.RoundTripCPUUs
	}
}

// String is the model for people.
func (m CostModel) String() string {
	s := fmt.Sprintf("%.0f µs of CPU per log entry (three replicas), %.0f µs per unary decision beyond it", m.PerEntryUs, m.PerDecisionUs)
	if m.PerBatchedDecisionUs > 0 {
		s += fmt.Sprintf(", %.0f µs per decision of an AdmitBatch", m.PerBatchedDecisionUs)
	}
	s += fmt.Sprintf(" (from the unary runs of the default cluster and of one group, less their idle CPU; %.3f CPU-s/s for the default)", m.IdleCPUPerSec)
	if m.EntryBoundUs > 0 {
		s += fmt.Sprintf("; an entry's three appends + fdatasyncs and the leader's round trips to two followers alone take %.0f µs of CPU, the entry %.2f× that",
			m.EntryBoundUs, m.PerEntryUs/m.EntryBoundUs)
	}
	return s
}

// logEntries sums entriesMetric over every node's /metrics.
func (c *compareCluster) logEntries(ctx context.Context) (int64, error) {
	var total float64
	for _, u := range c.urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/metrics", nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, fmt.Errorf("%s/metrics: %w", u, err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, entriesMetric+"{") && !strings.HasPrefix(line, entriesMetric+" ") {
				continue
			}
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				resp.Body.Close()
				return 0, fmt.Errorf("%s/metrics: %q: %w", u, line, err)
			}
			total += v
		}
		err = sc.Err()
		resp.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("%s/metrics: %w", u, err)
		}
	}
	return int64(total), nil
}

// idleCPU is the CPU-seconds per second the cluster spends with no load,
// watched for idleSample; 0 when the CPU cannot be read.
func (c *compareCluster) idleCPU(ctx context.Context) float64 {
	before := c.cpu()
	start := time.Now()
	select {
	case <-ctx.Done():
		return 0
	case <-time.After(idleSample):
	}
	after := c.cpu()
	if len(before) == 0 || len(after) != len(before) {
		return 0
	}
	var spent time.Duration
	for i := range before {
		spent += after[i] - before[i]
	}
	return spent.Seconds() / time.Since(start).Seconds()
}

// busyCPU is the CPU-seconds run r spent beyond the idle cluster's, and
// whether its CPU and entries were read.
func busyCPU(r BenchSummary, idle float64) (float64, bool) {
	if len(r.NodeCPUSeconds) == 0 || r.LogEntries <= 0 || r.Decisions <= 0 {
		return 0, false
	}
	var cpu float64
	for _, s := range r.NodeCPUSeconds {
		cpu += s
	}
	return cpu - idle*r.Seconds, true
}

// fitCost solves the cost model from the unary runs of the default
// cluster and of one group, each less its idle cluster's CPU-seconds per
// second, and prices the default batch run's decisions with the entry's
// cost; nil when a unary run's CPU or entries were not read, or the two
// have the same decisions per entry.
func fitCost(unary, unaryOne, batch BenchSummary, idle, idleOne float64) *CostModel {
	cu, ok1 := busyCPU(unary, idle)
	co, ok2 := busyCPU(unaryOne, idleOne)
	if !ok1 || !ok2 {
		return nil
	}
	eu, du, eo, do := float64(unary.LogEntries), float64(unary.Decisions), float64(unaryOne.LogEntries), float64(unaryOne.Decisions)
	det := eu*do - eo*du
	if math.Abs(det) <= 1e-9*eu*do {
		return nil
	}
	a, b := (cu*do-co*du)/det, (eu*co-eo*cu)/det
	m := &CostModel{PerEntryUs: a * 1e6, PerDecisionUs: b * 1e6, IdleCPUPerSec: idle}
	if cb, ok := busyCPU(batch, idle); ok {
		m.PerBatchedDecisionUs = (cb - a*float64(batch.LogEntries)) / float64(batch.Decisions) * 1e6
	}
	return m
}
