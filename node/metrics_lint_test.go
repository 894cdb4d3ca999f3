package node_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	gometrics "github.com/hashicorp/go-metrics"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// families is the names of the metric families of an exposition text.
func families(text string) map[string]bool {
	out := map[string]bool{}
	for line := range strings.Lines(text) {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, _, _ = strings.Cut(name, " ")
			out[name] = true
		}
	}
	return out
}

// TestMetricsFromTheStartPassPromtoolCheck: every node's /metrics passes
// promtool's check, before any decision and after decisions of every kind,
// and a family that shows after use showed before it (at zero): plans and
// snapshot sizes before any plan or snapshot, decisions, latencies and
// pacing of each policy before its first call, replica damage before any.
// A node without TLS exports no certificate expiry.
func TestMetricsFromTheStartPassPromtoolCheck(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	c.WaitReady(t)
	applyPolicies(t, c, tbPolicy("paced", 1, longPeriod, 1))
	applyConcurrency(t, c, "slots", 1, time.Minute)
	start := make([]map[string]bool, c.Len())
	for i := range c.Len() {
		// Policies reach every node's meta replica through the log.
		nodetest.Eventually(t, 10*time.Second, fmt.Sprintf("node %d's policy series", i), func() error {
			text := nodetest.CheckMetrics(t, c.HTTPClient(), c.APIURL(i)+"/metrics")
			if !strings.Contains(text, `quorate_decisions_total{policy="slots",result="denied"} 0`) {
				return fmt.Errorf("no zero quorate_decisions_total of policy slots")
			}
			start[i] = families(text)
			return nil
		})
		for _, f := range []string{"quorate_plans", "quorate_plan_steps", "quorate_group_snapshot_bytes", "quorate_group_entries_total",
			"quorate_decision_duration_seconds", "quorate_pacing_wait_seconds", "quorate_pacing_waiting", "quorate_leases_held", "quorate_replica_damaged"} {
			if !start[i][f] {
				t.Errorf("node %d: no %s before first use", i, f)
			}
		}
		if start[i]["quorate_tls_certificate_expiry_timestamp_seconds"] {
			t.Errorf("node %d: a certificate expiry without TLS", i)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range c.Len() {
		for range 3 { // allowed, then paced, then denied (past max_wait)
			_, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "paced", Key: fmt.Sprintf("k%d", i), MaxWait: durationpb.New(time.Millisecond)}))
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Admission(i).AdmitBatch(ctx, connect.NewRequest(&quoratev1.AdmitBatchRequest{Requests: []*quoratev1.AdmitRequest{{Policy: "paced", Key: "b"}}})); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Lease(i).AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{Policy: "slots", Key: fmt.Sprintf("k%d", i), MaxWait: durationpb.New(time.Second)})); err != nil {
			t.Fatal(err)
		}
	}
	for i := range c.Len() {
		after := families(nodetest.CheckMetrics(t, c.HTTPClient(), c.APIURL(i)+"/metrics"))
		for f := range after {
			if !start[i][f] {
				t.Errorf("node %d: %s shows after use only", i, f)
			}
		}
	}
}

// TestRaftMetricsSinkPassesPromtoolCheck: with a node's RaftMetricsSink as
// the process's go-metrics global (as quorate serve makes it), hashicorp/
// raft's figures show under Quorate's names, peers as labels, and the
// node's /metrics still passes promtool's check.
func TestRaftMetricsSinkPassesPromtoolCheck(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	c.WaitReady(t)
	cfg := gometrics.DefaultConfig("")
	cfg.EnableHostname = false
	cfg.EnableRuntimeMetrics = false
	if _, err := gometrics.NewGlobal(cfg, c.Node(0).RaftMetricsSink()); err != nil {
		t.Fatal(err)
	}
	defer gometrics.Shutdown()
	applyPolicies(t, c, tbPolicy("wide", 1000, time.Minute, 1000))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodetest.Eventually(t, 30*time.Second, "raft's replication figures with peer labels", func() error {
		if _, err := c.Admission(0).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "wide", Key: "k"})); err != nil {
			return err
		}
		mfs := scrape(t, c, 0)
		var peers []string
		for _, m := range mfs["quorate_raft_replicated_entries_total"].GetMetric() {
			peers = append(peers, labelsOf(m)["peer"])
		}
		slices.Sort(peers)
		if n := mfs["quorate_raft_commit_seconds"].GetMetric(); len(n) != 1 || n[0].GetHistogram().GetSampleCount() == 0 {
			return fmt.Errorf("quorate_raft_commit_seconds %v", n)
		}
		if !slices.Contains(peers, "node2") || !slices.Contains(peers, "node3") {
			return fmt.Errorf("quorate_raft_replicated_entries_total peers %v, want node2 and node3 among them", peers)
		}
		return nil
	})
	text := nodetest.CheckMetrics(t, c.HTTPClient(), c.APIURL(0)+"/metrics")
	for f := range families(text) {
		if strings.HasPrefix(f, "raft_") {
			t.Errorf("raft's own name %s in /metrics", f)
		}
	}
}
