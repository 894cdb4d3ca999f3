package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// benchCompareChildEnv makes this test binary the quorate command: bench
// compare starts its cluster as `<this executable> dev ...`, which under
// `go test` is the test binary.
const benchCompareChildEnv = "QUORATE_TEST_BENCH_COMPARE_CHILD"

func init() {
	if os.Getenv(benchCompareChildEnv) == "1" {
		main() // exits 1 on an error
		os.Exit(0)
	}
}

// TestBenchCompare runs a short comparison against a real redis-server and
// an in-process cluster, and checks the table, the JSON and the file it
// writes. Speeds are not checked: a benchmark reports, it does not assert.
func TestBenchCompare(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH (apt-get install redis-server, or make bench-compare, installs it); skipping bench compare")
	}
	t.Setenv(benchCompareChildEnv, "1") // for the cluster process (see init)
	dir := t.TempDir()
	file := filepath.Join(dir, "BENCHMARKS.md")
	if err := os.WriteFile(file, []byte("# Benchmarks\n\nprose before\n\n"+benchSectionBegin+"\nold table\n"+benchSectionEnd+"\n\nprose after\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"bench", "compare", "--duration", "1s", "--workers", "4", "--keys", "100", "--batch", "10",
		"--dir", filepath.Join(dir, "data"), "--write", file, "-o", "json"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench compare: %v\n%s", err, stderr.String())
	}
	var r CompareResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("bench compare -o json: %v\n%s", err, stdout.String())
	}
	if len(r.Scenarios) != 5 {
		t.Fatalf("%d scenarios, want 5: %+v", len(r.Scenarios), r.Scenarios)
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
	}
	if r.Scenarios[1].Quorate.Batch != 10 || r.Scenarios[3].Quorate.Workers != 1 {
		t.Errorf("scenarios: %+v", r.Scenarios)
	}
	if r.Machine.CPUs < 1 || r.Machine.Go == "" || !strings.Contains(r.Machine.Redis, "v=") || r.Machine.Command == "" ||
		!strings.Contains(r.Machine.Quorate, "data groups") {
		t.Errorf("machine description: %+v", r.Machine)
	}

	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, want := range []string{"prose before", "prose after", benchSectionBegin, benchSectionEnd,
		"| scenario | Quorate decisions/s | Redis decisions/s | Quorate/Redis |", "AdmitBatch 10 vs EVALSHA pipelined 10 deep",
		"durable EVALSHA", "| CPU |", "| Redis |", "appendfsync always"} {
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
	if len(rows) != 5 {
		t.Fatalf("64 workers: %d rows, want 5", len(rows))
	}
	if runs := runsOf(rows, targetQuorate); len(runs) != 3 {
		t.Errorf("quorate runs %v, want unary, batch and one client", runs)
	}
	if runs := runsOf(rows, "redis-durable"); len(runs) != 2 {
		t.Errorf("durable redis runs %v", runs)
	}
	// With one worker the one-client rows are the first ones.
	if rows := compareRows(loadOptions{workers: 1, batch: 10}); len(rows) != 3 {
		t.Errorf("1 worker: %d rows, want 3: %+v", len(rows), rows)
	}
}

func TestShellJoin(t *testing.T) {
	if got, want := shellJoin([]string{"bin/quorate", "bench", "compare", "--write", "docs/BENCHMARKS.md", "a b", "it's"}),
		`bin/quorate bench compare --write docs/BENCHMARKS.md 'a b' 'it'\''s'`; got != want {
		t.Errorf("shellJoin: %s, want %s", got, want)
	}
}
