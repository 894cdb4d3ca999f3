package node_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// Two nodes join a 3-node cluster whose 4 data groups sit on the first
// three: a dry run lists the changes and changes nothing; Rebalance then
// spreads replicas over all five (counts within one), each group's
// configuration follows, and each group ends led by its preferred leader
// (leadership handed over, not taken by elections) — under admit traffic,
// with every acknowledged unit still spent.
func TestRebalanceSpreadsReplicasAndLeaders(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 5, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 4, 3
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitGroups(t, c, 4)
	const capacity = 100_000
	applyLongBucket(t, c, "p", capacity)
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	tr := startTraffic(ctx, c, "p", keys, 4)
	// Wherever the map was placed (the last nodes may have registered in
	// time), the last two nodes end up holding nothing.
	// Draining cordons them: uncordoned, they take replicas again.
	for _, i := range []int{3, 4} {
		if _, err := c.Admin(0).DrainNode(ctx, connect.NewRequest(&quoratev1.DrainNodeRequest{Id: c.Node(i).ID()})); err != nil {
			t.Fatalf("draining %s: %v", c.Node(i).ID(), err)
		}
	}
	// With them cordoned, a rebalance may still even out leadership among
	// the first three (the drains chose where their replicas went, not who
	// leads), but places nothing on the cordoned two.
	dry, err := c.Admin(0).Rebalance(ctx, connect.NewRequest(&quoratev1.RebalanceRequest{DryRun: true}))
	if err != nil {
		t.Fatalf("a dry run with the two empty nodes cordoned: %v", err)
	}
	for _, ch := range dry.Msg.GetChanges() {
		for _, i := range []int{3, 4} {
			if strings.HasSuffix(ch, "→ "+c.Node(i).ID()) {
				t.Fatalf("a dry run with %s cordoned proposes %q", c.Node(i).ID(), ch)
			}
		}
	}
	for _, i := range []int{3, 4} {
		if _, err := c.Admin(1).UncordonNode(ctx, connect.NewRequest(&quoratev1.UncordonNodeRequest{Id: c.Node(i).ID()})); err != nil {
			t.Fatalf("uncordoning %s: %v", c.Node(i).ID(), err)
		}
	}

	dry, err = c.Admin(0).Rebalance(ctx, connect.NewRequest(&quoratev1.RebalanceRequest{DryRun: true}))
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Msg.GetChanges()) == 0 {
		t.Fatal("a dry run on 4 groups over 3 of 5 nodes proposes no change")
	}
	resp, err := c.Admin(3).Rebalance(ctx, connect.NewRequest(&quoratev1.RebalanceRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rebalance at epoch %d: %v", resp.Msg.GetMapEpoch(), resp.Msg.GetChanges())
	if resp.Msg.GetMapEpoch() != dry.Msg.GetMapEpoch()+1 {
		t.Fatalf("rebalanced at epoch %d, the dry run answered %d: the dry run wrote the map (or something else did)",
			resp.Msg.GetMapEpoch(), dry.Msg.GetMapEpoch())
	}
	if !slices.Equal(resp.Msg.GetChanges(), dry.Msg.GetChanges()) {
		t.Fatalf("rebalance made %v, the dry run said %v", resp.Msg.GetChanges(), dry.Msg.GetChanges())
	}
	c.Eventually(t, 90*time.Second, "every group configured and led as the map says", func() error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		st, err := c.Admin(0).ClusterStatus(cctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return err
		}
		count := map[string]int{}
		for _, g := range st.Msg.GetShardMap().GetGroups() {
			want := slices.Sorted(slices.Values(g.GetReplicas()))
			for _, r := range g.GetReplicas() {
				count[r]++
			}
			for i := range c.Len() {
				if !slices.Contains(want, c.Node(i).ID()) {
					continue
				}
				if got := slices.Sorted(slices.Values(node.GroupVoters(c.Node(i), g.GetId()))); !slices.Equal(got, want) {
					return fmt.Errorf("group %d: %s sees voters %v, want %v", g.GetId(), c.Node(i).ID(), got, want)
				}
			}
			leader := ""
			for _, m := range st.Msg.GetMembers() {
				for _, gs := range m.GetStatus().GetGroups() {
					if gs.GetId() == g.GetId() && gs.GetRole() == "leader" {
						leader = m.GetId()
					}
				}
			}
			if leader != g.GetReplicas()[0] {
				return fmt.Errorf("group %d led by %q, preferred %q", g.GetId(), leader, g.GetReplicas()[0])
			}
		}
		lo, hi := -1, 0
		for i := range c.Len() {
			n := count[c.Node(i).ID()]
			if lo < 0 || n < lo {
				lo = n
			}
			hi = max(hi, n)
		}
		if hi-lo > 1 {
			return fmt.Errorf("replica counts %v", count)
		}
		return nil
	})
	tr.finish()
	if tr.errs.Load() > 0 {
		t.Errorf("%d admits failed", tr.errs.Load())
	}
	for _, k := range keys {
		wantRemaining(t, c, 4, "p", k, capacity-tr.allowed[k].Load())
	}
}

// Bad plan requests name their field; one plan runs at a time.
func TestPlanBadRequests(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitGroups(t, c, 2)
	for _, tc := range []struct {
		req   *quoratev1.MoveSlotsRequest
		field string
	}{
		{&quoratev1.MoveSlotsRequest{From: 1, To: 9, Count: 1}, "to"},
		{&quoratev1.MoveSlotsRequest{From: 1, To: 1, Count: 1}, "to"},
		{&quoratev1.MoveSlotsRequest{From: 1, To: 2, Count: 5000}, "count"},
		{&quoratev1.MoveSlotsRequest{From: 1, To: 2, Count: 3, Start: 1, End: 2}, "count"},
		{&quoratev1.MoveSlotsRequest{From: 1, To: 2, Start: 2040, End: 2050}, "start"},
		{&quoratev1.MoveSlotsRequest{From: 1, To: 2, Start: 5, End: 5}, "end"},
	} {
		_, err := c.Admin(0).MoveSlots(ctx, connect.NewRequest(tc.req))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("MoveSlots(%v): %v, want invalid_argument", tc.req, err)
		}
		var ce *connect.Error
		if errors.As(err, &ce) {
			found := false
			for _, d := range ce.Details() {
				if v, derr := d.Value(); derr == nil {
					if fv, ok := v.(*quoratev1.FieldViolation); ok && fv.GetField() == tc.field {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("MoveSlots(%v): %v does not name field %q", tc.req, err, tc.field)
			}
		}
	}
	// One plan at a time.
	p := startPlan(t, c, func(ctx context.Context) (*connect.Response[quoratev1.PlanResponse], error) {
		return c.Admin(0).MoveSlots(ctx, connect.NewRequest(&quoratev1.MoveSlotsRequest{From: 1, To: 2, Count: 16}))
	})
	_, err := c.Admin(1).MoveSlots(ctx, connect.NewRequest(&quoratev1.MoveSlotsRequest{From: 1, To: 2, Count: 16}))
	if err != nil && connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("a second plan while one runs: %v, want failed_precondition (or success if the first had finished)", err)
	}
	waitPlan(t, c, 0, p.GetId(), "done", 30*time.Second)
}

// A node pre-registered before it runs (AddNode) can be given replicas: a
// group added on two live nodes and it forms on those two, takes slots with
// their state, and once the never-started node is removed with force the
// group gets a third live replica. Pre-registering is idempotent; other
// addresses for a registered ID are refused, naming the field.
func TestPreRegisteredNodeTakesReplicas(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 4, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 4
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitGroups(t, c, 2)
	const capacity = 100_000
	applyLongBucket(t, c, "p", capacity)
	add := &quoratev1.AddNodeRequest{Id: "node9", RaftAddr: "127.0.0.1:9", ApiAddr: "127.0.0.1:19"}
	for i := range 2 {
		if _, err := c.Admin(i).AddNode(ctx, connect.NewRequest(add)); err != nil {
			t.Fatalf("AddNode (call %d): %v", i+1, err)
		}
	}
	_, err := c.Admin(2).AddNode(ctx, connect.NewRequest(&quoratev1.AddNodeRequest{Id: "node9", RaftAddr: "127.0.0.1:8", ApiAddr: "127.0.0.1:19"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("AddNode with other addresses: %v, want invalid_argument", err)
	}
	p := startPlan(t, c, func(ctx context.Context) (*connect.Response[quoratev1.PlanResponse], error) {
		return c.Admin(0).AddGroup(ctx, connect.NewRequest(&quoratev1.AddGroupRequest{Replicas: []string{c.Node(0).ID(), c.Node(1).ID(), "node9"}}))
	})
	waitPlan(t, c, 0, p.GetId(), "done", 30*time.Second)
	keys := keysOf(shard.SlotRange{Start: shard.SlotCount - 16, End: shard.SlotCount}, 3)
	spent := map[string]int64{}
	for _, k := range keys {
		for range 3 {
			r, err := admit(ctx, c, 2, "p", k, 0)
			if err != nil || !r.GetAllowed() {
				t.Fatalf("admit %s: %v %v", k, r, err)
			}
			spent[k]++
		}
	}
	// The group forms on its two live founders and takes the slots.
	mv := startPlan(t, c, func(ctx context.Context) (*connect.Response[quoratev1.PlanResponse], error) {
		return c.Admin(1).MoveSlots(ctx, connect.NewRequest(&quoratev1.MoveSlotsRequest{From: 2, To: 3, Count: 16}))
	})
	waitPlan(t, c, 1, mv.GetId(), "done", 60*time.Second)
	for _, k := range keys {
		wantRemaining(t, c, 3, "p", k, capacity-spent[k])
	}
	if _, err := c.Admin(3).RemoveNode(ctx, connect.NewRequest(&quoratev1.RemoveNodeRequest{Id: "node9", Force: true})); err != nil {
		t.Fatalf("RemoveNode node9 --force: %v", err)
	}
	c.Eventually(t, 60*time.Second, "group 3 on three live voters", func() error {
		sm := waitGroups(t, c, 3)
		for _, g := range sm.GetGroups() {
			if g.GetId() != 3 {
				continue
			}
			if slices.Contains(g.GetReplicas(), "node9") {
				return fmt.Errorf("group 3 replicas %v", g.GetReplicas())
			}
			want := slices.Sorted(slices.Values(g.GetReplicas()))
			for i := range c.Len() {
				if slices.Contains(want, c.Node(i).ID()) {
					if got := slices.Sorted(slices.Values(node.GroupVoters(c.Node(i), 3))); !slices.Equal(got, want) {
						return fmt.Errorf("%s sees voters %v, want %v", c.Node(i).ID(), got, want)
					}
				}
			}
		}
		return nil
	})
	for _, k := range keys {
		wantRemaining(t, c, 0, "p", k, capacity-spent[k])
	}
}
