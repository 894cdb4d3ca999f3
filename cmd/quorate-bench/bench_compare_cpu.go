package main

// The CPU table of quorate-bench compare: what each node's process spent
// in each Quorate run, and the decisions per CPU-second of the busiest node
// and of the three together; then the same of Gubernator's three processes
// and of the Redis server in their runs, so that what a decision costs
// each system is read from one run.

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// cpuRow is one Quorate run with the CPU its nodes spent.
type cpuRow struct {
	scenario string
	run      BenchSummary
}

// cpuRows lists the runs whose servers' CPU was read, once each (a run
// several scenarios share, such as the unary one, under its first): the
// Quorate scenarios', the one-group topology's, then Gubernator's and
// Redis's.
func cpuRows(r CompareResult) []cpuRow {
	var out []cpuRow
	seen := map[string]bool{}
	add := func(scenario string, s BenchSummary) {
		// A run shared by several scenarios has the same figures in each;
		// two runs (Redis's plain and durable ones) differ in them.
		key := fmt.Sprintf("%s %s %d %d %s %d %v", s.Target, s.Route, s.Workers, s.Batch, s.Mode, s.Decisions, s.NodeCPUSeconds)
		if len(s.NodeCPUSeconds) == 0 || seen[key] {
			return
		}
		seen[key] = true
		out = append(out, cpuRow{scenario, s})
	}
	for _, s := range r.Scenarios {
		add(s.Scenario, s.Quorate)
	}
	for _, t := range r.Topology {
		add(t.Scenario+", one group", t.OneGroup)
	}
	for _, h := range r.Hot {
		add(h.Scenario+", policy with a local block", h.Local)
		add(h.Scenario+", policy without", h.Strict)
		add(h.Scenario+fmt.Sprintf(", policy with a local block, every key hot (%d keys)", hotBoundKeys), h.Bound)
	}
	// The others' servers, for the CPU a decision costs each system.
	for _, s := range r.Scenarios {
		if s.Gubernator != nil {
			add("Gubernator: "+s.Scenario, *s.Gubernator)
		}
	}
	for _, h := range r.Hot {
		if h.Gubernator != nil {
			add("Gubernator: "+h.Scenario, *h.Gubernator)
		}
	}
	for _, s := range r.Scenarios {
		add("Redis: "+s.Scenario, s.Redis)
	}
	return out
}

// fmtCPUSeconds prints each node's CPU-seconds, "1.20 / 0.95 / 0.90".
func fmtCPUSeconds(secs []float64) string {
	parts := make([]string, len(secs))
	for i, s := range secs {
		parts[i] = fmt.Sprintf("%.2f", s)
	}
	return strings.Join(parts, " / ")
}

// writeCPUText prints the CPU table.
func writeCPUText(w io.Writer, r CompareResult) {
	rows := cpuRows(r)
	if len(rows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUORATE RUN\tNODES' CPU-S\tDECISIONS/BUSIEST NODE'S CPU-S\tDECISIONS/CPU-S OF ALL\tLOG ENTRIES\tDECISIONS/ENTRY\tCPU µS/ENTRY")
	for _, c := range rows {
		dpe, cpe := perEntry(c.run)
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%d\t%s\t%s\n", c.scenario, fmtCPUSeconds(c.run.NodeCPUSeconds),
			c.run.DecisionsPerBusiestCPUSecond, c.run.DecisionsPerCPUSecond, c.run.LogEntries, dpe, cpe)
	}
	tw.Flush()
}

// cpuSection is the CPU table in Markdown.
func cpuSection(r CompareResult) string {
	rows := cpuRows(r)
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintln(&b, "Quorate's nodes' CPU in each run (user + system of each `quorate serve` process): what one of three machines would spend; "+
		"then Gubernator's three processes and the Redis server in theirs (Redis is one process: its busiest is all of it):")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| Quorate run | nodes' CPU-seconds | decisions per CPU-second of the busiest node | of all three | log entries | decisions per entry | CPU µs per entry (all three nodes) |")
	fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|---:|")
	for _, c := range rows {
		dpe, cpe := perEntry(c.run)
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f | %d | %s | %s |\n", c.scenario, fmtCPUSeconds(c.run.NodeCPUSeconds),
			c.run.DecisionsPerBusiestCPUSecond, c.run.DecisionsPerCPUSecond, c.run.LogEntries, dpe, cpe)
	}
	return b.String()
}

// perEntry is a run's decisions per log entry and its nodes' CPU per
// entry in microseconds (every cost of the run divided by its entries),
// "—" for both without entries.
func perEntry(s BenchSummary) (string, string) {
	if s.LogEntries <= 0 {
		return "—", "—"
	}
	var cpu float64
	for _, c := range s.NodeCPUSeconds {
		cpu += c
	}
	e := float64(s.LogEntries)
	return fmt.Sprintf("%.1f", float64(s.Decisions)/e), fmt.Sprintf("%.0f", cpu/e*1e6)
}
