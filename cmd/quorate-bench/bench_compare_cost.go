package main

// The cost model of quorate-bench compare: what the three nodes' CPU
// spends per log entry and per decision, fitted over the default cluster's
// unary runs. Each run spends C CPU-seconds (every node's, less what the
// idle cluster spends in as long) on E log entries (proposed by the
// groups' leaders, each stored and applied by three replicas) and D
// decisions, one per call; C ≈ a·E + b·D by least squares. The runs differ
// in decisions per entry (one client puts about one in each, 64 clients a
// few), which tells a from b. A decision inside an AdmitBatch is then
// (C − a·E) / D of the batch run.

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

// CostModel is the fitted cost of each unit of work, in CPU-microseconds
// of the three nodes together.
type CostModel struct {
	PerEntryUs    float64 `json:"perEntryUs"`    // a log entry: proposed, stored and applied on three replicas
	PerDecisionUs float64 `json:"perDecisionUs"` // a unary Admit's decision (its call included), beyond its share of an entry
	// PerBatchedDecisionUs is a decision of the batch run beyond its
	// share of an entry (0 without a batch run).
	PerBatchedDecisionUs float64 `json:"perBatchedDecisionUs,omitempty"`
	IdleCPUPerSec        float64 `json:"idleCpuPerSec"` // CPU-seconds per second the idle cluster spends (subtracted)
	Runs                 int     `json:"runs"`          // unary runs fitted
}

// String is the model for people.
func (m CostModel) String() string {
	batched := ""
	if m.PerBatchedDecisionUs != 0 {
		batched = fmt.Sprintf(" (%.0f µs in an AdmitBatch)", m.PerBatchedDecisionUs)
	}
	return fmt.Sprintf("%.0f µs of CPU per log entry (three replicas), %.0f µs per unary decision beyond it%s "+
		"(least squares over %d unary runs of the default cluster, less its idle %.3f CPU-s/s)",
		m.PerEntryUs, m.PerDecisionUs, batched, m.Runs, m.IdleCPUPerSec)
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

// fitCost fits the cost model over the unary runs (one decision per call)
// and prices a decision of the batch run with it, less idle CPU-seconds
// per second; nil when the unary runs cannot tell an entry from a
// decision (fewer than two, or the same decisions per entry in each).
func fitCost(unary []BenchSummary, batch BenchSummary, idle float64) *CostModel {
	// Normal equations of C = a·E + b·D.
	var ee, ed, dd, ec, dc float64
	n := 0
	for _, r := range unary {
		cpu, ok := busyCPU(r, idle)
		if !ok {
			continue
		}
		e, d := float64(r.LogEntries), float64(r.Decisions)
		ee, ed, dd, ec, dc = ee+e*e, ed+e*d, dd+d*d, ec+e*cpu, dc+d*cpu
		n++
	}
	det := ee*dd - ed*ed
	if n < 2 || math.Abs(det) <= 1e-9*ee*dd {
		return nil
	}
	a, b := (ec*dd-dc*ed)/det, (ee*dc-ed*ec)/det
	m := &CostModel{PerEntryUs: a * 1e6, PerDecisionUs: b * 1e6, IdleCPUPerSec: idle, Runs: n}
	if cpu, ok := busyCPU(batch, idle); ok {
		m.PerBatchedDecisionUs = (cpu - a*float64(batch.LogEntries)) / float64(batch.Decisions) * 1e6
	}
	return m
}
