package node_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// scrape reads node i's /metrics over HTTP, as Prometheus does.
func scrape(t *testing.T, c *nodetest.Cluster, i int) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := c.HTTPClient().Get(c.APIURL(i) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics of node %d: %s: %s", i, resp.Status, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing node %d's metrics: %v", i, err)
	}
	return mfs
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// decisionCounts sums quorate_decisions_total over every node, by
// "policy/result", leaving out the series still at zero.
func decisionCounts(t *testing.T, c *nodetest.Cluster) map[string]float64 {
	out := map[string]float64{}
	for i := range c.Len() {
		for _, m := range scrape(t, c, i)["quorate_decisions_total"].GetMetric() {
			if m.GetCounter().GetValue() == 0 { // a policy's series before its first decision
				continue
			}
			l := labelsOf(m)
			out[l["policy"]+"/"+l["result"]] += m.GetCounter().GetValue()
		}
	}
	return out
}

// TestMetricsAfterKnownWorkload: decisions asked of every node of a 3-node
// cluster show in the nodes' /metrics, each once (at the node asked, not
// again at the leader it was forwarded to): allowed, denied, shadow-denied,
// a repeated request ID as duplicate, an unknown policy under its code.
func TestMetricsAfterKnownWorkload(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	shadow := tbPolicy("shadowed", 2, longPeriod, 2)
	shadow.Shadow = true
	applyPolicies(t, c, tbPolicy("metered", 5, longPeriod, 5), shadow)
	policiesEverywhere(t, c, "metered", "shadowed")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ask := func(i int, req *quoratev1.AdmitRequest) *quoratev1.AdmitResponse {
		t.Helper()
		resp, err := c.Admission(i).Admit(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg
	}
	for j := range 8 { // 5 allowed, 3 denied
		ask(j%3, &quoratev1.AdmitRequest{Policy: "metered", Key: "k"})
	}
	for j := range 3 { // 2 allowed, 1 shadow-denied
		ask(j%3, &quoratev1.AdmitRequest{Policy: "shadowed", Key: "k"})
	}
	first := ask(1, &quoratev1.AdmitRequest{Policy: "metered", Key: "other", Caller: "svc", RequestId: "r-1"})
	again := ask(2, &quoratev1.AdmitRequest{Policy: "metered", Key: "other", Caller: "svc", RequestId: "r-1"})
	if !first.GetAllowed() || !again.GetDuplicate() {
		t.Fatalf("first %v, repeat %v: want allowed, then a duplicate", first, again)
	}
	if _, err := c.Admission(0).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "missing", Key: "k"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("unknown policy: %v, want not_found", err)
	}
	want := map[string]float64{
		"metered/allowed": 6, "metered/denied": 3, "metered/duplicate": 1,
		"shadowed/allowed": 2, "shadowed/shadow_denied": 1,
		"(unknown)/not_found": 1,
	}
	got := decisionCounts(t, c)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("quorate_decisions_total %s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("decision series %v, want only %v", got, want)
	}

	var latency uint64
	for i := range c.Len() {
		mfs := scrape(t, c, i)
		for _, m := range mfs["quorate_decision_duration_seconds"].GetMetric() {
			if labelsOf(m)["rpc"] == "Admit" {
				latency += m.GetHistogram().GetSampleCount()
			}
		}
		info := map[string]bool{}
		for _, m := range mfs["quorate_policy_info"].GetMetric() {
			l := labelsOf(m)
			info[l["policy"]+" "+l["algorithm"]] = l["version"] != ""
		}
		if !info["metered token_bucket"] || !info["shadowed token_bucket"] {
			t.Errorf("node %d: quorate_policy_info %v, want both policies with versions", i, info)
		}
		if len(mfs["quorate_raft_state"].GetMetric()) == 0 || len(mfs["quorate_group_keys"].GetMetric()) == 0 {
			t.Errorf("node %d: no per-group metrics", i)
		}
	}
	if latency != 14 {
		t.Errorf("Admit latency observations %d, want 14 (one per call)", latency)
	}
	entries := 0.0
	for i := range c.Len() {
		for _, m := range scrape(t, c, i)["quorate_group_entries_total"].GetMetric() {
			entries += m.GetCounter().GetValue()
		}
	}
	if entries == 0 {
		t.Error("no entries counted by any leader")
	}
}

// seriesShape describes node i's series for the bounded-label test: the
// number of series of each family without a group label (for
// quorate_decisions_total, of each policy: its results, a bounded set of
// outcomes and error codes, may grow by one when load makes a node answer
// a retried request as a duplicate), and the group label values seen. It
// fails the test if any label value names a key or a caller of the workload.
func seriesShape(t *testing.T, c *nodetest.Cluster, i int) (series map[string]int, groups map[string]bool) {
	t.Helper()
	series, groups = map[string]int{}, map[string]bool{}
	for _, mf := range scrape(t, c, i) {
		name := mf.GetName()
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		grouped := false
		policies := map[string]bool{}
		for _, m := range mf.GetMetric() {
			l := labelsOf(m)
			for k, v := range l {
				if strings.Contains(v, "bounded-") {
					t.Fatalf("%s has label %s=%q: a key or caller", name, k, v)
				}
				if k == "group" {
					grouped = true
					groups[v] = true
				}
			}
			policies[l["policy"]] = true
		}
		switch {
		case grouped:
		case name == "quorate_decisions_total":
			series[name] = len(policies)
		default:
			series[name] = len(mf.GetMetric())
		}
	}
	return series, groups
}

// TestMetricLabelsStayBounded: after decisions on 100,000 distinct keys and
// callers the nodes have as many series as after 3,000 (1,000 asked of
// each node, so that each has answered AdmitBatch once): labels name
// policies, results and groups, never keys or callers.
func TestMetricLabelsStayBounded(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c, tbPolicy("wide", 1_000_000, longPeriod, 1_000_000))
	policiesEverywhere(t, c, "wide")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	batch := func(b int) {
		reqs := make([]*quoratev1.AdmitRequest, 1000)
		for j := range reqs {
			id := b*1000 + j
			reqs[j] = &quoratev1.AdmitRequest{Policy: "wide", Key: fmt.Sprintf("bounded-key-%d", id),
				Caller: fmt.Sprintf("bounded-caller-%d", id), RequestId: fmt.Sprintf("bounded-req-%d", id)}
		}
		resp, err := c.Admission(b%3).AdmitBatch(ctx, connect.NewRequest(&quoratev1.AdmitBatchRequest{Requests: reqs}))
		if err != nil {
			t.Fatalf("batch %d: %v", b, err)
		}
		for j, r := range resp.Msg.GetResults() {
			if !r.GetResponse().GetAllowed() {
				t.Fatalf("batch %d, request %d: %v", b, j, r)
			}
		}
	}
	for b := range 3 { // one batch asked of each node
		batch(b)
	}
	var before [3]map[string]int
	for i := range c.Len() {
		before[i], _ = seriesShape(t, c, i)
	}
	for b := 3; b < 100; b++ {
		batch(b)
	}
	// A node that retries a request of an entry whose outcome it could not
	// know (a leader change under load) answers from the request's record:
	// duplicate, as its answer says.
	if got := decisionCounts(t, c); got["wide/allowed"]+got["wide/duplicate"] != 100_000 || len(got) > 2 {
		t.Fatalf("decisions %v, want 100000 wide/allowed or wide/duplicate", got)
	}
	for i := range c.Len() {
		after, groups := seriesShape(t, c, i)
		if !maps.Equal(after, before[i]) {
			t.Errorf("node %d: series after 100,000 keys %v, after 3,000 %v", i, after, before[i])
		}
		st, err := c.Admin(i).NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if len(groups) > len(st.Msg.GetNode().GetGroups()) {
			t.Errorf("node %d: group labels %v, but it hosts %d groups", i, groups, len(st.Msg.GetNode().GetGroups()))
		}
	}
}

// policiesEverywhere waits until every node's meta replica has the named
// policies: a node labels a decision with its policy only then (before
// that, as unknown), a few milliseconds after ApplyPolicies returns.
func policiesEverywhere(t *testing.T, c *nodetest.Cluster, names ...string) {
	t.Helper()
	for i := range c.Len() {
		nodetest.Eventually(t, 10*time.Second, fmt.Sprintf("node %d has policies %v", i, names), func() error {
			resp, err := c.Admin(i).ListPolicies(context.Background(), connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
			if err != nil {
				return err
			}
			have := map[string]bool{}
			for _, p := range resp.Msg.GetPolicies() {
				have[p.GetName()] = true
			}
			for _, n := range names {
				if !have[n] {
					return fmt.Errorf("no policy %q yet", n)
				}
			}
			return nil
		})
	}
}
