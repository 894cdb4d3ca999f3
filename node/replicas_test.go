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

// applyLongBucket applies a token bucket of capacity that refills by less
// than one unit within a test (capacity per 366 days).
func applyLongBucket(t *testing.T, c *nodetest.Cluster, name string, capacity int64) {
	t.Helper()
	c.Eventually(t, 10*time.Second, "policy applied", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{
			tbPolicy(name, capacity, 366*24*time.Hour, capacity)}}))
		return err
	})
}

// wantRemaining peeks key through node i (retrying while its group elects)
// until it answers, and fails unless exactly want units are left.
func wantRemaining(t *testing.T, c *nodetest.Cluster, i int, policy, key string, want int64) {
	t.Helper()
	var got int64
	c.Eventually(t, 20*time.Second, "peek "+key, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := c.Admission(i).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: policy, Key: key}))
		if err != nil {
			return err
		}
		got = resp.Msg.GetRemaining()
		return nil
	})
	if got != want {
		t.Fatalf("%s: %d units left, want exactly %d (capacity less what was acknowledged)", key, got, want)
	}
}

// A data group's replica moves to a node that held none, under admit
// traffic: the new node catches up and votes, the old one leaves the
// group's configuration and closes its replica, and every unit spent before
// and during the move stays spent — down to the last one — with the old node
// stopped.
func TestMoveReplicaUnderTraffic(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 4, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
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
	const capacity = 100_000
	applyLongBucket(t, c, "p", capacity)
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
	wantRemaining(t, c, outsider, "p", key, capacity-allowed.Load())

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

// Draining a node under traffic leaves every data group with three voters
// on the other nodes and the drained node with no replica; stopped
// afterwards, it takes nothing with it: each key's budget is spent exactly.
func TestDrainNodeUnderTraffic(t *testing.T) {
	const groups = 4
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 4, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = groups, 4
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const capacity = 100_000
	applyLongBucket(t, c, "p", capacity)
	c.Eventually(t, 30*time.Second, "a shard map", func() error {
		if _, ok := node.GroupOf(c.Node(0), "k"); !ok {
			return fmt.Errorf("no shard map yet")
		}
		return nil
	})
	keys := map[uint32]string{} // one per group
	for k := 0; len(keys) < groups; k++ {
		g, _ := node.GroupOf(c.Node(0), fmt.Sprintf("k%d", k))
		if _, seen := keys[g]; !seen {
			keys[g] = fmt.Sprintf("k%d", k)
		}
	}
	drained := 3
	id := c.Node(drained).ID()

	spent := map[string]*atomic.Int64{}
	for _, k := range keys {
		spent[k] = new(atomic.Int64)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[uint32(1+(w+i)%groups)]
				if r, err := admit(ctx, c, i%3, "p", key, 0); err == nil && r.GetAllowed() {
					spent[key].Add(1)
				}
			}
		})
	}
	resp, err := c.Admin(0).DrainNode(ctx, connect.NewRequest(&quoratev1.DrainNodeRequest{Id: id}))
	if err != nil {
		t.Fatalf("DrainNode: %v", err)
	}
	if resp.Msg.GetMoves() == 0 {
		t.Fatal("draining a node that holds replicas moved none")
	}
	c.Eventually(t, 60*time.Second, "every group on the other nodes, the drained node empty", func() error {
		for g := uint32(1); g <= groups; g++ {
			if v := node.GroupVoters(c.Node(drained), g); v != nil {
				return fmt.Errorf("%s still hosts group %d (voters %v)", id, g, v)
			}
			for i := range 3 {
				v := node.GroupVoters(c.Node(i), g)
				if len(v) != 3 || slices.Contains(v, id) {
					return fmt.Errorf("node %d sees group %d voters %v", i, g, v)
				}
			}
		}
		return nil
	})
	close(stop)
	wg.Wait()
	c.Stop(drained)
	for _, key := range keys {
		if spent[key].Load() == 0 {
			t.Errorf("%s: no traffic got through during the drain", key)
		}
		wantRemaining(t, c, 0, "p", key, capacity-spent[key].Load())
	}
	// Again: nothing left to move.
	again, err := c.Admin(1).DrainNode(ctx, connect.NewRequest(&quoratev1.DrainNodeRequest{Id: id}))
	if err != nil || again.Msg.GetMoves() != 0 {
		t.Fatalf("draining again: %v %v, want 0 moves", again, err)
	}
	_, err = c.Admin(1).DrainNode(ctx, connect.NewRequest(&quoratev1.DrainNodeRequest{Id: "ghost"}))
	wantCode(t, "drain an unknown node", err, connect.CodeInvalidArgument, "id")
}

// A dead node is removed with force: its data groups get replicas from the
// survivors, a meta non-voter takes its vote, and it leaves the registry;
// the budget spent before it died stays spent. Without force a node holding
// replicas is not removed.
func TestRemoveDeadNode(t *testing.T) {
	const groups = 2
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 4, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = groups, 3
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const capacity = 100_000
	applyLongBucket(t, c, "p", capacity)
	var st *quoratev1.ClusterStatusResponse
	c.Eventually(t, 30*time.Second, "a shard map and four members", func() error {
		resp, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return err
		}
		if len(resp.Msg.GetShardMap().GetGroups()) != groups || len(resp.Msg.GetMembers()) != 4 {
			return fmt.Errorf("%d groups, %d members", len(resp.Msg.GetShardMap().GetGroups()), len(resp.Msg.GetMembers()))
		}
		st = resp.Msg
		return nil
	})
	// The dead node: a meta voter holding replicas.
	dead := -1
	for i := range c.Len() {
		for _, m := range st.GetMembers() {
			if m.GetId() == c.Node(i).ID() && m.GetSuffrage() == "voter" &&
				slices.Contains(st.GetShardMap().GetGroups()[0].GetReplicas(), m.GetId()) && dead < 0 {
				dead = i
			}
		}
	}
	if dead < 0 {
		t.Fatal("no voter holding replicas")
	}
	deadID := c.Node(dead).ID()
	keys := map[uint32]string{}
	for k := 0; len(keys) < groups; k++ {
		g, _ := node.GroupOf(c.Node(0), fmt.Sprintf("k%d", k))
		if _, seen := keys[g]; !seen {
			keys[g] = fmt.Sprintf("k%d", k)
		}
	}
	spent := map[string]int64{}
	for _, key := range keys {
		for range 5 {
			if r, err := admit(ctx, c, 0, "p", key, 0); err != nil || !r.GetAllowed() {
				t.Fatalf("admit %s: %v %v", key, r, err)
			}
			spent[key]++
		}
	}
	c.Kill(dead)
	alive := (dead + 1) % c.Len()

	_, err := c.Admin(alive).RemoveNode(ctx, connect.NewRequest(&quoratev1.RemoveNodeRequest{Id: deadID}))
	wantCode(t, "remove a node holding replicas without force", err, connect.CodeFailedPrecondition, "")
	c.Eventually(t, 30*time.Second, "the forced removal answered", func() error {
		_, err := c.Admin(alive).RemoveNode(ctx, connect.NewRequest(&quoratev1.RemoveNodeRequest{Id: deadID, Force: true}))
		return err
	})
	c.Eventually(t, 60*time.Second, "three members, three meta voters, every group on three live voters", func() error {
		resp, err := c.Admin(alive).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return err
		}
		voters := 0
		for _, m := range resp.Msg.GetMembers() {
			if m.GetId() == deadID {
				return fmt.Errorf("%s still a member", deadID)
			}
			if m.GetSuffrage() == "voter" {
				voters++
			}
		}
		if len(resp.Msg.GetMembers()) != 3 || voters != 3 {
			return fmt.Errorf("%d members, %d voters", len(resp.Msg.GetMembers()), voters)
		}
		for g := uint32(1); g <= groups; g++ {
			for i := range c.Len() {
				if i == dead {
					continue
				}
				if v := node.GroupVoters(c.Node(i), g); len(v) != 3 || slices.Contains(v, deadID) {
					return fmt.Errorf("node %d sees group %d voters %v", i, g, v)
				}
			}
		}
		return nil
	})
	for _, key := range keys {
		wantRemaining(t, c, alive, "p", key, capacity-spent[key])
	}
}
