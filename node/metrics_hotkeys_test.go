package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestMetricsHotKeysAndLeaderDecisions: 150 decisions of one policy, a
// third of them on one key and the rest on 100 keys once each, asked of
// one node. The leader counts them in quorate_leader_decisions_total (as in
// NodeState.policy_decisions, which the status page shows), the node asked
// in quorate_decisions_total; the hot key shows as one hot key of the
// policy with a third of its decisions, never by name.
func TestMetricsHotKeysAndLeaderDecisions(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c, tbPolicy("hot", 1_000_000, longPeriod, 1_000_000))
	policiesEverywhere(t, c, "hot")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var reqs []*quoratev1.AdmitRequest
	for i := range 150 {
		key := "the-hot-key"
		if i%3 != 0 {
			key = fmt.Sprintf("cold-%d", i)
		}
		reqs = append(reqs, &quoratev1.AdmitRequest{Policy: "hot", Key: key})
	}
	if _, err := c.Admission(1).AdmitBatch(ctx, connect.NewRequest(&quoratev1.AdmitBatchRequest{Requests: reqs})); err != nil {
		t.Fatal(err)
	}
	var leader, asked, hotKeys, share float64
	var status uint64
	for i := range c.Len() {
		mfs := scrape(t, c, i)
		for name, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetValue() == "the-hot-key" {
						t.Fatalf("%s names the key: %v", name, m)
					}
				}
			}
		}
		hotPolicy := map[string]string{"policy": "hot"}
		leader += series(mfs, "quorate_leader_decisions_total", map[string]string{"policy": "hot", "result": "allowed"}).GetCounter().GetValue()
		asked += series(mfs, "quorate_decisions_total", hotPolicy).GetCounter().GetValue()
		hotKeys += series(mfs, "quorate_hot_keys", hotPolicy).GetGauge().GetValue()
		share = max(share, series(mfs, "quorate_hot_key_share", hotPolicy).GetGauge().GetValue())
		st, err := c.Admin(i).NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range st.Msg.GetNode().GetPolicyDecisions() {
			if d.GetPolicy() == "hot" {
				status += d.GetDecisions()
			}
		}
	}
	if leader != 150 || asked != 150 || status != 150 {
		t.Errorf("decisions: %v counted by leaders, %v at the node asked, %d in NodeState; want 150 each", leader, asked, status)
	}
	if hotKeys != 1 || share < 0.33 || share > 0.34 {
		t.Errorf("quorate_hot_keys %v, quorate_hot_key_share %v; want 1 hot key with a third", hotKeys, share)
	}
}
