package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// The topology table of quorate-bench compare: the cluster's default data
// groups beside one group (--groups 0), same runs, same machine. More
// groups spread leaders and keys over the nodes; on one machine each also
// costs its own log appends and replication rounds, and this table shows
// what that costs. compareResult puts the runs into both tables.

// TopologyRowOut is one run against the default topology and against one
// group (-o json).
type TopologyRowOut struct {
	Scenario string       `json:"scenario"`
	Default  BenchSummary `json:"default"`
	OneGroup BenchSummary `json:"oneGroup"`
	Ratio    float64      `json:"ratio"` // default decisions/s ÷ one group's
	// CPURatio is the default's decisions per CPU-second of its busiest
	// node ÷ one group's (0 when the CPU was not read).
	CPURatio float64 `json:"cpuRatio,omitempty"`
}

// writeTopologyText prints the topology table.
func writeTopologyText(w io.Writer, rows []TopologyRowOut) {
	if len(rows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPOLOGY\tDEFAULT/S\tONE GROUP/S\tDEFAULT/ONE GROUP\tDEFAULT P50/P99 MS\tONE GROUP P50/P99 MS\t"+
		"DEFAULT/BUSIEST CPU-S\tONE GROUP/BUSIEST CPU-S\tDEFAULT/ONE GROUP PER CPU-S")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t%s\t%s\t%.0f\t%.0f\t%.2f\n", r.Scenario, r.Default.DecisionsPerSecond, r.OneGroup.DecisionsPerSecond,
			r.Ratio, fmtP50P99(r.Default), fmtP50P99(r.OneGroup),
			r.Default.DecisionsPerBusiestCPUSecond, r.OneGroup.DecisionsPerBusiestCPUSecond, r.CPURatio)
	}
	tw.Flush()
}

// topologySection is the topology table in Markdown.
func topologySection(rows []TopologyRowOut) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintln(&b, "Quorate's default topology beside one group (`--groups 0`: every key in the meta group), same runs:")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| scenario | default decisions/s | one group decisions/s | default/one group | default p50 / p99 ms | one group p50 / p99 ms "+
		"| default decisions per busiest node's CPU-second | one group's | default/one group per CPU-second |")
	fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.2f | %s | %s | %.0f | %.0f | %.2f |\n", r.Scenario, r.Default.DecisionsPerSecond, r.OneGroup.DecisionsPerSecond,
			r.Ratio, fmtP50P99(r.Default), fmtP50P99(r.OneGroup),
			r.Default.DecisionsPerBusiestCPUSecond, r.OneGroup.DecisionsPerBusiestCPUSecond, r.CPURatio)
	}
	return b.String()
}

// compareResult puts the runs' summaries into the table's rows, with
// Quorate's ratios to each other side.
func compareResult(machine machineInfo, rows []compareRow, results map[compareRun]BenchSummary) CompareResult {
	out := CompareResult{Machine: machine}
	for _, r := range rows {
		q, rd := results[r.quorate], results[r.redis]
		row := CompareRowOut{Scenario: r.scenario, Quorate: q, Redis: rd}
		if rd.DecisionsPerSecond > 0 {
			row.Ratio = q.DecisionsPerSecond / rd.DecisionsPerSecond
		}
		if g, ok := results[r.gubernator]; ok && r.gubernator.target != "" {
			row.Gubernator = &g
			if g.DecisionsPerSecond > 0 {
				row.GubernatorRatio = q.DecisionsPerSecond / g.DecisionsPerSecond
			}
		}
		out.Scenarios = append(out.Scenarios, row)
	}
	for _, r := range rows {
		if r.oneGroup.target == "" {
			continue
		}
		d, one := results[r.quorate], results[r.oneGroup]
		name := fmt.Sprintf("%d clients: unary Admit", r.oneGroup.workers)
		if r.oneGroup.batch > 1 {
			name = fmt.Sprintf("%d clients: AdmitBatch %d", r.oneGroup.workers, r.oneGroup.batch)
		}
		row := TopologyRowOut{Scenario: name, Default: d, OneGroup: one}
		if one.DecisionsPerSecond > 0 {
			row.Ratio = d.DecisionsPerSecond / one.DecisionsPerSecond
		}
		if one.DecisionsPerBusiestCPUSecond > 0 {
			row.CPURatio = d.DecisionsPerBusiestCPUSecond / one.DecisionsPerBusiestCPUSecond
		}
		out.Topology = append(out.Topology, row)
	}
	return out
}
