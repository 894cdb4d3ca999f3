package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

const (
	recoverGroups   = 3
	recoverCapacity = 5 // tokens per key
	recoverKeys     = 24
	recoverSpent    = 3 // acknowledged spends per key before the loss
)

// A cluster that lost two of its three nodes for good comes back from the
// survivor: recovered offline (refused while it runs), restarted alone, it
// serves with every spend it had received, and two fresh nodes join it and
// take the lost nodes' places in every group.
func TestRecoverFromLostMajority(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = recoverGroups, 3
	}})
	waitRecoverGroupsLed(t, c)
	applyBucket(t, c, "p", recoverCapacity)
	for k := range recoverKeys {
		for s := range recoverSpent {
			if r := admitOnce(t, c, k%3, "p", fmt.Sprintf("k%d", k), fmt.Sprintf("k%d-%d", k, s)); !r.GetAllowed() {
				t.Fatalf("k%d spend %d denied", k, s)
			}
		}
	}
	// Every acknowledged spend reached the survivor, node 0.
	recoverWaitApplied(t, c, 0)

	survivor := c.Config(0).DataDir
	asked := false
	if _, err := node.Recover(survivor, func(*node.RecoveryPlan) bool { asked = true; return true }); !errors.Is(err, node.ErrNodeRunning) || asked {
		t.Fatalf("recover of a running node's directory: %v (asked: %v), want ErrNodeRunning before asking", err, asked)
	}
	c.Kill(1)
	c.Kill(2)
	for _, i := range []int{1, 2} {
		if err := os.RemoveAll(c.Config(i).DataDir); err != nil {
			t.Fatal(err)
		}
	}
	c.Stop(0)
	if _, err := node.Recover(survivor, func(*node.RecoveryPlan) bool { return false }); !errors.Is(err, node.ErrRecoveryDeclined) {
		t.Fatalf("declined recovery: %v", err)
	}
	plan, err := node.Recover(survivor, func(*node.RecoveryPlan) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Groups) != 1+recoverGroups || plan.NodeID != "node1" || plan.RaftAddr != c.Config(0).RaftAddr || len(plan.Unhosted) != 0 {
		t.Fatalf("plan: %+v", plan)
	}
	for _, g := range plan.Groups {
		if slices.Sort(g.Lost); !slices.Equal(g.Lost, []string{"node2", "node3"}) || g.Skipped != "" {
			t.Errorf("group %d: lost %v, skipped %q; want node2, node3 dropped", g.ID, g.Lost, g.Skipped)
		}
	}

	c.Config(0).Bootstrap = false
	c.Start(0)
	waitRecoverGroupsLed(t, c)
	// Half the keys are drained on the survivor alone: each has exactly
	// what its acknowledged spends left.
	for k := range recoverKeys / 2 {
		recoverDrainKey(t, c.Admission(0), k)
	}

	// Two fresh nodes join the survivor; the lost nodes are removed; every
	// group gets three voters again.
	var fresh []*node.Node
	for _, id := range []string{"node4", "node5"} {
		fresh = append(fresh, recoverStartFresh(t, c, id))
	}
	for _, id := range []string{"node2", "node3"} {
		c.Eventually(t, 60*time.Second, "remove "+id, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.Admin(0).RemoveNode(ctx, connect.NewRequest(&quoratev1.RemoveNodeRequest{Id: id, Force: true}))
			return err
		})
	}
	want := []string{"node1", "node4", "node5"}
	c.Eventually(t, 120*time.Second, "every group on node1, node4, node5", func() error {
		var groups []*quoratev1.GroupState
		for _, n := range append([]*node.Node{c.Node(0)}, fresh...) {
			for _, g := range n.Status().GetGroups() {
				if g.GetRole() == "leader" {
					groups = append(groups, g)
				}
			}
		}
		if len(groups) != 1+recoverGroups {
			return fmt.Errorf("%d groups led, want %d", len(groups), 1+recoverGroups)
		}
		for _, g := range groups {
			v := slices.Clone(g.GetVoters())
			slices.Sort(v)
			if !slices.Equal(v, want) || len(g.GetNonvoters()) > 0 {
				return fmt.Errorf("group %d: voters %v, non-voters %v", g.GetId(), v, g.GetNonvoters())
			}
		}
		return nil
	})
	// The fresh nodes caught up, and serve the other half of the keys.
	fc := quoratev1connect.NewAdmissionServiceClient(c.HTTPClient(), "http://"+fresh[0].APIAddr())
	for k := recoverKeys / 2; k < recoverKeys; k++ {
		recoverDrainKey(t, fc, k)
	}
}

// waitRecoverGroupsLed waits until every data group has a leader among the running nodes.
func waitRecoverGroupsLed(t *testing.T, c *nodetest.Cluster) {
	t.Helper()
	c.Eventually(t, 60*time.Second, "every data group led", func() error {
		led := 0
		for j := range c.Len() {
			if n := c.Node(j); n != nil {
				for _, g := range n.Status().GetGroups() {
					if g.GetId() != 0 && g.GetRole() == "leader" && g.GetSlots() > 0 {
						led++
					}
				}
			}
		}
		if led != recoverGroups {
			return fmt.Errorf("%d of %d data groups led", led, recoverGroups)
		}
		return nil
	})
}

// recoverWaitApplied waits until node i applied, in every group, what the group's
// leader had committed when it was called.
func recoverWaitApplied(t *testing.T, c *nodetest.Cluster, i int) {
	t.Helper()
	commit := map[uint32]uint64{}
	for j := range c.Len() {
		st := c.Node(j).Status()
		if st.GetRole() == "leader" {
			commit[0] = st.GetCommitIndex()
		}
		for _, g := range st.GetGroups() {
			if g.GetRole() == "leader" {
				commit[g.GetId()] = g.GetCommitIndex()
			}
		}
	}
	if len(commit) != 1+recoverGroups {
		t.Fatalf("leaders of %d groups, want %d", len(commit), 1+recoverGroups)
	}
	c.Eventually(t, 30*time.Second, "node applied every group's commit", func() error {
		st := c.Node(i).Status()
		applied := map[uint32]uint64{0: st.GetLastAppliedIndex()}
		for _, g := range st.GetGroups() {
			applied[g.GetId()] = g.GetLastAppliedIndex()
		}
		for id, idx := range commit {
			if applied[id] < idx {
				return fmt.Errorf("group %d: applied %d of %d", id, applied[id], idx)
			}
		}
		return nil
	})
}

// recoverDrainKey admits key k until it is denied: exactly what its acknowledged
// spends left must be allowed (nothing lost, nothing over the limit).
func recoverDrainKey(t *testing.T, ac quoratev1connect.AdmissionServiceClient, k int) {
	t.Helper()
	allowed := 0
	for s := 0; ; s++ {
		var resp *connect.Response[quoratev1.AdmitResponse]
		nodetest.Eventually(t, 30*time.Second, fmt.Sprintf("admit k%d", k), func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			resp, err = ac.Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "p", Key: fmt.Sprintf("k%d", k), Caller: "t",
				RequestId: fmt.Sprintf("k%d-after-%d", k, s)}))
			return err
		})
		if !resp.Msg.GetAllowed() {
			break
		}
		if allowed++; allowed > recoverCapacity {
			break
		}
	}
	if want := recoverCapacity - recoverSpent; allowed != want {
		t.Errorf("k%d: %d more admitted after the recovery, want %d", k, allowed, want)
	}
}

// recoverStartFresh starts a new node with ID id and an empty data directory,
// joining node 0, and stops it when the test ends.
func recoverStartFresh(t *testing.T, c *nodetest.Cluster, id string) *node.Node {
	t.Helper()
	cfg := *c.Config(0)
	cfg.ID, cfg.DataDir = id, filepath.Join(t.TempDir(), id)
	cfg.APIAddr, cfg.RaftAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.Bootstrap, cfg.Join = false, c.Config(0).APIAddr
	cfg.Observer = new(nodetest.Observer)
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		_ = n.Close()
		cancel()
		<-done
	})
	nodetest.Eventually(t, 60*time.Second, id+" registered", func() error {
		select {
		case <-n.Registered():
			return nil
		default:
			return errors.New("not yet")
		}
	})
	return n
}

// Recover refuses a directory that is not a node's, and changes nothing in
// it.
func TestRecoverRefusesNotANodeDir(t *testing.T) {
	empty := t.TempDir()
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{empty, other, filepath.Join(empty, "missing")} {
		_, err := node.Recover(dir, func(*node.RecoveryPlan) bool { return true })
		if !errors.Is(err, node.ErrNotNodeDir) {
			t.Errorf("%s: %v, want ErrNotNodeDir", dir, err)
		}
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("recover wrote into a directory that is not a node's: %v", ents)
	}
}
