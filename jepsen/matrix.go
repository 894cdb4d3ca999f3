package jepsen

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// MatrixRun is one row of a matrix: the fault families of one run.
type MatrixRun struct {
	Name     string
	Families []string
	Groups   int           // data groups (quorate serve --groups); 0: one group
	Nodes    int           // 0: the matrix's default
	Duration time.Duration // 0: the matrix's default
	Scale    bool          // run the scale scenario too (Options.Scale)
	Recovery bool          // run the recovery scenario too (Options.Recovery)
	Interval time.Duration // quiet time between faults (NemesisOptions.Interval); 0: the matrix's default
	TLS      bool          // on a TLS cluster (Options.TLS); the matrix's Options.TLS puts every row on one
	// Workloads of the row when the matrix's Options name none; nil: every
	// workload.
	Workloads []string
}

// serverWorkloads are the workloads of a short-matrix row that leaves the
// grant workload (and its client faults) to another row.
var serverWorkloads = []string{WorkloadTokenBucket, WorkloadFixedWindow, WorkloadLease}

// FullMatrix is `make jepsen`: each fault family alone, then all mixed, on
// one Raft group; then all mixed again on 8 data groups; replica moves and
// slot moves with kills; the scale scenario (3 → 5 → 3 nodes); the
// recovery scenario (two of three nodes lost for good); and kills with
// partitions on a TLS cluster of 8 data groups.
func FullMatrix() []MatrixRun {
	var runs []MatrixRun
	for _, f := range Families {
		runs = append(runs, MatrixRun{Name: f, Families: []string{f}})
	}
	return append(runs, MatrixRun{Name: "mixed", Families: Families},
		MatrixRun{Name: "mixed-8-groups", Families: Families, Groups: 8},
		MatrixRun{Name: "move+kill-5-nodes-8-groups", Families: []string{FamilyMove, FamilyKill}, Groups: 8, Nodes: 5},
		MatrixRun{Name: "slots+kill-3-nodes-4-groups", Families: []string{FamilySlots, FamilyKill}, Groups: 4, Nodes: 3},
		MatrixRun{Name: "scale-3-5-3-nodes-4-groups", Groups: 4, Nodes: 3, Scale: true},
		MatrixRun{Name: "recovery-3-nodes-4-groups", Groups: 4, Nodes: 3, Recovery: true},
		MatrixRun{Name: "kill+partition-8-groups-tls", Families: []string{FamilyKill, FamilyPartition}, Groups: 8, TLS: true})
}

// ShortMatrix is CI's: a few short runs that still cover partitions,
// kills and pauses (and clock jumps and restarts), on one Raft group and on
// 8 data groups, replica moves with kills on 5 nodes, slot moves with
// kills on 4 data groups, and kills with partitions on a TLS cluster (15 s).
// The grant and grant-sync workloads (budget-leasing clients, which they
// kill and pause themselves) run in the kill+pause row, beside kills and
// pauses of servers; grant-bucket, which would starve them on two cores,
// runs in the full matrix and its own test. (The scale scenario has its
// own test.)
func ShortMatrix() []MatrixRun {
	w := serverWorkloads
	return []MatrixRun{
		{Name: "partition-8-groups", Families: []string{FamilyPartition}, Groups: 8, Workloads: w},
		{Name: "kill+pause", Families: []string{FamilyKill, FamilyPause}, Workloads: slices.Concat(w, []string{WorkloadGrant, WorkloadGrantSync})},
		{Name: "clock+restart-8-groups", Families: []string{FamilyClock, FamilyRestart}, Groups: 8, Workloads: w},
		{Name: "move+kill-5-nodes-8-groups", Families: []string{FamilyMove, FamilyKill}, Groups: 8, Nodes: 5, Workloads: w},
		{Name: "slots+kill-3-nodes-4-groups", Families: []string{FamilySlots, FamilyKill}, Groups: 4, Nodes: 3, Interval: time.Second, Workloads: w},
		{Name: "kill+partition-tls", Families: []string{FamilyKill, FamilyPartition}, Duration: 15 * time.Second, TLS: true, Workloads: w},
	}
}

// MatrixResult is one finished (or failed) run.
type MatrixResult struct {
	Run     MatrixRun
	Options Options
	Report  *Report
	Err     error
	Took    time.Duration
}

// OK reports whether the run completed and every checker passed.
func (m MatrixResult) OK() bool { return m.Err == nil && m.Report != nil && m.Report.OK() }

// RunMatrix runs each row with base's options (its own seed: base.Seed+i,
// its own report directory under base.ReportDir), printing a line as each
// starts and ends, and returns the results. It stops early only when ctx ends.
func RunMatrix(ctx context.Context, base Options, runs []MatrixRun, progress io.Writer) []MatrixResult {
	if base.Seed == 0 {
		base.Seed = uint64(time.Now().UnixNano())
	}
	var out []MatrixResult
	for i, row := range runs {
		if ctx.Err() != nil {
			break
		}
		opts := base
		opts.Seed = base.Seed + uint64(i)
		opts.Nemesis.Families = row.Families
		opts.Groups = row.Groups
		opts.Scale = row.Scale
		opts.Recovery = row.Recovery
		opts.TLS = base.TLS || row.TLS
		if len(base.Workloads) == 0 {
			opts.Workloads = row.Workloads
		}
		if row.Interval != 0 {
			opts.Nemesis.Interval = row.Interval
		}
		if row.Duration != 0 {
			opts.Duration = row.Duration
		}
		if row.Nodes != 0 {
			opts.Nodes = row.Nodes
		}
		opts.ReportDir = filepath.Join(base.ReportDir, fmt.Sprintf("%02d-%s", i+1, strings.ReplaceAll(row.Name, "+", "-")))
		fmt.Fprintf(progress, "run %d/%d %s: seed %d, %v, report %s\n", i+1, len(runs), row.Name, opts.Seed, opts.Duration, opts.ReportDir)
		began := time.Now()
		r, err := Run(ctx, opts)
		res := MatrixResult{Run: row, Options: opts, Report: r, Err: err, Took: time.Since(began)}
		verdict := "PASS"
		if !res.OK() {
			verdict = "FAIL"
		}
		fmt.Fprintf(progress, "run %d/%d %s: %s in %v\n", i+1, len(runs), row.Name, verdict, res.Took.Round(time.Second))
		out = append(out, res)
	}
	return out
}

// FormatMatrix renders the table of runs: fault families, duration, ops,
// faults, every checker's verdict and the command that reproduces each run.
func FormatMatrix(results []MatrixResult) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tfaults\tgroups\tduration\tops\tok\tunknown\tfaults injected\tverdicts\tresult")
	for _, m := range results {
		faults := familiesArg(m.Run.Families)
		if m.Run.Scale {
			faults += "+scale"
		}
		if m.Options.TLS {
			faults += "+tls"
		}
		row := []string{m.Run.Name, faults, fmt.Sprint(max(m.Run.Groups, 1)), m.Options.Duration.String()}
		if m.Report == nil {
			row = append(row, "-", "-", "-", "-", "error: "+m.Err.Error(), "FAIL")
			fmt.Fprintln(tw, strings.Join(row, "\t"))
			continue
		}
		r := m.Report
		var verdicts []string
		for _, v := range r.Verdicts {
			mark := "ok"
			if !v.OK {
				mark = fmt.Sprintf("FAIL(%d)", len(v.Violations))
			}
			verdicts = append(verdicts, v.Checker+"="+mark)
		}
		result := "PASS"
		if !m.OK() {
			result = "FAIL"
			if m.Err != nil {
				result += ": " + m.Err.Error()
			}
		}
		row = append(row, fmt.Sprint(len(r.Ops)), fmt.Sprint(r.Counts[OutcomeAllowed]+r.Counts[OutcomeDenied]),
			fmt.Sprint(r.Counts[OutcomeUnknown]+r.Counts[OutcomeFail]), faultCounts(r.Faults), strings.Join(verdicts, " "), result)
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	for _, m := range results {
		o := m.Options
		if m.Report != nil {
			o = m.Report.Options
		}
		fmt.Fprintf(&b, "reproduce %s: %s\n", m.Run.Name, ReproduceCommand(o))
	}
	return b.String()
}

// ReproduceCommand is the quorate-jepsen command line that replays opts'
// schedule: the same seed, workloads, faults, sizes and every other flag
// that changes the run, built from the options (a run driven from a test
// gets the equivalent command), each argument quoted for a POSIX shell
// when it needs to be. Defaults are filled in as Run fills them.
func ReproduceCommand(o Options) string {
	seed := o.Seed
	_ = o.defaults() // on the copy; an unknown workload is printed as it is
	o.Seed = seed    // 0 (from the time) stays 0
	interval := o.Nemesis.Interval
	if interval == 0 {
		interval = 2 * time.Second // Nemesis.Run's default
	}
	args := []string{"quorate-jepsen", "--seed", fmt.Sprint(o.Seed), "--duration", o.Duration.String(),
		"--nodes", fmt.Sprint(max(o.Nodes, 3)), "--workload", strings.Join(o.Workloads, ","),
		"--faults", familiesArg(o.Nemesis.Families), "--clients", fmt.Sprint(o.Clients), "--keys", fmt.Sprint(o.Keys),
		"--capacity", fmt.Sprint(o.Capacity), "--limit", fmt.Sprint(o.Limit), "--window", o.Window.String(),
		"--holders", fmt.Sprint(o.Holders), "--lease-ttl", o.LeaseTTL.String(), "--grant-limit", fmt.Sprint(o.GrantLimit)}
	if o.Net != "" {
		args = append(args, "--net", o.Net)
	}
	if o.Groups != 0 {
		args = append(args, "--groups", fmt.Sprint(o.Groups))
	}
	if o.Scale {
		args = append(args, "--scale")
	}
	if o.Recovery {
		args = append(args, "--recovery")
	}
	if o.TLS {
		args = append(args, "--tls")
	}
	args = append(args, "--interval", interval.String())
	if o.BuildTags != "" {
		args = append(args, "--planted-bug", plantedName(o.BuildTags))
	}
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return strings.Join(args, " ")
}

// shellQuote quotes s for a POSIX shell unless it is made only of
// characters no shell treats specially.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,:/=+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func familiesArg(f []string) string {
	if len(f) == 0 {
		return "none"
	}
	return strings.Join(f, ",")
}

// Planted bugs: build tags that break the server on purpose, so the
// harness can show that its checkers fail.
var PlantedBugs = map[string]string{
	"dedupe":     "quorate_planted_bug",        // Admit ignores request IDs: retries spend again
	"local-read": "quorate_planted_local_read", // Admit answered from the local replica before the log
	"overspend":  PlantedClientOverspend,       // nodes spend past the grants they hold for their callers
}

// PlantedClientOverspend is the build tag that plants a bug in package
// client: a grant holder spends up to 5 units past its grant (see
// client/planted_overspend_on.go). The nodes hold grants through package
// client, so a server built with it (--planted-bug overspend) spends past
// the grants it holds for its plain callers. The grant workload's Go
// clients run in the harness's own process, so to plant the bug in them
// it is the harness that is built with it (go build -tags
// quorate_planted_overspend ./cmd/quorate-jepsen). Either way the
// no-over-admission checkers must then fail.
const PlantedClientOverspend = "quorate_planted_overspend"

func plantedName(tags string) string {
	for name, tag := range PlantedBugs {
		if tag == tags {
			return name
		}
	}
	return tags
}
