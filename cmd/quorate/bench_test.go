package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func TestBenchClosedAndOpenLoop(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{{
		Name: "b", Algorithm: "token_bucket", Limit: 5, Burst: 5, Period: durationpb.New(time.Hour)}}})); err != nil {
		t.Fatal(err)
	}
	servers := c.APIURL(0) + "," + c.APIURL(1) + "," + c.APIURL(2)
	bench := func(args ...string) BenchSummary {
		t.Helper()
		out, stderr, err := runCLI(t, append([]string{"bench", "--server", servers, "--policy", "b", "--keys", "20", "-o", "json"}, args...)...)
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
		{[]string{"bench"}, "--policy"},
		{[]string{"bench", "--policy", "p", "--workers", "0"}, "--workers"},
		{[]string{"bench", "--policy", "p", "--rate", "-1"}, "--rate"},
		{[]string{"bench", "--policy", "p", "--dist", "pareto"}, "--dist"},
		{[]string{"bench", "--policy", "p", "--keys", "0"}, "--keys"},
		{[]string{"bench", "--policy", "p", "--server", "ftp://x"}, "--server"},
	} {
		_, _, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.flag)
		}
	}
}
