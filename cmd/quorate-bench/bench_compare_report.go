package main

// The report of quorate-bench compare: the text table, the notes, the
// machine it ran on and the section of docs/BENCHMARKS.md it writes.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// writeCompareText prints the table, the runs' errors and the machine.
func writeCompareText(w io.Writer, r CompareResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tQUORATE/S\tREDIS/S\tQUORATE/REDIS\tGUBERNATOR/S\tQUORATE/GUBERNATOR\tQUORATE P50/P99 MS\tREDIS P50/P99 MS\tGUBERNATOR P50/P99 MS")
	for _, s := range r.Scenarios {
		g := gubernatorCells(s, r.Machine)
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t%s\n", s.Scenario, s.Quorate.DecisionsPerSecond, s.Redis.DecisionsPerSecond,
			s.Ratio, g[0], g[1], fmtP50P99(s.Quorate), fmtP50P99(s.Redis), g[2])
	}
	tw.Flush()
	writeTopologyText(w, r.Topology)
	writeHotText(w, r)
	writeCPUText(w, r)
	for _, line := range compareNotes(r) {
		fmt.Fprintln(w, line)
	}
	m := r.Machine
	fmt.Fprintf(w, "machine: %s × %d (GOMAXPROCS %d), %s memory, %s, %s, %s; build %s; load average before %s; data in %s\n",
		m.CPU, m.CPUs, m.GOMAXPROCS, m.Memory, m.Kernel, m.Go, m.Redis, m.Build, m.LoadAvg, m.DataDir)
	fmt.Fprintf(w, "quorate: %s\ngubernator: %s\nload: %s\nbucket: %s\n", m.Quorate, m.Gubernator, m.Load, m.Bucket)
	if f := floorLine(r); f != "" {
		fmt.Fprintf(w, "floor: %s\n", f)
	}
	if r.Cost != nil {
		fmt.Fprintf(w, "cost: %s\n", *r.Cost)
	}
}

// floorLine is the floor of one decision and Quorate's one-client p50 as
// a multiple of it; "" when no floor was measured.
func floorLine(r CompareResult) string {
	f := r.Machine.Floor
	if f == nil {
		return ""
	}
	line := f.String()
	for _, s := range r.Scenarios {
		if q := s.Quorate; q.Workers == 1 && q.Batch == 1 && q.Floor != nil {
			return fmt.Sprintf("%s; Quorate's one-client p50 %.3f ms is %.2f× it", line, q.LatencyMs["p50"], q.P50OverFloor)
		}
	}
	return line
}

func fmtP50P99(s BenchSummary) string {
	return fmt.Sprintf("%.2f / %.2f", s.LatencyMs["p50"], s.LatencyMs["p99"])
}

// gubernatorCells are a row's Gubernator decisions/s, Quorate/Gubernator
// ratio and p50/p99: "not installed" when no gubernator was found, "—" in
// the rows Gubernator has no counterpart in (durable Redis).
func gubernatorCells(s CompareRowOut, m machineInfo) [3]string {
	switch {
	case s.Gubernator != nil:
		g := *s.Gubernator
		return [3]string{fmt.Sprintf("%.0f", g.DecisionsPerSecond), fmt.Sprintf("%.2f", s.GubernatorRatio), fmtP50P99(g)}
	case m.Gubernator == gubernatorNotInstalled && !strings.Contains(s.Scenario, "durable"):
		return [3]string{"not installed", "—", "—"}
	}
	return [3]string{"—", "—", "—"}
}

// compareGapNoteAfter is the longest gap between answers a run may have
// without a note: a longer one means the system stalled (an election, a
// pause) during the run.
const compareGapNoteAfter = time.Second

// compareNotes lists what went wrong in the runs: errors, denials (which
// mean the sides did not do the same work) and stalls (a longest gap
// between answers of compareGapNoteAfter or more).
func compareNotes(r CompareResult) []string {
	var notes []string
	seen := map[string]bool{}
	for _, s := range r.Scenarios {
		sides := []struct {
			name string
			sum  BenchSummary
		}{{"Quorate", s.Quorate}, {"Redis", s.Redis}}
		if s.Gubernator != nil {
			sides = append(sides, struct {
				name string
				sum  BenchSummary
			}{"Gubernator", *s.Gubernator})
		}
		for _, side := range sides {
			key := fmt.Sprintf("%s %d %d %s", side.name, side.sum.Workers, side.sum.Batch, s.Scenario)
			if seen[key] {
				continue
			}
			seen[key] = true
			gap := ""
			if g := side.sum.LongestGapMs; g != nil && *g >= float64(compareGapNoteAfter.Milliseconds()) && side.sum.LongestGapAtS != nil {
				gap = fmt.Sprintf("; no answer for %.0f ms from %.1fs into the run", *g, *side.sum.LongestGapAtS)
			}
			if len(side.sum.Errors) > 0 || len(side.sum.ItemErrors) > 0 || side.sum.Denied > 0 || gap != "" {
				notes = append(notes, fmt.Sprintf("note: %s: %s side: failed calls %s; failed requests %s; denied %d%s",
					s.Scenario, side.name, fmtCounts(side.sum.Errors), fmtCounts(side.sum.ItemErrors), side.sum.Denied, gap))
			}
		}
	}
	return notes
}

// machineInfo describes where and how a comparison ran.
type machineInfo struct {
	CPU        string `json:"cpu"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Memory     string `json:"memory"`
	Kernel     string `json:"kernel"`
	Go         string `json:"go"`
	Redis      string `json:"redis"`
	Gubernator string `json:"gubernator"` // its cluster and version, or that it is not installed
	Build      string `json:"build"`      // this binary's VCS revision, "(modified)" when built from a dirty tree
	Quorate    string `json:"quorate"`    // the cluster: nodes, data groups, how it runs
	LoadAvg    string `json:"loadAvg"`    // /proc/loadavg before the runs: other work on the machine
	Date       string `json:"date"`
	Command    string `json:"command"`
	DataDir    string `json:"dataDir"`
	Load       string `json:"load"`
	Bucket     string `json:"bucket"`
	// Floor is one decision's floor on the clusters' disk, measured
	// before they start: what a one-client p50 is set against.
	Floor *Floor `json:"floor,omitempty"`
}

// describeMachine reads the CPU, memory and kernel from /proc (falling back
// to what Go knows), and asks redisBin its version.
func describeMachine(ctx context.Context, redisBin string) machineInfo {
	m := machineInfo{CPU: "unknown CPU", CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Memory: "unknown",
		Kernel: runtime.GOOS, Go: runtime.Version(), Build: buildRevision(ctx), LoadAvg: "unknown",
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Command: shellJoin(os.Args)}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			switch strings.TrimSpace(k) {
			case "processor":
				n++
			case "model name":
				if m.CPU == "unknown CPU" {
					m.CPU = strings.TrimSpace(v)
				}
			}
		}
		if n > 0 {
			m.CPUs = n
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					m.Memory = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if b, err := exec.CommandContext(vctx, redisBin, "--version").Output(); err == nil {
		m.Redis = strings.TrimSpace(string(b))
	} else {
		m.Redis = fmt.Sprintf("%s --version: %v", redisBin, err)
	}
	return m
}

// buildRevision returns the VCS revision this binary was built from, with
// "(modified)" when the tree had uncommitted changes. A binary built without
// VCS information (-buildvcs=false, go test) gets the git revision of the
// current directory's tree at run time instead, said so, or "unknown".
func buildRevision(ctx context.Context) string {
	rev, modified := "", false
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	suffix := ""
	if rev == "" {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		out, err := exec.CommandContext(gctx, "git", "rev-parse", "HEAD").Output()
		if err != nil {
			return "unknown"
		}
		rev, suffix = strings.TrimSpace(string(out)), " (no VCS stamp in the binary: the git tree at run time)"
		status, err := exec.CommandContext(gctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
		modified = err != nil || len(bytes.TrimSpace(status)) > 0
	}
	rev = rev[:min(12, len(rev))]
	if modified {
		rev += " (modified)"
	}
	return rev + suffix
}

// describeDir names dir with the file system it is on (from /proc/mounts),
// since fsync costs depend on it.
func describeDir(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return abs
	}
	best, desc := "", ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		mp := f[1]
		if (abs == mp || strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best, desc = mp, fmt.Sprintf("%s on %s", f[2], f[0])
		}
	}
	if desc == "" {
		return abs
	}
	return fmt.Sprintf("%s (%s)", abs, desc)
}

// shellJoin quotes args for a shell where needed.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@+", r))
		}) < 0 {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// benchmarksSection renders r as the generated markdown section, markers
// included.
func benchmarksSection(r CompareResult) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintln(&b, benchSectionBegin)
	fmt.Fprintf(&b, "## Quorate vs Redis vs Gubernator, %s\n\n", m.Date)
	fmt.Fprintf(&b, "`%s`\n\n", m.Command)
	fmt.Fprintln(&b, "| scenario | Quorate decisions/s | Redis decisions/s | Quorate/Redis | Gubernator decisions/s | Quorate/Gubernator "+
		"| Quorate p50 / p99 ms | Redis p50 / p99 ms | Gubernator p50 / p99 ms |")
	fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range r.Scenarios {
		g := gubernatorCells(s, m)
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.2f | %s | %s | %s | %s | %s |\n", s.Scenario, s.Quorate.DecisionsPerSecond, s.Redis.DecisionsPerSecond,
			s.Ratio, g[0], g[1], fmtP50P99(s.Quorate), fmtP50P99(s.Redis), g[2])
	}
	for _, t := range []string{topologySection(r.Topology), hotSection(r), cpuSection(r)} {
		if t != "" {
			fmt.Fprintln(&b)
			fmt.Fprint(&b, t)
		}
	}
	if notes := compareNotes(r); len(notes) > 0 {
		fmt.Fprintln(&b)
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s\n", strings.TrimPrefix(n, "note: "))
		}
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| machine | |")
	fmt.Fprintln(&b, "|---|---|")
	for _, kv := range [][2]string{
		{"CPU", fmt.Sprintf("%s × %d (GOMAXPROCS %d)", m.CPU, m.CPUs, m.GOMAXPROCS)},
		{"memory", m.Memory},
		{"kernel", m.Kernel},
		{"Go", m.Go},
		{"Redis", m.Redis},
		{"Gubernator", m.Gubernator},
		{"Quorate build", m.Build},
		{"Quorate cluster", m.Quorate},
		{"load average before", m.LoadAvg},
		{"data", m.DataDir},
		{"load", m.Load},
		{"bucket", m.Bucket},
		{"floor of one decision (2 × fdatasync + round trip)", floorLine(r)},
		{"cost model", costLine(r)},
	} {
		fmt.Fprintf(&b, "| %s | %s |\n", kv[0], strings.ReplaceAll(kv[1], "|", `\|`))
	}
	fmt.Fprintln(&b)
	fmt.Fprint(&b, `How each side runs, one after the other (only one of them is up at a time):

- **Redis**: one `+"`redis-server`"+` on loopback with `+"`--save \"\" --appendonly no`"+` (nothing
  survives a crash), then a fresh one with `+"`--appendonly yes --appendfsync always`"+` ("durable":
  one fsync per write, on one machine, no replica). Each request is an EVALSHA of the seed's
  token-bucket Lua script (SCRIPT LOAD once); "pipelined N deep" sends N of them per round trip.
- **Gubernator**: three `+"`gubernator`"+` processes (one per node, on 127.0.0.1, .2 and .3, each
  under its own host name, joined by memberlist gossip), in memory (nothing survives a restart),
  default behaviour (requests for keys another node owns are batched and forwarded to it). Each
  request is one item of a `+"`GetRateLimits`"+` call over gRPC (TOKEN_BUCKET, the Redis bucket's
  limit and refill time); "GetRateLimits of N" sends N items per call. No row against durable Redis.
- **Quorate**: a 3-node cluster, three `+"`quorate serve`"+` processes (one per node, as on three
  machines), with the default topology, one data group per node (`+"`--groups auto`"+`); every decision is committed to a majority of the three fsynced Raft logs before it is
  answered. The bench drives it through the Go client (package `+"`client`"+`), which learns the
  shard map and sends each unary Admit straight to its key's group leader, one Admit call per
  decision (no coalescing, as one item per GetRateLimits call); every request carries a request
  ID. "AdmitBatch N" is one call of N independent decisions, sent to the nodes in turn (the node
  forwards each decision to its key's group leader). The topology table repeats the unary
  and batch runs against a second cluster whose keys all live in one group (`+"`--groups 0`"+`).
  Each node's CPU (user + system, from `+"`/proc`"+`) is read before and after every Quorate run:
  decisions per CPU-second of the busiest node is what one of three machines would sustain.
- "Spread over every node": the same unary Admits sent to the three nodes in turn, each
  forwarding a call to its key's group leader when it does not lead that group (what gRPC, JSON
  and Envoy callers, which do not learn the shard map, get).
- "Open loop at half": each side gets calls started on a schedule at half the calls/s it
  answered in its own 64-client unary run, latency counted from each call's scheduled start.
- Same generator for all (`+"`quorate-bench`"+`, in the bench process): closed loop, keys drawn
  independently for every request, fresh keys for every run. Decisions/s counts answered requests;
  latency is per call (a batch or a pipeline is one call). No warm-up.
`)
	fmt.Fprintln(&b, benchSectionEnd)
	return b.String()
}

// benchmarksHeader starts a new docs/BENCHMARKS.md.
const benchmarksHeader = `# Benchmarks

Quorate's strict, replicated decisions beside the usual alternatives: Redis running a token-bucket
Lua script, and a Gubernator cluster. The section below is generated by ` + "`make bench-compare`" + ` (` + "`quorate-bench compare\n--write docs/BENCHMARKS.md`" + `), which rewrites it between its markers; it records the machine and
the exact command. The numbers are measurements of that machine at that moment, not promises:
rerun it on yours.

`

// writeBenchmarksFile writes section into path: between the markers when
// the file has them, appended when it has not, or as a new file with a
// header.
func writeBenchmarksFile(path, section string) error {
	old, err := os.ReadFile(path)
	var content string
	switch {
	case errors.Is(err, os.ErrNotExist):
		content = benchmarksHeader + section
	case err != nil:
		return err
	default:
		s := string(old)
		begin, end := strings.Index(s, benchSectionBegin), strings.Index(s, benchSectionEnd)
		if begin >= 0 && end > begin {
			content = s[:begin] + section + strings.TrimPrefix(s[end+len(benchSectionEnd):], "\n")
		} else {
			content = strings.TrimRight(s, "\n") + "\n\n" + section
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// costLine is the fitted cost model, or why there is none.
func costLine(r CompareResult) string {
	if r.Cost == nil {
		return "not fitted (the runs could not tell the costs apart)"
	}
	return r.Cost.String()
}
