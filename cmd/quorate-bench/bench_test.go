package main

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/cmd/internal/clitest"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func TestBenchClosedAndOpenLoop(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{{
		Name: "b", Algorithm: "token_bucket", Limit: 5, Burst: proto.Int64(5), Period: durationpb.New(time.Hour)}}})); err != nil {
		t.Fatal(err)
	}
	servers := c.APIURL(0) + "," + c.APIURL(1) + "," + c.APIURL(2)
	bench := func(args ...string) BenchSummary {
		t.Helper()
		out, stderr, err := clitest.Run(t, run, append([]string{"--server", servers, "--policy", "b", "--keys", "20", "-o", "json"}, args...)...)
		if err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, stderr)
		}
		if !strings.Contains(stderr, "calls/s") {
			t.Errorf("bench %v printed no progress: %q", args, stderr)
		}
		var s BenchSummary
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, out)
		}
		if s.Calls == 0 || len(s.Errors) != 0 || s.Allowed+s.Denied != s.Calls || s.LatencyMs["p50"] <= 0 ||
			s.LatencyMs["p50"] > s.LatencyMs["p99"] || s.LatencyMs["p99"] > s.LatencyMs["max"] {
			t.Fatalf("bench %v: implausible summary %+v", args, s)
		}
		return s
	}
	closed := bench("--workers", "4", "--duration", "2s")
	if closed.Mode != "closed" || closed.Allowed > 20*5 || closed.Denied == 0 && closed.Calls > 20*5 {
		t.Fatalf("closed loop over 20 keys of 5 tokens: %+v", closed)
	}
	// Through the --server list in turn (the nodes forward), and with the
	// client coalescing: strict all the same (20 keys of 5 tokens in all).
	allowed := closed.Allowed
	for _, args := range [][]string{{"--route", "any"}, {"--coalesce"}} {
		s := bench(append([]string{"--workers", "4", "--duration", "1500ms"}, args...)...)
		if allowed += s.Allowed; allowed > 20*5 {
			t.Fatalf("bench %v: %d allowed in all over 20 keys of 5 tokens: %+v", args, allowed, s)
		}
	}
	// One client with the floor measured beside it, on a directory of
	// this machine's disk; a directory that does not exist is refused.
	one := bench("--workers", "1", "--duration", "1500ms", "--floor-dir", t.TempDir())
	checkFloor(t, one.Floor)
	if one.P50OverFloor != one.LatencyMs["p50"]/one.Floor.FloorMs {
		t.Errorf("one client: p50 %v ms over the floor %v ms = %v", one.LatencyMs["p50"], one.Floor.FloorMs, one.P50OverFloor)
	}
	if _, stderr, err := clitest.Run(t, run, "--server", servers, "--policy", "b", "--duration", "1s", "--floor-dir", filepath.Join(t.TempDir(), "absent")); err == nil ||
		!strings.Contains(err.Error(), "--floor-dir") {
		t.Errorf("--floor-dir of a missing directory: %v\n%s", err, stderr)
	}
	open := bench("--rate", "50", "--duration", "2s", "--dist", "zipf", "--request-ids")
	if open.Mode != "open" || open.Calls < 60 || open.Calls > 101 {
		t.Fatalf("open loop at 50/s for 2s made %d calls, want about 100: %+v", open.Calls, open)
	}
}

func TestBenchFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{}, "--policy"},
		{[]string{"--policy", "p", "--workers", "0"}, "--workers"},
		{[]string{"--policy", "p", "--rate", "-1"}, "--rate"},
		{[]string{"--policy", "p", "--dist", "pareto"}, "--dist"},
		{[]string{"--policy", "p", "--keys", "0"}, "--keys"},
		{[]string{"--policy", "p", "--server", "ftp://x"}, "--server"},
		{[]string{"--policy", "p", "--batch", "0"}, "--batch"},
		{[]string{"--policy", "p", "--batch", "1001"}, "--batch"},
		{[]string{"--policy", "p", "--target", "memcached"}, "--target"},
		{[]string{"--policy", "p", "--redis-addr", "127.0.0.1:6379"}, "--redis-addr"},
		{[]string{"--target", "redis", "--policy", "p"}, "--policy"},
		{[]string{"--target", "redis", "--server", "127.0.0.1:7070"}, "--server"},
		{[]string{"--target", "redis", "--request-ids"}, "--request-ids"},
		{[]string{"--policy", "p", "--route", "sideways"}, "--route"},
		{[]string{"--target", "redis", "--route", "any"}, "--route"},
		{[]string{"--target", "redis", "--coalesce"}, "--coalesce"},
		{[]string{"--target", "redis", "--redis-addr", "nowhere"}, "--redis-addr"},
		{[]string{"--target", "redis", "--redis-capacity", "0"}, "--redis-capacity"},
		{[]string{"--target", "redis", "--redis-refill", "-1"}, "--redis-refill"},
		{[]string{"--target", "redis", "--workers", "0"}, "--workers"},
		{[]string{"compare", "--workers", "0"}, "--workers"},
		{[]string{"compare", "--batch", "0"}, "--batch"},
		{[]string{"compare", "--dist", "pareto"}, "--dist"},
		{[]string{"compare", "--duration", "0s"}, "--duration"},
		{[]string{"compare", "--write", "/nonexistent-dir/BENCHMARKS.md"}, "--write"},
		{[]string{"compare", "--redis-server", "/nonexistent/redis-server"}, "--redis-server"},
	} {
		_, _, err := clitest.Run(t, run, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.flag)
		}
	}
}

// TestBenchBatch runs --batch against a cluster: every call is one AdmitBatch,
// decisions are counted per request, and requests that fail inside an
// answered batch are counted by code.
func TestBenchBatch(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{{
		Name: "b", Algorithm: "token_bucket", Limit: 5, Burst: proto.Int64(5), Period: durationpb.New(time.Hour)}}})); err != nil {
		t.Fatal(err)
	}
	servers := c.APIURL(0) + "," + c.APIURL(1) + "," + c.APIURL(2)
	bench := func(args ...string) (BenchSummary, map[string]any) {
		t.Helper()
		out, stderr, err := clitest.Run(t, run, append([]string{"--server", servers, "--keys", "20", "-o", "json"}, args...)...)
		if err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, stderr)
		}
		if strings.Contains(strings.Join(args, " "), "--duration 2s") && !strings.Contains(stderr, "decisions/s") {
			t.Errorf("bench %v printed no decisions/s progress: %q", args, stderr)
		}
		var s BenchSummary
		var raw map[string]any
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, out)
		}
		if err := json.Unmarshal([]byte(out), &raw); err != nil {
			t.Fatal(err)
		}
		return s, raw
	}

	s, raw := bench("--policy", "b", "--batch", "10", "--workers", "3", "--duration", "2s")
	for _, field := range []string{"target", "mode", "workers", "batch", "keys", "dist", "seconds", "calls", "perSecond",
		"decisions", "decisionsPerSecond", "allowed", "denied", "itemErrors", "latencyMs"} {
		if _, ok := raw[field]; !ok {
			t.Errorf("JSON summary has no %q: %v", field, raw)
		}
	}
	if s.Target != "quorate" || s.Batch != 10 || s.Calls == 0 || len(s.Errors) != 0 || len(s.ItemErrors) != 0 ||
		s.Decisions != 10*s.Calls || s.Allowed+s.Denied != s.Decisions || s.DecisionsPerSecond <= s.PerSecond ||
		s.LatencyMs["p50"] <= 0 || s.LatencyMs["p50"] > s.LatencyMs["max"] {
		t.Fatalf("batch of 10: implausible summary %+v", s)
	}
	if s.Allowed > 20*5 || s.Decisions > 20*5 && s.Denied == 0 {
		t.Fatalf("batch of 10 over 20 keys of 5 tokens: %d allowed, %d denied", s.Allowed, s.Denied)
	}

	// An unknown policy fails each request on its own (not_found) inside
	// answered batches: no decisions, every request counted.
	s, _ = bench("--policy", "no-such-policy", "--batch", "4", "--workers", "2", "--duration", "1s")
	if s.Calls == 0 || s.Decisions != 0 || len(s.Errors) != 0 || s.ItemErrors["not_found"] != 4*s.Calls {
		t.Fatalf("batch of 4 on an unknown policy: %+v, want %d not_found item errors", s, 4*s.Calls)
	}

	out, stderr, err := clitest.Run(t, run, "--server", servers, "--policy", "b", "--keys", "20", "--duration", "1s", "--workers", "2", "--batch", "5")
	if err != nil {
		t.Fatalf("bench --batch 5: %v\n%s", err, stderr)
	}
	for _, want := range []string{"5 requests per call", "calls/s", "decisions/s", "latency ms per call"} {
		if !strings.Contains(out, want) {
			t.Errorf("text summary lacks %q:\n%s", want, out)
		}
	}
}

// checkFloor checks a measured floor: positive medians, the floor made of
// two fdatasyncs and a round trip.
func checkFloor(t *testing.T, f *Floor) {
	t.Helper()
	if f == nil || f.Samples != floorSamples || f.FdatasyncMs <= 0 || f.RoundTripMs <= 0 || f.Dir == "" ||
		math.Abs(f.FloorMs-(2*f.FdatasyncMs+f.RoundTripMs)) > 1e-9 ||
		(runtime.GOOS == "linux") != (f.FdatasyncCPUUs > 0) || (runtime.GOOS == "linux") != (f.RoundTripCPUUs > 0) {
		t.Fatalf("floor = %+v", f)
	}
}
