package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// A forced removal of a node that still runs is refused, naming the node
// and what to do instead, and changes nothing: the node keeps its replicas
// and every node keeps serving. Once it is stopped, the forced removal
// goes through.
func TestForcedRemovalOfLiveNodeIsRefused(t *testing.T) {
	const groups = 2
	c := nodetest.NewClusterWith(t, nodetest.Options{Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = groups, 3
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	applyLongBucket(t, c, "p", 1_000_000)
	c.Eventually(t, 30*time.Second, "a shard map", func() error {
		resp, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return err
		}
		if len(resp.Msg.GetShardMap().GetGroups()) != groups {
			return fmt.Errorf("%d groups", len(resp.Msg.GetShardMap().GetGroups()))
		}
		return nil
	})
	c.Eventually(t, 30*time.Second, "every group on all three nodes", func() error {
		for g := uint32(1); g <= groups; g++ {
			if v := node.GroupVoters(c.Node(0), g); len(v) != 3 || !containsID(v, "node3") {
				return fmt.Errorf("group %d voters %v", g, v)
			}
		}
		return nil
	})
	// A node that never runs, to take node3's replicas.
	if _, err := c.Admin(0).AddNode(ctx, connect.NewRequest(&quoratev1.AddNodeRequest{Id: "node9", RaftAddr: "127.0.0.1:8", ApiAddr: "127.0.0.1:19"})); err != nil {
		t.Fatal(err)
	}
	for _, via := range []int{0, 1, 2} {
		_, err := c.Admin(via).RemoveNode(ctx, connect.NewRequest(&quoratev1.RemoveNodeRequest{Id: "node3", Force: true}))
		wantCode(t, fmt.Sprintf("forced removal of the live node3 through node %d", via), err, connect.CodeFailedPrecondition, "")
		if msg := err.Error(); !strings.Contains(msg, "node3") || !strings.Contains(msg, "drain") || !strings.Contains(msg, "stop it") {
			t.Fatalf("the refusal does not name the node and what to do: %v", err)
		}
	}
	for g := uint32(1); g <= groups; g++ {
		if v := node.GroupVoters(c.Node(0), g); len(v) != 3 || !containsID(v, "node3") {
			t.Fatalf("group %d voters %v after the refused removal", g, v)
		}
	}
	for k := range 20 {
		for i := range c.Len() {
			if r, err := admit(ctx, c, i, "p", fmt.Sprintf("k%d", k), 1); err != nil || !r.GetAllowed() {
				t.Fatalf("admit k%d through node %d: %v %v", k, i, r, err)
			}
		}
	}

	c.Kill(2)
	c.Eventually(t, 30*time.Second, "the forced removal of the stopped node3", func() error {
		_, err := c.Admin(0).RemoveNode(ctx, connect.NewRequest(&quoratev1.RemoveNodeRequest{Id: "node3", Force: true}))
		return err
	})
}

func containsID(ids []string, id string) bool {
	for _, v := range ids {
		if v == id {
			return true
		}
	}
	return false
}
