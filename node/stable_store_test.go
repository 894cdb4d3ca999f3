package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
)

// Every replica's term and vote survive its node's restart (they are in
// the node's stable store, <data-dir>/stable.db, each group's apart), so
// raft refuses to vote twice in a term: after a full restart of a 3-node
// cluster of 3 groups, each replica's files hold a term at least the one
// it ran in, and the replica, started from them, refuses its vote in the
// term of its last vote to any candidate but the one it voted for.
func TestRestartKeepsTermsAndVotes(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
	}})
	groups := []uint32{0, 1, 2}
	stopAll := func() {
		for i := range c.Len() {
			c.Stop(i)
		}
	}
	// A full restart: every group elects anew, its replicas voting.
	stopAll()
	for i := range c.Len() {
		c.Start(i)
	}
	c.WaitReady(t)
	live := map[[2]int]uint64{} // node, group: the term it runs in
	c.Eventually(t, 60*time.Second, "every group led, its replicas in one term", func() error {
		for _, g := range groups {
			leader := false
			for i := range c.Len() {
				s := groupState(c, i, g)
				if s == nil || s.GetTerm() == 0 {
					return fmt.Errorf("node %d: no replica of group %d yet", i, g)
				}
				live[[2]int{i, int(g)}] = s.GetTerm()
				leader = leader || s.GetRole() == "leader"
				if s.GetTerm() != groupState(c, 0, g).GetTerm() {
					return fmt.Errorf("group %d: terms differ", g)
				}
			}
			if !leader {
				return fmt.Errorf("group %d: no leader", g)
			}
		}
		return nil
	})
	addrs := map[string]string{} // Raft address: node ID
	for i := range c.Len() {
		addrs[c.Node(i).RaftAddr()] = c.Config(i).ID
	}
	stopAll()

	refused := map[uint32]int{}
	for i := range c.Len() {
		cfg := *c.Config(i)
		for _, g := range groups {
			term, voteTerm, cand, err := node.ReplicaVote(cfg, g)
			if err != nil {
				t.Fatalf("node %d group %d: %v", i, g, err)
			}
			if term < live[[2]int{i, int(g)}] {
				t.Fatalf("node %d group %d: term %d after the restart, it ran in %d", i, g, term, live[[2]int{i, int(g)}])
			}
			t.Logf("node %d group %d: term %d, voted in %d for %q", i, g, term, voteTerm, cand)
			if voteTerm != term || cand == "" {
				continue // it has not voted in its term (it heard the leader first)
			}
			candID, ok := addrs[cand]
			if !ok {
				t.Fatalf("node %d group %d voted for %q, no node's Raft address: %v", i, g, cand, addrs)
			}
			for addr, id := range addrs {
				if id == candID || id == cfg.ID {
					continue
				}
				if granted, err := node.AskVote(cfg, g, id, addr, term); err != nil || granted {
					t.Fatalf("node %d group %d voted for %s in term %d, then for %s too: %v, %v", i, g, candID, term, id, granted, err)
				}
			}
			if granted, err := node.AskVote(cfg, g, candID, cand, term); err != nil || !granted {
				t.Fatalf("node %d group %d voted for %s in term %d, and refused it the same vote again: %v, %v", i, g, candID, term, granted, err)
			}
			refused[g]++
		}
	}
	for _, g := range groups {
		if refused[g] == 0 {
			t.Fatalf("group %d: no replica had voted in its term: %v", g, refused)
		}
	}

	for i := range c.Len() {
		c.Start(i)
	}
	c.WaitReady(t)
	applyPolicy(t, c, "after-restart", 10, time.Hour, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admit(ctx, c, 0, "after-restart", "k", 1); err != nil {
		t.Fatal(err)
	}
}
