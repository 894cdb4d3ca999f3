package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// buildQuorate builds the quorate command (../quorate) into a temporary
// directory and returns the binary's path: compare runs its dev command.
func buildQuorate(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build quorate with: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "quorate")
	if out, err := exec.Command(goTool, "build", "-o", bin, "../quorate").CombinedOutput(); err != nil {
		t.Fatalf("go build ../quorate: %v\n%s", err, out)
	}
	return bin
}

// TestBenchCompare runs a short comparison against a real redis-server and
// a cluster run by a quorate binary built for it, and checks the table, the JSON and the file it
// writes. Speeds are not checked: a benchmark reports, it does not assert.
func TestBenchCompare(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH (apt-get install redis-server, or make bench-compare, installs it); skipping bench compare")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "BENCHMARKS.md")
	if err := os.WriteFile(file, []byte("# Benchmarks\n\nprose before\n\n"+benchSectionBegin+"\nold table\n"+benchSectionEnd+"\n\nprose after\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	args := []string{"compare", "--duration", "1s", "--workers", "4", "--keys", "100", "--batch", "10",
		"--dir", filepath.Join(dir, "data"), "--write", file, "-o", "json", "--quorate-binary", buildQuorate(t)}
	// With the gubernator make bench-compare installs, its columns too.
	gubernator, err := filepath.Abs(filepath.Join("..", "..", gubernatorDefaultBin))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(gubernator); err == nil {
		args = append(args, "--gubernator", gubernator)
	} else {
		t.Logf("no gubernator at %s: its columns are checked to say it is not installed", gubernator)
		gubernator = ""
	}
	err = run(ctx, args, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench compare: %v\n%s", err, stderr.String())
	}
	var r CompareResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("bench compare -o json: %v\n%s", err, stdout.String())
	}
	if len(r.Scenarios) != 7 {
		t.Fatalf("%d scenarios, want 7: %+v", len(r.Scenarios), r.Scenarios)
	}
	for _, s := range r.Scenarios {
		for _, side := range []BenchSummary{s.Quorate, s.Redis} {
			if side.Calls == 0 || side.Decisions == 0 || side.Denied != 0 || len(side.Errors) != 0 || len(side.ItemErrors) != 0 {
				t.Errorf("%s: %s side: %+v", s.Scenario, side.Target, side)
			}
		}
		if s.Quorate.Target != "quorate" || s.Redis.Target != "redis" || s.Quorate.Batch != s.Redis.Batch ||
			s.Quorate.Workers != s.Redis.Workers || s.Ratio <= 0 {
			t.Errorf("%s: sides do not match: %+v", s.Scenario, s)
		}
		if wantGubernator := gubernator != "" && !strings.Contains(s.Scenario, "durable"); wantGubernator != (s.Gubernator != nil) {
			t.Errorf("%s: Gubernator side %+v, want one: %v", s.Scenario, s.Gubernator, wantGubernator)
		} else if g := s.Gubernator; g != nil && (g.Target != targetGubernator || g.Calls == 0 || g.Denied != 0 || len(g.Errors) != 0 ||
			len(g.ItemErrors) != 0 || g.Batch != s.Quorate.Batch || g.Workers != s.Quorate.Workers || s.GubernatorRatio <= 0) {
			t.Errorf("%s: Gubernator side: %+v", s.Scenario, g)
		}
	}
	if r.Scenarios[2].Quorate.Batch != 10 || r.Scenarios[5].Quorate.Workers != 1 {
		t.Errorf("scenarios: %+v", r.Scenarios)
	}
	// The spread row: Quorate's calls go to the nodes in turn, which
	// forward them; the others are sent to the keys' leaders.
	for i, s := range r.Scenarios {
		if want := map[bool]string{true: routeAny, false: routeLeader}[i == 1]; s.Quorate.Route != want {
			t.Errorf("%s: Quorate route %q, want %q", s.Scenario, s.Quorate.Route, want)
		}
	}
	// The half-rate row: each side open loop at half its own unary figure.
	for _, side := range []BenchSummary{r.Scenarios[3].Quorate, r.Scenarios[3].Redis} {
		if side.Mode != "open" || side.Rate != max(1, int(r.Scenarios[0].Quorate.PerSecond/2)) && side.Target == "quorate" ||
			side.Rate != max(1, int(r.Scenarios[0].Redis.PerSecond/2)) && side.Target == "redis" {
			t.Errorf("half-rate row: %+v (unary row %+v)", side, r.Scenarios[0])
		}
	}
	// The topology table: the default cluster's unary and batch runs beside
	// a cluster of one group's.
	if len(r.Topology) != 2 || r.Topology[0].Default.Calls != r.Scenarios[0].Quorate.Calls || r.Topology[1].OneGroup.Batch != 10 {
		t.Fatalf("topology: %+v", r.Topology)
	}
	for _, row := range r.Topology {
		if one := row.OneGroup; one.Target != "quorate" || one.Calls == 0 || one.Denied != 0 || len(one.Errors) != 0 || row.Ratio <= 0 {
			t.Errorf("topology %s: one group %+v, ratio %v", row.Scenario, one, row.Ratio)
		}
	}
	if r.Machine.CPUs < 1 || r.Machine.Go == "" || !strings.Contains(r.Machine.Redis, "v=") || r.Machine.Command == "" ||
		!strings.Contains(r.Machine.Quorate, "data groups") ||
		gubernator != "" && !strings.Contains(r.Machine.Gubernator, "v2.13.0") || gubernator == "" && r.Machine.Gubernator != gubernatorNotInstalled {
		t.Errorf("machine description: %+v", r.Machine)
	}

	// Every Quorate run read its three nodes' CPU: the busiest node's
	// figure is at least the three's together.
	for _, s := range r.Scenarios {
		checkNodeCPU(t, s.Scenario, s.Quorate)
		if s.Quorate.LogEntries <= 0 || s.Quorate.LogEntries > s.Quorate.Decisions {
			t.Errorf("%s: %d log entries for %d decisions", s.Scenario, s.Quorate.LogEntries, s.Quorate.Decisions)
		}
	}
	// The hot-keys table: callers without the Go client under a policy
	// with a local block, beside the same without it.
	if len(r.Hot) != 2 {
		t.Fatalf("hot-keys table: %+v", r.Hot)
	}
	for _, h := range r.Hot {
		if h.Local.Decisions == 0 || h.Strict.Decisions == 0 || h.LocalRatio <= 0 || h.Local.Dist != "zipf" || h.Strict.Dist != "zipf" {
			t.Errorf("hot row %s: local %+v, strict %+v, ratio %v", h.Scenario, h.Local, h.Strict, h.LocalRatio)
		}
		// The bound: the local run on hotBoundKeys keys.
		if h.Bound.Decisions == 0 || h.Bound.Keys != hotBoundKeys || h.BoundRatio <= 0 || h.LocalOfBound <= 0 || h.CPURatio <= 0 {
			t.Errorf("hot row %s: all hot %+v, ratios %v %v %v", h.Scenario, h.Bound, h.BoundRatio, h.LocalOfBound, h.CPURatio)
		}
		checkNodeCPU(t, h.Scenario+", all hot", h.Bound)
		if gubernator != "" && (h.Gubernator == nil || h.Gubernator.Dist != "zipf" || h.GubernatorRatio <= 0) {
			t.Errorf("hot row %s: Gubernator %+v, ratio %v", h.Scenario, h.Gubernator, h.GubernatorRatio)
		}
		checkNodeCPU(t, h.Scenario, h.Local)
	}
	// The others' servers' CPU was read over their runs too: the Redis
	// server's, and each Gubernator node's.
	for _, s := range r.Scenarios {
		if c := s.Redis.NodeCPUSeconds; len(c) != 1 || c[0] <= 0 || s.Redis.DecisionsPerCPUSecond <= 0 {
			t.Errorf("%s: Redis's CPU %v, %v decisions per CPU-second", s.Scenario, c, s.Redis.DecisionsPerCPUSecond)
		}
		if g := s.Gubernator; g != nil && (len(g.NodeCPUSeconds) != gubernatorNodes || g.DecisionsPerCPUSecond <= 0) {
			t.Errorf("%s: Gubernator's CPU %v, %v decisions per CPU-second", s.Scenario, g.NodeCPUSeconds, g.DecisionsPerCPUSecond)
		}
	}
	// The cost model, from the default cluster's unary and batch runs.
	if r.Cost == nil || r.Cost.IdleCPUPerSec <= 0 || r.Cost.PerEntryUs == 0 || r.Cost.PerDecisionUs == 0 {
		t.Errorf("cost model: %+v", r.Cost)
	}
	for _, row := range r.Topology {
		checkNodeCPU(t, row.Scenario+", one group", row.OneGroup)
		if row.CPURatio != row.Default.DecisionsPerBusiestCPUSecond/row.OneGroup.DecisionsPerBusiestCPUSecond {
			t.Errorf("topology %s: per-CPU ratio %v", row.Scenario, row.CPURatio)
		}
	}
	// The floor, measured on the clusters' disk, and the one-client
	// Quorate run set against it.
	checkFloor(t, r.Machine.Floor)
	if one := r.Scenarios[5].Quorate; one.Floor == nil || *one.Floor != *r.Machine.Floor || one.P50OverFloor != one.LatencyMs["p50"]/one.Floor.FloorMs {
		t.Errorf("one-client run's floor: %+v, p50/floor %v", one.Floor, one.P50OverFloor)
	}
	if many := r.Scenarios[0].Quorate; many.Floor != nil {
		t.Errorf("a %d-client run carries the floor %+v", many.Workers, many.Floor)
	}

	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, want := range []string{"prose before", "prose after", benchSectionBegin, benchSectionEnd,
		"| scenario | Quorate decisions/s | Redis decisions/s | Quorate/Redis |", "AdmitBatch 10 vs EVALSHA pipelined 10 deep",
		"durable EVALSHA", "| CPU |", "| Redis |", "appendfsync always", "| floor of one decision (2 × fdatasync + round trip) | ",
		"Quorate's one-client p50", "| Quorate run | nodes' CPU-seconds |", "default decisions per busiest node's CPU-second",
		"| cost model | ", "µs of CPU per log entry (three replicas)", "| Redis: ", "Hot keys for callers without the Go client", "| local decisions/s | strict decisions/s |"} {
		if !strings.Contains(doc, want) {
			t.Errorf("%s lacks %q:\n%s", file, want, doc)
		}
	}
	if strings.Contains(doc, "old table") || strings.Count(doc, benchSectionBegin) != 1 {
		t.Errorf("%s: the old section was not replaced:\n%s", file, doc)
	}
}

func TestWriteBenchmarksFile(t *testing.T) {
	dir := t.TempDir()
	section := func(s string) string { return benchSectionBegin + "\n" + s + "\n" + benchSectionEnd + "\n" }
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// A new file gets the header.
	fresh := filepath.Join(dir, "new.md")
	if err := writeBenchmarksFile(fresh, section("one")); err != nil {
		t.Fatal(err)
	}
	if got := read(fresh); got != benchmarksHeader+section("one") {
		t.Errorf("new file:\n%s", got)
	}
	// Rewriting replaces the section only.
	if err := os.WriteFile(fresh, []byte("intro\n"+section("one")+"outro\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeBenchmarksFile(fresh, section("two")); err != nil {
		t.Fatal(err)
	}
	if got, want := read(fresh), "intro\n"+section("two")+"outro\n"; got != want {
		t.Errorf("rewritten file:\n%s\nwant:\n%s", got, want)
	}
	// A file without markers gets the section appended.
	plain := filepath.Join(dir, "plain.md")
	if err := os.WriteFile(plain, []byte("# Mine\n\nnotes\n\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeBenchmarksFile(plain, section("three")); err != nil {
		t.Fatal(err)
	}
	if got, want := read(plain), "# Mine\n\nnotes\n\n"+section("three"); got != want {
		t.Errorf("appended file:\n%q\nwant:\n%q", got, want)
	}
}

func TestCompareRows(t *testing.T) {
	rows := compareRows(loadOptions{workers: 64, batch: 100})
	if len(rows) != 7 {
		t.Fatalf("64 workers: %d rows, want 7", len(rows))
	}
	r := func(target string, w, n int) compareRun { return compareRun{target: target, workers: w, batch: n} }
	halfOf := func(run compareRun) compareRun { run.half = true; return run }
	spread := r(targetQuorate, 64, 1)
	spread.spread = true
	if runs, want := runsOf(rows, nil, targetQuorate), []compareRun{r(targetQuorate, 64, 1), spread, r(targetQuorate, 64, 100),
		halfOf(r(targetQuorate, 64, 1)), r(targetQuorate, 1, 1)}; !slices.Equal(runs, want) {
		t.Errorf("quorate runs %v, want unary, spread over the nodes, batch, half rate and one client", runs)
	}
	if runs := runsOf(rows, nil, "redis-durable"); len(runs) != 2 {
		t.Errorf("durable redis runs %v", runs)
	}
	want := []compareRun{r(targetGubernator, 64, 1), r(targetGubernator, 64, 100), halfOf(r(targetGubernator, 64, 1)), r(targetGubernator, 1, 1)}
	if runs := runsOf(rows, nil, targetGubernator); !slices.Equal(runs, want) {
		t.Errorf("gubernator runs %v, want unary, batch, half rate and one client", runs)
	}
	// The hot-keys runs come after the table's, the policy with a local
	// block first; Gubernator's on the same keys.
	hot := hotRows(loadOptions{workers: 64, batch: 100})
	local, strict := compareRun{target: targetQuorate, workers: 64, batch: 1, hot: true, local: true}, compareRun{target: targetQuorate, workers: 64, batch: 1, hot: true}
	bound := local
	bound.allHot = true
	if runs := runsOf(rows, hot, targetQuorate); len(runs) != 8 || runs[5] != local || runs[6] != strict || runs[7] != bound {
		t.Errorf("quorate runs with the hot keys %v, want the table's then local, strict, all hot", runs)
	}
	if runs := runsOf(rows, hot, targetGubernator); len(runs) != 5 || runs[4] != (compareRun{target: targetGubernator, workers: 64, batch: 1, hot: true}) {
		t.Errorf("gubernator runs with the hot keys %v", runs)
	}
	// The half-rate run of each target comes after the run it halves.
	for _, target := range []string{targetQuorate, targetRedis, targetGubernator} {
		runs := runsOf(rows, nil, target)
		peak, half := slices.Index(runs, r(target, 64, 1)), slices.Index(runs, halfOf(r(target, 64, 1)))
		if peak < 0 || half < peak {
			t.Errorf("%s runs %v: the half-rate run must follow the closed-loop unary run", target, runs)
		}
	}
	if runs := runsOf(rows, nil, targetOneGroup); !slices.Equal(runs, []compareRun{r(targetOneGroup, 64, 1), r(targetOneGroup, 64, 100)}) {
		t.Errorf("one-group runs %v, want unary and batch", runs)
	}
	// With one worker the one-client rows are the first ones.
	if rows := compareRows(loadOptions{workers: 1, batch: 10}); len(rows) != 5 {
		t.Errorf("1 worker: %d rows, want 5: %+v", len(rows), rows)
	}
}

func TestShellJoin(t *testing.T) {
	if got, want := shellJoin([]string{"bin/quorate-bench", "compare", "--write", "docs/BENCHMARKS.md", "a b", "it's"}),
		`bin/quorate-bench compare --write docs/BENCHMARKS.md 'a b' 'it'\''s'`; got != want {
		t.Errorf("shellJoin: %s, want %s", got, want)
	}
}

// fakeCompareRuns gives every run of rows a summary: decisions/s by target
// (Quorate 1000, Redis 20000, durable Redis 4000, Gubernator 5000) times
// the batch, latency by target.
func fakeCompareRuns(rows []compareRow, withGubernator bool) map[compareRun]BenchSummary {
	rate := map[string]float64{targetQuorate: 1000, targetRedis: 20000, "redis-durable": 4000, targetGubernator: 5000, targetOneGroup: 1250}
	results := map[compareRun]BenchSummary{}
	for _, target := range []string{targetQuorate, targetRedis, "redis-durable", targetGubernator, targetOneGroup} {
		if target == targetGubernator && !withGubernator {
			continue
		}
		for _, run := range runsOf(rows, nil, target) {
			ms := rate[targetRedis] / rate[target]
			s := BenchSummary{Target: strings.TrimSuffix(target, "-durable"), Workers: run.workers, Batch: run.batch,
				DecisionsPerSecond: rate[target] * float64(run.batch), LatencyMs: map[string]float64{"p50": ms, "p99": 2 * ms}}
			// Ten seconds; the busiest node spends 2 CPU-seconds (one
			// group: 4), the others 1 each.
			s.Decisions = int64(10 * s.DecisionsPerSecond)
			if target == targetQuorate || target == targetOneGroup {
				s.Route = map[bool]string{true: routeAny, false: routeLeader}[run.spread]
			}
			switch target {
			case targetQuorate:
				s.LogEntries = s.Decisions / 5 * 2 // 2.5 decisions an entry
				s.setCPU(make([]time.Duration, 3), []time.Duration{2 * time.Second, time.Second, time.Second})
			case targetOneGroup:
				s.setCPU(make([]time.Duration, 3), []time.Duration{time.Second, 4 * time.Second, time.Second})
			}
			results[run] = s
		}
	}
	return results
}

// TestCompareReportGubernator checks the table and the markdown section with
// Gubernator's columns: its rate, Quorate's ratio to it and its latency in
// the rows it has a run in, "—" in the durable Redis rows, and its version
// in the machine table.
func TestCompareReportGubernator(t *testing.T) {
	rows := compareRows(loadOptions{workers: 64, batch: 100})
	machine := machineInfo{Gubernator: "3 nodes: github.com/gubernator-io/gubernator/v2 v2.13.0 (built with go1.26.8)", Date: "today", Command: "quorate-bench compare"}
	r := compareResult(machine, rows, fakeCompareRuns(rows, true))
	if len(r.Scenarios) != 7 {
		t.Fatalf("%d scenarios", len(r.Scenarios))
	}
	for i, s := range r.Scenarios {
		durable := strings.Contains(s.Scenario, "durable")
		if durable != (s.Gubernator == nil) {
			t.Errorf("%s: Gubernator side %+v", s.Scenario, s.Gubernator)
			continue
		}
		if !durable && (s.GubernatorRatio != 0.2 || s.Gubernator.Workers != s.Quorate.Workers || s.Gubernator.Batch != s.Quorate.Batch) {
			t.Errorf("row %d %s: ratio %v, Gubernator %+v, Quorate %+v", i, s.Scenario, s.GubernatorRatio, s.Gubernator, s.Quorate)
		}
	}

	var text bytes.Buffer
	writeCompareText(&text, r)
	lines := strings.Split(text.String(), "\n")
	for _, want := range []string{"QUORATE/REDIS", "GUBERNATOR/S", "QUORATE/GUBERNATOR", "GUBERNATOR P50/P99 MS"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("header lacks %s: %s", want, lines[0])
		}
	}
	// Row 3: AdmitBatch 100 — Quorate 100000/s, Redis 2000000/s, Gubernator 500000/s.
	want := []string{"100000", "2000000", "0.05", "500000", "0.20", "20.00", "/", "40.00", "1.00", "/", "2.00", "4.00", "/", "8.00"}
	if f := strings.Fields(lines[3]); len(f) < len(want) || !slices.Equal(f[len(f)-len(want):], want) {
		t.Errorf("batch row: %q", lines[3])
	}
	if !strings.Contains(lines[5], "durable") || strings.Count(lines[5], "—") != 3 {
		t.Errorf("durable row should have no Gubernator figures: %q", lines[5])
	}
	if !strings.Contains(text.String(), "gubernator: 3 nodes: github.com/gubernator-io/gubernator/v2 v2.13.0") {
		t.Errorf("text lacks the Gubernator version:\n%s", text.String())
	}

	md := benchmarksSection(r)
	for _, want := range []string{
		"| scenario | Quorate decisions/s | Redis decisions/s | Quorate/Redis | Gubernator decisions/s | Quorate/Gubernator | Quorate p50 / p99 ms | Redis p50 / p99 ms | Gubernator p50 / p99 ms |",
		"| 64 clients: unary Admit vs EVALSHA vs GetRateLimits | 1000 | 20000 | 0.05 | 5000 | 0.20 | 20.00 / 40.00 | 1.00 / 2.00 | 4.00 / 8.00 |",
		"| 64 clients: unary Admit vs durable EVALSHA (appendfsync always) | 1000 | 4000 | 0.25 | — | — | 20.00 / 40.00 | 5.00 / 10.00 | — |",
		"| scenario | default decisions/s | one group decisions/s | default/one group | default p50 / p99 ms | one group p50 / p99 ms " +
			"| default decisions per busiest node's CPU-second | one group's | default/one group per CPU-second |",
		"| 64 clients: unary Admit | 1000 | 1250 | 0.80 | 20.00 / 40.00 | 16.00 / 32.00 | 5000 | 3125 | 1.60 |",
		"| 64 clients: AdmitBatch 100 | 100000 | 125000 | 0.80 | 20.00 / 40.00 | 16.00 / 32.00 | 500000 | 312500 | 1.60 |",
		"| Quorate run | nodes' CPU-seconds | decisions per CPU-second of the busiest node | of all three | log entries | decisions per entry | CPU µs per entry (all three nodes) |",
		"| 64 clients: unary Admit vs EVALSHA vs GetRateLimits | 2.00 / 1.00 / 1.00 | 5000 | 2500 | 4000 | 2.5 | 1000 |",
		"| 64 clients: AdmitBatch 100, one group | 1.00 / 4.00 / 1.00 | 312500 | 208333 | 0 | — | — |",
		"| 64 clients spread over every node, the nodes forwarding: unary Admit vs EVALSHA vs GetRateLimits | 2.00 / 1.00 / 1.00 | 5000 | 2500 | 4000 | 2.5 | 1000 |",
		"| Gubernator | 3 nodes: github.com/gubernator-io/gubernator/v2 v2.13.0 (built with go1.26.8) |",
		"**Gubernator**",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}

	if strings.Contains(md, "| 64 clients: unary Admit vs durable EVALSHA (appendfsync always) | 2.00 /") {
		t.Errorf("the CPU table lists the unary run twice:\n%s", md)
	}

	// A note names the Gubernator side when it failed or denied.
	g := *r.Scenarios[0].Gubernator
	g.Errors, g.Denied = map[string]int64{"unavailable": 3}, 2
	r.Scenarios[0].Gubernator = &g
	if notes := compareNotes(r); len(notes) != 1 || !strings.Contains(notes[0], "Gubernator side: failed calls unavailable=3") {
		t.Errorf("notes: %q", notes)
	}
	// So does one when a side stalled: a gap between answers of a second
	// or more, not less.
	q := r.Scenarios[5].Quorate
	gap, at := 999.0, 2.5
	q.LongestGapMs, q.LongestGapAtS = &gap, &at
	r.Scenarios[5].Quorate = q
	if notes := compareNotes(r); len(notes) != 1 {
		t.Errorf("a 999 ms gap got a note: %q", notes)
	}
	gap = 3200
	if notes := compareNotes(r); len(notes) != 2 || notes[1] != "note: 1 client: unary Admit vs EVALSHA vs GetRateLimits: Quorate side: "+
		"failed calls none; failed requests none; denied 0; no answer for 3200 ms from 2.5s into the run" {
		t.Errorf("a 3.2 s gap: notes %q", notes)
	}
}

// TestCompareReportWithoutGubernator: with no gubernator binary the columns
// say it is not installed and how to install it.
func TestCompareReportWithoutGubernator(t *testing.T) {
	rows := compareRows(loadOptions{workers: 8, batch: 10})
	r := compareResult(machineInfo{Gubernator: gubernatorNotInstalled}, rows, fakeCompareRuns(rows, false))
	for _, s := range r.Scenarios {
		if s.Gubernator != nil || s.GubernatorRatio != 0 {
			t.Errorf("%s: Gubernator side without Gubernator: %+v", s.Scenario, s.Gubernator)
		}
	}
	var text bytes.Buffer
	writeCompareText(&text, r)
	if got := strings.Count(text.String(), "not installed  "); got != 5 {
		t.Errorf("%d rows say not installed, want the 5 non-durable ones:\n%s", got, text.String())
	}
	md := benchmarksSection(r)
	for _, want := range []string{"| 8 clients: unary Admit vs EVALSHA vs GetRateLimits | 1000 | 20000 | 0.05 | not installed | — |",
		"| Gubernator | not installed: make bench-compare installs it |"} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"gubernatorRatio"`) || strings.Contains(string(b), `"gubernator":{`) {
		t.Errorf("JSON has Gubernator results without Gubernator: %s", b)
	}
}

// TestFindGubernator: --gubernator must exist; without it the Makefile's
// .cache/bin/gubernator is found, then PATH, else none.
func TestFindGubernator(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("PATH", filepath.Join(dir, "empty"))
	if _, err := findGubernator("/nonexistent/gubernator"); err == nil || !strings.Contains(err.Error(), "--gubernator") {
		t.Errorf("missing --gubernator: %v", err)
	}
	if bin, err := findGubernator(""); bin != "" || err != nil {
		t.Errorf("none installed: %q, %v", bin, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".cache", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, gubernatorDefaultBin)
	if err := os.WriteFile(want, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if bin, err := findGubernator(""); bin != want || err != nil {
		t.Errorf("installed by make: %q, %v; want %s", bin, err, want)
	}
}

// checkNodeCPU checks a Quorate run's CPU figures: one per node, positive,
// and the decisions per CPU-second of the busiest node and of all three.
func checkNodeCPU(t *testing.T, what string, s BenchSummary) {
	t.Helper()
	if len(s.NodeCPUSeconds) != compareNodes {
		t.Errorf("%s: nodes' CPU %v, want %d figures", what, s.NodeCPUSeconds, compareNodes)
		return
	}
	var busiest, all float64
	for _, c := range s.NodeCPUSeconds {
		if c <= 0 {
			t.Errorf("%s: a node spent no CPU: %v", what, s.NodeCPUSeconds)
		}
		busiest, all = max(busiest, c), all+c
	}
	if s.DecisionsPerBusiestCPUSecond != float64(s.Decisions)/busiest || s.DecisionsPerCPUSecond != float64(s.Decisions)/all ||
		s.DecisionsPerBusiestCPUSecond < s.DecisionsPerCPUSecond {
		t.Errorf("%s: %d decisions, CPU %v: per busiest CPU-second %v, per CPU-second %v", what, s.Decisions, s.NodeCPUSeconds,
			s.DecisionsPerBusiestCPUSecond, s.DecisionsPerCPUSecond)
	}
}
