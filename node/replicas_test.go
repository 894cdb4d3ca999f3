package node_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// A data group's replica moves to a node that held none, under admit
// traffic: the new node catches up and votes, the old one leaves the
// group's configuration and closes its replica, and every unit spent before
// and during the move stays spent — down to the last one — with the old node
// stopped.
func TestMoveReplicaUnderTraffic(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 4, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
		node.SetRemoveGrace(cfg, 2*time.Second)
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var st *quoratev1.ClusterStatusResponse
	c.Eventually(t, 30*time.Second, "a shard map with both groups", func() error {
		resp, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return err
		}
		if len(resp.Msg.GetShardMap().GetGroups()) != 2 {
			return fmt.Errorf("%d groups", len(resp.Msg.GetShardMap().GetGroups()))
		}
		st = resp.Msg
		return nil
	})
	group := st.GetShardMap().GetGroups()[0]
	index := map[string]int{}
	for i := range c.Len() {
		index[c.Node(i).ID()] = i
	}
	outsider := -1
	for i := range c.Len() {
		if !slices.Contains(group.GetReplicas(), c.Node(i).ID()) {
			outsider = i
		}
	}
	from := group.GetReplicas()[0]
	to := c.Node(outsider).ID()
	const capacity = 400
	applyBucket(t, c, "p", capacity)
	key := ""
	for k := 0; key == ""; k++ {
		if g, _ := node.GroupOf(c.Node(0), fmt.Sprintf("k%d", k)); g == group.GetId() {
			key = fmt.Sprintf("k%d", k)
		}
	}

	// Traffic on the moving group's key through every node but the one leaving.
	var allowed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			via := []int{}
			for i := range c.Len() {
				if i != index[from] {
					via = append(via, i)
				}
			}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := admit(ctx, c, via[(w+i)%len(via)], "p", key, 0)
				if err == nil && r.GetAllowed() {
					allowed.Add(1)
				}
			}
		})
	}
	c.Eventually(t, 10*time.Second, "traffic flowing", func() error {
		if allowed.Load() < 20 {
			return fmt.Errorf("%d admitted", allowed.Load())
		}
		return nil
	})

	resp, err := c.Admin(outsider).MoveReplica(ctx, connect.NewRequest(&quoratev1.MoveReplicaRequest{Group: group.GetId(), From: from, To: to}))
	if err != nil {
		t.Fatalf("MoveReplica: %v", err)
	}
	if resp.Msg.GetMapEpoch() <= st.GetShardMap().GetEpoch() {
		t.Fatalf("map epoch %d after the move, was %d", resp.Msg.GetMapEpoch(), st.GetShardMap().GetEpoch())
	}
	want := slices.Clone(group.GetReplicas())
	want[0] = to
	slices.Sort(want)
	c.Eventually(t, 60*time.Second, "the group's voters are the new replicas, everywhere", func() error {
		for _, id := range want {
			if got := node.GroupVoters(c.Node(index[id]), group.GetId()); !slices.Equal(got, want) {
				return fmt.Errorf("%s sees voters %v, want %v", id, got, want)
			}
		}
		if got := node.GroupVoters(c.Node(index[from]), group.GetId()); got != nil {
			return fmt.Errorf("%s still hosts the group (voters %v)", from, got)
		}
		return nil
	})
	close(stop)
	wg.Wait()

	// The old node goes away; the budget is exactly what was not spent.
	c.Stop(index[from])
	spent := allowed.Load()
	for i := spent; i < capacity; i++ {
		if r, err := admit(ctx, c, outsider, "p", key, 0); err != nil || !r.GetAllowed() {
			t.Fatalf("admit %d of the %d units left after the move: %v %v", i-spent+1, capacity-spent, r, err)
		}
	}
	if r, err := admit(ctx, c, outsider, "p", key, 0); err != nil || r.GetAllowed() {
		t.Fatalf("one more than the budget: %v %v", r, err)
	}

	// Bad moves name their field.
	for _, tc := range []struct {
		req   *quoratev1.MoveReplicaRequest
		field string
	}{
		{&quoratev1.MoveReplicaRequest{Group: 99, From: to, To: from}, "group"},
		{&quoratev1.MoveReplicaRequest{Group: group.GetId(), From: from, To: to}, ""}, // done already: answered
		{&quoratev1.MoveReplicaRequest{Group: group.GetId(), From: "nobody", To: from}, "from"},
		{&quoratev1.MoveReplicaRequest{Group: group.GetId(), From: to, To: "ghost"}, "to"},
	} {
		_, err := c.Admin(outsider).MoveReplica(ctx, connect.NewRequest(tc.req))
		if tc.field == "" {
			if err != nil {
				t.Errorf("repeating a finished move: %v", err)
			}
			continue
		}
		wantCode(t, fmt.Sprintf("move %v", tc.req), err, connect.CodeInvalidArgument, tc.field)
	}
}
