package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// The hot-keys table of quorate-bench compare: callers without the Go
// client (gRPC, JSON, Envoy) on keys drawn zipf s=1.1, spread over every
// node, deciding under a policy with a local block — the nodes decide hot
// keys from the grants they hold — beside the same policy without it (each
// decision through the key's log) and Gubernator on the same keys and
// generator.

// comparePolicyLocal is comparePolicy with a local block: nodes may decide
// its hot keys from the grants they hold.
const comparePolicyLocal = "bench-compare-local"

// hotBoundKeys is how many keys the bound runs draw from: few enough
// that each is hot at every node from the start.
const hotBoundKeys = 20

// hotRow is one line of the hot-keys table: bound is local's run on
// hotBoundKeys keys.
type hotRow struct {
	scenario                         string
	local, strict, bound, gubernator compareRun
}

// hotRows lists the hot-keys table's lines for o.
func hotRows(o loadOptions) []hotRow {
	w := o.workers
	gub := compareRun{target: targetGubernator, workers: w, batch: 1, hot: true}
	return []hotRow{{
		scenario: fmt.Sprintf("%d callers without the Go client spread over every node, zipf keys: unary Admit", w),
		local:    compareRun{target: targetQuorate, workers: w, batch: 1, hot: true, local: true},
		strict:   compareRun{target: targetQuorate, workers: w, batch: 1, hot: true},
		bound:    compareRun{target: targetQuorate, workers: w, batch: 1, hot: true, local: true, allHot: true}, gubernator: gub,
	}, {
		scenario: fmt.Sprintf("%d Envoy callers spread over every node, zipf descriptors: ShouldRateLimit", w),
		local:    compareRun{target: targetEnvoy, workers: w, batch: 1, hot: true, local: true},
		strict:   compareRun{target: targetEnvoy, workers: w, batch: 1, hot: true},
		bound:    compareRun{target: targetEnvoy, workers: w, batch: 1, hot: true, local: true, allHot: true}, gubernator: gub,
	}}
}

// HotRowOut is a line of the hot-keys table (-o json).
type HotRowOut struct {
	Scenario string       `json:"scenario"`
	Local    BenchSummary `json:"local"`  // the policy with a local block
	Strict   BenchSummary `json:"strict"` // the same without it
	// LocalRatio is Local's decisions/s ÷ Strict's.
	LocalRatio float64 `json:"localRatio"`
	// Bound is the local run on hotBoundKeys keys, every call decided
	// from a node's grant: the most local decisions give on this machine
	// through the same generator. BoundRatio is its decisions/s ÷
	// Strict's (the highest LocalRatio could be here), LocalOfBound
	// Local's ÷ its.
	Bound        BenchSummary `json:"bound"`
	BoundRatio   float64      `json:"boundRatio"`
	LocalOfBound float64      `json:"localOfBound"`
	// CPURatio is Local's decisions per CPU-second of the busiest node ÷
	// Strict's: what three machines with their callers elsewhere would
	// see.
	CPURatio   float64       `json:"cpuRatio"`
	Gubernator *BenchSummary `json:"gubernator,omitempty"`
	// GubernatorRatio is Local's decisions/s ÷ Gubernator's.
	GubernatorRatio float64 `json:"gubernatorRatio,omitempty"`
}

// hotResult is the hot-keys table of results.
func hotResult(rows []hotRow, results map[compareRun]BenchSummary) []HotRowOut {
	var out []HotRowOut
	for _, r := range rows {
		l, s, b := results[r.local], results[r.strict], results[r.bound]
		row := HotRowOut{Scenario: r.scenario, Local: l, Strict: s, Bound: b}
		row.LocalRatio, row.BoundRatio = ratio(l.DecisionsPerSecond, s.DecisionsPerSecond), ratio(b.DecisionsPerSecond, s.DecisionsPerSecond)
		row.LocalOfBound = ratio(l.DecisionsPerSecond, b.DecisionsPerSecond)
		row.CPURatio = ratio(l.DecisionsPerBusiestCPUSecond, s.DecisionsPerBusiestCPUSecond)
		if g, ok := results[r.gubernator]; ok {
			row.Gubernator = &g
			if g.DecisionsPerSecond > 0 {
				row.GubernatorRatio = l.DecisionsPerSecond / g.DecisionsPerSecond
			}
		}
		out = append(out, row)
	}
	return out
}

// ratio is a ÷ b, 0 when b is.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// hotGubernatorCells are a hot row's Gubernator decisions/s, ratio and
// p50/p99, or what says it did not run.
func hotGubernatorCells(r HotRowOut, m machineInfo) [3]string {
	if r.Gubernator == nil {
		return [3]string{m.Gubernator, "—", "—"}
	}
	return [3]string{fmt.Sprintf("%.0f", r.Gubernator.DecisionsPerSecond), fmt.Sprintf("%.2f", r.GubernatorRatio), fmtP50P99(*r.Gubernator)}
}

// writeHotText prints the hot-keys table.
func writeHotText(w io.Writer, r CompareResult) {
	if len(r.Hot) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOT KEYS\tLOCAL/S\tSTRICT/S\tLOCAL/STRICT\tALL HOT/S\tALL HOT/STRICT\tLOCAL/ALL HOT\tLOCAL/STRICT PER BUSIEST CPU-S\tGUBERNATOR/S\tLOCAL/GUBERNATOR\tLOCAL P50/P99 MS\tSTRICT P50/P99 MS\tGUBERNATOR P50/P99 MS")
	for _, h := range r.Hot {
		g := hotGubernatorCells(h, r.Machine)
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t%.0f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t%s\n", h.Scenario, h.Local.DecisionsPerSecond, h.Strict.DecisionsPerSecond,
			h.LocalRatio, h.Bound.DecisionsPerSecond, h.BoundRatio, h.LocalOfBound, h.CPURatio, g[0], g[1], fmtP50P99(h.Local), fmtP50P99(h.Strict), g[2])
	}
	tw.Flush()
}

// hotSection is the hot-keys table in Markdown.
func hotSection(r CompareResult) string {
	if len(r.Hot) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Hot keys for callers without the Go client (plain Admit calls, or Envoy's ShouldRateLimit, to every node in turn, no request IDs; keys zipf s=1.1): "+
		"policy `%s` (and Envoy domain `%s`) has `local: {mode: grant}`, so the nodes decide its hot keys from the grants they hold; `%s` (`%s`) is the same without it; "+
		"Gubernator answers GetRateLimits on the same keys from the same generator. "+
		"*All hot* is the local run on %d keys only, each hot at every node from the start, so that every call is decided from a node's grant: "+
		"the most local decisions give through the same generator, HTTP stack and machine, whose cores the generator shares with the nodes; "+
		"all hot/strict is the highest local/strict can be here. "+
		"The ratio per CPU-second of the busiest node is what three machines with their callers elsewhere would see:\n\n",
		comparePolicyLocal, envoyDomainLocal, comparePolicy, envoyDomainStrict, hotBoundKeys)
	fmt.Fprintln(&b, "| scenario | local decisions/s | strict decisions/s | local/strict | all hot decisions/s | all hot/strict | local/all hot "+
		"| local/strict per CPU-second of the busiest node | Gubernator decisions/s | local/Gubernator | local p50 / p99 ms | strict p50 / p99 ms | Gubernator p50 / p99 ms |")
	fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, h := range r.Hot {
		g := hotGubernatorCells(h, r.Machine)
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.2f | %.0f | %.2f | %.2f | %.2f | %s | %s | %s | %s | %s |\n", h.Scenario, h.Local.DecisionsPerSecond, h.Strict.DecisionsPerSecond,
			h.LocalRatio, h.Bound.DecisionsPerSecond, h.BoundRatio, h.LocalOfBound, h.CPURatio, g[0], g[1], fmtP50P99(h.Local), fmtP50P99(h.Strict), g[2])
	}
	return b.String()
}
