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
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

const multiGroups = 8

// newMultiGroupCluster starts 3 nodes whose shard map spreads keys over
// multiGroups data groups, and waits until every group has a leader that
// applied its ownership.
func newMultiGroupCluster(t *testing.T) *nodetest.Cluster {
	t.Helper()
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = multiGroups, 3
	}})
	waitGroupsLed(t, c)
	return c
}

// waitGroupsLed waits until every data group has a leader, among the running
// nodes, whose replica applied ownership at the map epoch.
func waitGroupsLed(t *testing.T, c *nodetest.Cluster) {
	t.Helper()
	c.Eventually(t, 30*time.Second, "every data group led", func() error {
		led := map[uint32]bool{}
		for i := range c.Len() {
			if n := c.Node(i); n != nil {
				for _, g := range n.Status().GetGroups() {
					if g.GetId() != 0 && g.GetRole() == "leader" && g.GetSlots() > 0 {
						led[g.GetId()] = true
					}
				}
			}
		}
		if len(led) != multiGroups {
			return fmt.Errorf("%d of %d groups led: %v", len(led), multiGroups, led)
		}
		return nil
	})
}

func applyBucket(t *testing.T, c *nodetest.Cluster, name string, capacity int64) {
	t.Helper()
	c.Eventually(t, 10*time.Second, "policy applied", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{{
			Name: name, Algorithm: "token_bucket", Limit: capacity, Burst: proto.Int64(capacity), Period: durationpb.New(24 * time.Hour)}}}))
		return err
	})
}

// admitOnce admits key on node i, retrying with the same request ID while
// the cluster is unavailable, and returns the answer.
func admitOnce(t *testing.T, c *nodetest.Cluster, i int, policy, key, rid string) *quoratev1.AdmitResponse {
	t.Helper()
	var out *quoratev1.AdmitResponse
	c.Eventually(t, 20*time.Second, "admit "+key, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: policy, Key: key, Caller: "t", RequestId: rid}))
		if err != nil {
			return err
		}
		out = resp.Msg
		return nil
	})
	return out
}

// Traffic over 10k keys lands on every data group; every group stays
// available with any one node down; a restarted node catches up.
func TestMultiGroupSpreadsKeysAndSurvivesANodeDown(t *testing.T) {
	c := newMultiGroupCluster(t)
	applyBucket(t, c, "p", 10)

	const keys = 10000
	began := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 32 {
		wg.Go(func() {
			for {
				k := next.Add(1) - 1
				if k >= keys {
					return
				}
				// Like a careful client: a request ID, retried with it (on
				// the next node) while the answer is Unavailable.
				req := &quoratev1.AdmitRequest{Policy: "p", Key: fmt.Sprintf("key-%d", k), Caller: "spread", RequestId: fmt.Sprintf("r%d", k)}
				var resp *connect.Response[quoratev1.AdmitResponse]
				var err error
				for attempt := 0; attempt < 10; attempt++ {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					resp, err = c.Admission((w+attempt)%3).Admit(ctx, connect.NewRequest(req))
					cancel()
					if connect.CodeOf(err) != connect.CodeUnavailable && connect.CodeOf(err) != connect.CodeDeadlineExceeded {
						break
					}
				}
				if err != nil || !resp.Msg.GetAllowed() {
					if failed.Add(1) <= 3 {
						t.Logf("key-%d: %v", k, err)
					}
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d admits over %d keys took %v", keys, keys, time.Since(began).Round(time.Millisecond))
	if f := failed.Load(); f != 0 {
		t.Fatalf("%d of %d first admits failed or were denied", f, keys)
	}
	// Every key is in exactly one group's leader replica; all groups have some.
	perGroup := map[uint32]uint64{}
	c.Eventually(t, 10*time.Second, "keys counted", func() error {
		clear(perGroup)
		var total uint64
		for i := range c.Len() {
			for _, g := range c.Node(i).Status().GetGroups() {
				if g.GetId() != 0 && g.GetRole() == "leader" {
					perGroup[g.GetId()] = g.GetKeys()
					total += g.GetKeys()
				}
			}
		}
		if total != keys || len(perGroup) != multiGroups {
			return fmt.Errorf("leaders hold %d keys in %d groups, want %d in %d", total, len(perGroup), keys, multiGroups)
		}
		return nil
	})
	for g := uint32(1); g <= multiGroups; g++ {
		share := float64(perGroup[g]) / keys
		t.Logf("group %d: %d keys (%.1f%%)", g, perGroup[g], 100*share)
		if share < 0.125-0.05 || share > 0.125+0.05 {
			t.Errorf("group %d holds %.1f%% of the keys, want 12.5%% ± 5", g, 100*share)
		}
	}

	// One key per group, to check each group answers.
	probe := map[uint32]string{}
	for k := 0; len(probe) < multiGroups && k < keys; k++ {
		key := fmt.Sprintf("key-%d", k)
		if g, ok := node.GroupOf(c.Node(0), key); ok && probe[g] == "" {
			probe[g] = key
		}
	}
	for down := range c.Len() {
		c.Kill(down)
		up := (down + 1) % c.Len()
		for g, key := range probe {
			r := admitOnce(t, c, up, "p", key, fmt.Sprintf("down%d-g%d", down, g))
			if !r.GetAllowed() || r.GetRemaining() != 8-int64(down) {
				t.Fatalf("node %d down: group %d key %s answered allowed=%v remaining=%d, want allowed remaining %d",
					down, g, key, r.GetAllowed(), r.GetRemaining(), 8-down)
			}
		}
		c.Start(down)
		c.WaitReady(t)
		waitGroupsLed(t, c)
		// The restarted node's replicas catch up with each group's leader.
		c.Eventually(t, 20*time.Second, fmt.Sprintf("node %d caught up", down), func() error {
			commit := map[uint32]uint64{}
			for i := range c.Len() {
				for _, g := range c.Node(i).Status().GetGroups() {
					if g.GetRole() == "leader" {
						commit[g.GetId()] = g.GetCommitIndex()
					}
				}
			}
			for _, g := range c.Node(down).Status().GetGroups() {
				if g.GetLastAppliedIndex() < commit[g.GetId()] {
					return fmt.Errorf("group %d applied %d < leader's commit %d", g.GetId(), g.GetLastAppliedIndex(), commit[g.GetId()])
				}
			}
			return nil
		})
	}
}

// Keys sharing a hash tag land in one group, so a multi-check Admit over
// them is still atomic.
func TestMultiGroupHashTagKeepsMultiChecksAtomic(t *testing.T) {
	c := newMultiGroupCluster(t)
	applyBucket(t, c, "tenant", 3)
	applyBucket(t, c, "route", 100)
	ga, _ := node.GroupOf(c.Node(0), "{acme}:tenant")
	gb, _ := node.GroupOf(c.Node(0), "{acme}:route:/x")
	if ga != gb || ga == 0 {
		t.Fatalf("keys with one hash tag in groups %d and %d", ga, gb)
	}
	allowed := 0
	for i := range 5 {
		req := &quoratev1.AdmitRequest{Policy: "tenant", Key: "{acme}:tenant", Caller: "t", RequestId: fmt.Sprintf("multi-%d", i),
			Also: []*quoratev1.Check{{Policy: "route", Key: "{acme}:route:/x"}}}
		c.Eventually(t, 20*time.Second, "multi-check admit", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := c.Admission(i%3).Admit(ctx, connect.NewRequest(req))
			if err != nil {
				return err
			}
			if resp.Msg.GetAllowed() {
				allowed++
			}
			return nil
		})
	}
	if allowed != 3 {
		t.Fatalf("%d of 5 multi-check admits allowed, want the tenant's 3", allowed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	peek, err := c.Admission(1).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: "route", Key: "{acme}:route:/x"}))
	if err != nil {
		t.Fatal(err)
	}
	if peek.Msg.GetRemaining() != 97 {
		t.Fatalf("route bucket has %d left, want 97: denied multi-checks must spend nothing", peek.Msg.GetRemaining())
	}
}

// In a 5-node cluster the meta group has 3 voters and 2 non-voters, data
// groups spread their 3 replicas over all 5 nodes, and a node that hosts no
// replica of a key's group still answers for it (forwarding to a replica).
func TestMultiGroupFiveNodes(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 5, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = multiGroups, 5
	}})
	waitGroupsLed(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	suffrage := map[string]int{}
	for _, m := range st.Msg.GetMembers() {
		suffrage[m.GetSuffrage()]++
	}
	if suffrage["voter"] != node.MetaVoters || suffrage["nonvoter"] != 5-node.MetaVoters {
		t.Fatalf("meta group members by suffrage %v, want %d voters and %d non-voters", suffrage, node.MetaVoters, 5-node.MetaVoters)
	}
	hosts := map[string]int{}
	for _, g := range st.Msg.GetShardMap().GetGroups() {
		if len(g.GetReplicas()) != 3 {
			t.Fatalf("group %d has replicas %v, want 3", g.GetId(), g.GetReplicas())
		}
		for _, r := range g.GetReplicas() {
			hosts[r]++
		}
	}
	if len(hosts) != 5 {
		t.Fatalf("replicas on %d nodes, want all 5: %v", len(hosts), hosts)
	}

	applyBucket(t, c, "p", 5)
	// For each group, admit through a node that hosts no replica of it.
	tested := 0
	for k := 0; tested < multiGroups && k < 2000; k++ {
		key := fmt.Sprintf("key-%d", k)
		g, ok := node.GroupOf(c.Node(0), key)
		if !ok {
			t.Fatal("no shard map")
		}
		var replicas []string
		for _, sg := range st.Msg.GetShardMap().GetGroups() {
			if sg.GetId() == g {
				replicas = sg.GetReplicas()
			}
		}
		outsider := -1
		for i := range c.Len() {
			if !slices.Contains(replicas, c.Node(i).ID()) {
				outsider = i
				break
			}
		}
		if outsider < 0 || k%(multiGroups/2) != 0 {
			continue
		}
		r := admitOnce(t, c, outsider, "p", key, "five-"+key)
		if !r.GetAllowed() || r.GetRemaining() != 4 {
			t.Fatalf("admit of %s (group %d, replicas %v) via %s: allowed=%v remaining=%d", key, g, replicas,
				c.Node(outsider).ID(), r.GetAllowed(), r.GetRemaining())
		}
		tested++
	}
	if tested == 0 {
		t.Fatal("found no key to admit through a node outside its group")
	}
}

// Requests forwarded to a group's leader ride the peer mux (the Raft port),
// not the leader's API port.
func TestForwardingRidesThePeerMux(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyBucket(t, c, "p", 5)
	leader := c.Leader(t)
	follower := (leader + 1) % c.Len()
	node.DropPeerConnections(c.Node(follower))
	before := node.ForwardDials(c.Node(follower))
	if r := admitOnce(t, c, follower, "p", "k", "fwd-1"); !r.GetAllowed() {
		t.Fatalf("admit via a follower: %+v", r)
	}
	if node.ForwardDials(c.Node(follower)) == before {
		t.Fatal("the follower answered without dialing the leader's peer mux")
	}
}
