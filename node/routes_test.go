package node_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// routesOf asks node i for its routes.
func routesOf(c *nodetest.Cluster, i int) (*quoratev1.RoutesResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := c.Admission(i).Routes(ctx, connect.NewRequest(&quoratev1.RoutesRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// statusLeaders is, by group ID, the node index each running node's status
// says leads it (the meta group as 0), or an error while running nodes
// disagree or a group has no leader.
func statusLeaders(c *nodetest.Cluster) (map[uint32]int, error) {
	ids := map[string]int{}
	for i := range c.Len() {
		ids[c.Config(i).ID] = i
	}
	out := map[uint32]int{}
	for i := range c.Len() {
		n := c.Node(i)
		if n == nil {
			continue
		}
		for _, g := range n.Status().GetGroups() {
			if g.GetRole() != "leader" {
				continue
			}
			if j, ok := out[g.GetId()]; ok && j != i {
				return nil, fmt.Errorf("group %d: nodes %d and %d both lead", g.GetId(), j, i)
			}
			out[g.GetId()] = i
		}
	}
	for i := range c.Len() {
		n := c.Node(i)
		if n == nil {
			continue
		}
		for _, g := range n.Status().GetGroups() {
			j, ok := out[g.GetId()]
			if !ok {
				return nil, fmt.Errorf("group %d has no leader", g.GetId())
			}
			if g.GetLeaderId() != c.Config(j).ID {
				return nil, fmt.Errorf("node %d sees %q lead group %d, node %d leads it", i, g.GetLeaderId(), g.GetId(), j)
			}
		}
	}
	return out, nil
}

// checkRoutes checks node i's routes against the shard map (nil: a single
// group cluster) and the leaders: slots in order, covering every slot,
// adjacent ranges of one group merged; every group's leader and its API URL;
// the members' API URLs, node i's first.
func checkRoutes(c *nodetest.Cluster, i int, sm *quoratev1.ShardMapStatus, leaders map[uint32]int) (*quoratev1.RoutesResponse, error) {
	r, err := routesOf(c, i)
	if err != nil {
		return nil, err
	}
	if r.GetSlotCount() != shard.SlotCount {
		return nil, fmt.Errorf("slot_count %d", r.GetSlotCount())
	}
	var next uint32
	perGroup := map[uint32]uint32{}
	for k, s := range r.GetSlots() {
		if s.GetStart() != next || s.GetEnd() <= s.GetStart() {
			return nil, fmt.Errorf("slots[%d] = [%d,%d), want it to start at %d", k, s.GetStart(), s.GetEnd(), next)
		}
		if k > 0 && r.GetSlots()[k-1].GetGroup() == s.GetGroup() {
			return nil, fmt.Errorf("slots[%d] and [%d] are both group %d's: not merged", k-1, k, s.GetGroup())
		}
		next = s.GetEnd()
		perGroup[s.GetGroup()] += s.GetEnd() - s.GetStart()
	}
	if next != shard.SlotCount {
		return nil, fmt.Errorf("slots end at %d", next)
	}
	want := []uint32{0}
	if sm != nil {
		want = nil
		if r.GetEpoch() != sm.GetEpoch() {
			return nil, fmt.Errorf("epoch %d, the shard map's is %d", r.GetEpoch(), sm.GetEpoch())
		}
		for _, g := range sm.GetGroups() {
			want = append(want, g.GetId())
			if perGroup[g.GetId()] != g.GetSlots() {
				return nil, fmt.Errorf("group %d has %d slots in the routes, %d in the map", g.GetId(), perGroup[g.GetId()], g.GetSlots())
			}
		}
	}
	var got []uint32
	for _, g := range r.GetGroups() {
		got = append(got, g.GetGroup())
		j := leaders[g.GetGroup()]
		if g.GetLeaderId() != c.Config(j).ID || g.GetLeaderUrl() != c.APIURL(j) {
			return nil, fmt.Errorf("node %d routes group %d to %s at %s, status says node %d leads it", i, g.GetGroup(), g.GetLeaderId(), g.GetLeaderUrl(), j)
		}
	}
	if !slices.Equal(got, want) {
		return nil, fmt.Errorf("groups %v, want %v", got, want)
	}
	m := r.GetMembers()
	if len(m) != c.Len() || m[0] != c.APIURL(i) {
		return nil, fmt.Errorf("members %v: want %d, %s first", m, c.Len(), c.APIURL(i))
	}
	for j := range c.Len() {
		if !slices.Contains(m, c.APIURL(j)) {
			return nil, fmt.Errorf("members %v lack %s", m, c.APIURL(j))
		}
	}
	return r, nil
}

// eventuallyRoutesAgree waits until every running node's routes agree with
// the leaders status reports and with sm, and returns node 0's (or the
// first running node's) routes.
func eventuallyRoutesAgree(t *testing.T, c *nodetest.Cluster, what string, sm func() *quoratev1.ShardMapStatus) *quoratev1.RoutesResponse {
	t.Helper()
	var out *quoratev1.RoutesResponse
	c.Eventually(t, 30*time.Second, what, func() error {
		leaders, err := statusLeaders(c)
		if err != nil {
			return err
		}
		m := sm()
		out = nil
		for i := range c.Len() {
			if !c.Running(i) {
				continue
			}
			r, err := checkRoutes(c, i, m, leaders)
			if err != nil {
				return fmt.Errorf("node %d: %w", i, err)
			}
			if out == nil {
				out = r
			}
		}
		return nil
	})
	return out
}

// Without data groups, every slot routes to the meta group, whose leader
// Routes names from every node, and follows after a leadership transfer.
func TestRoutesSingleGroupFollowsTheLeader(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	none := func() *quoratev1.ShardMapStatus { return nil }
	r := eventuallyRoutesAgree(t, c, "routes agree", none)
	if r.GetEpoch() != 0 || len(r.GetSlots()) != 1 || r.GetSlots()[0].GetGroup() != 0 {
		t.Fatalf("routes %v: want epoch 0, every slot to group 0", r)
	}
	before := r.GetGroups()[0].GetLeaderId()
	leader := c.Leader(t)
	if err := node.TransferMetaLeadership(c.Node(leader)); err != nil {
		t.Fatal(err)
	}
	c.Eventually(t, 30*time.Second, "routes follow the new leader", func() error {
		leaders, err := statusLeaders(c)
		if err != nil {
			return err
		}
		for i := range c.Len() {
			r, err := checkRoutes(c, i, nil, leaders)
			if err != nil {
				return fmt.Errorf("node %d: %w", i, err)
			}
			if r.GetGroups()[0].GetLeaderId() == before {
				return fmt.Errorf("node %d still routes to %s", i, before)
			}
		}
		return nil
	})
}

// With data groups: Routes from every node matches the shard map and the
// group leaders status reports; a client routing every key by it to its
// leader makes no node forward; a slot move grows the epoch and changes the
// ranges; a stopped leader's groups are routed to their new leaders.
func TestRoutesFollowSlotMovesAndLeaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := nodetest.NewClusterWith(t, nodetest.Options{Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
	}})
	waitGroups(t, c, 2)
	applyLongBucket(t, c, "p", 1_000_000)
	shardMap := func() *quoratev1.ShardMapStatus {
		resp, err := c.Admin(c.Leader(t)).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return nil
		}
		return resp.Msg.GetShardMap()
	}
	r := eventuallyRoutesAgree(t, c, "routes agree", shardMap)
	if r.GetEpoch() == 0 || len(r.GetSlots()) != 2 {
		t.Fatalf("routes %v: want a map with two ranges", r)
	}

	// Sent where the routes say, no call is forwarded (retried while a
	// leader moved meanwhile, e.g. back to its preferred node).
	keys := make([]string, 40)
	for k := range keys {
		keys[k] = fmt.Sprintf("routed-%d", k)
	}
	c.Eventually(t, 30*time.Second, "calls routed by Routes forwarded by none", func() error {
		r, err := routesOf(c, 1)
		if err != nil {
			return err
		}
		before := forwardedCalls(t, c)
		for _, k := range keys {
			i, err := routeOf(c, r, k)
			if err != nil {
				return err
			}
			resp, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "p", Key: k}))
			if err != nil {
				return err
			}
			if h := resp.Header().Get("Quorate-Leader"); h != "" {
				return fmt.Errorf("%s sent to node %d was forwarded to %s", k, i, h)
			}
		}
		if after := forwardedCalls(t, c); !slices.Equal(after, before) {
			return fmt.Errorf("forwarded calls went from %v to %v", before, after)
		}
		return nil
	})

	p := startPlan(t, c, func(ctx context.Context) (*connect.Response[quoratev1.PlanResponse], error) {
		return c.Admin(0).MoveSlots(ctx, connect.NewRequest(&quoratev1.MoveSlotsRequest{From: 1, To: 2, Count: 4}))
	})
	waitPlan(t, c, 0, p.GetId(), "done", 60*time.Second)
	moved := eventuallyRoutesAgree(t, c, "routes follow the slot move", func() *quoratev1.ShardMapStatus {
		sm := shardMap()
		if sm.GetEpoch() <= r.GetEpoch() {
			return nil // not yet: checkRoutes fails on a nil map with groups
		}
		return sm
	})
	if moved.GetEpoch() <= r.GetEpoch() || slices.EqualFunc(moved.GetSlots(), r.GetSlots(), func(a, b *quoratev1.SlotRoute) bool {
		return a.GetStart() == b.GetStart() && a.GetEnd() == b.GetEnd() && a.GetGroup() == b.GetGroup()
	}) {
		t.Fatalf("after the move: routes %v, before %v", moved, r)
	}

	// Stop the leader of group 1: every running node routes it to the new
	// leader.
	leaders, err := statusLeaders(c)
	if err != nil {
		t.Fatal(err)
	}
	stopped := leaders[1]
	c.Stop(stopped)
	after := eventuallyRoutesAgree(t, c, "routes follow the new leaders", shardMap)
	for _, g := range after.GetGroups() {
		if g.GetLeaderId() == c.Config(stopped).ID {
			t.Fatalf("group %d routed to the stopped node", g.GetGroup())
		}
	}
}

// routeOf is the index of the node r sends key's calls to.
func routeOf(c *nodetest.Cluster, r *quoratev1.RoutesResponse, key string) (int, error) {
	slot := node.SlotOf(key)
	i := slices.IndexFunc(r.GetSlots(), func(s *quoratev1.SlotRoute) bool { return s.GetStart() <= slot && slot < s.GetEnd() })
	if i < 0 {
		return 0, fmt.Errorf("no route for slot %d", slot)
	}
	g := r.GetSlots()[i].GetGroup()
	for _, gr := range r.GetGroups() {
		if gr.GetGroup() != g {
			continue
		}
		for j := range c.Len() {
			if c.APIURL(j) == gr.GetLeaderUrl() {
				return j, nil
			}
		}
		return 0, fmt.Errorf("group %d's leader %q is no node", g, gr.GetLeaderUrl())
	}
	return 0, fmt.Errorf("group %d is not in the routes", g)
}

// forwardedCalls is every running node's forwarded_calls by index.
func forwardedCalls(t *testing.T, c *nodetest.Cluster) []uint64 {
	t.Helper()
	out := make([]uint64, c.Len())
	for i := range c.Len() {
		if n := c.Node(i); n != nil {
			out[i] = n.Status().GetForwardedCalls()
		}
	}
	return out
}
