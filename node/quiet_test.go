package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/node"
)

// A group that appends nothing turns quiet: its leader heartbeats at the
// quiet pace, while its followers keep the normal timeout and elect nobody
// (the group's term does not move). The first decision restores the
// normal pace before it is answered.
func TestQuietGroupHeartbeatsLess(t *testing.T) {
	c := newMultiGroupCluster(t)
	applyBucket(t, c, "quiet", 1000)
	key := "tenant-quiet"
	gid, ok := node.GroupOf(c.Node(0), key)
	if !ok {
		t.Fatal("no shard map")
	}
	normal := c.Config(0).HeartbeatTimeout
	quiet := node.QuietTimeout(c.Config(0))
	if quiet <= normal {
		t.Fatalf("quiet heartbeat timeout %v is not longer than %v", quiet, normal)
	}
	// leaderOf returns the index of the node leading gid and the group's term.
	leaderOf := func() (int, uint64, error) {
		for i := range c.Len() {
			for _, g := range c.Node(i).Status().GetGroups() {
				if g.GetId() == gid && g.GetRole() == "leader" {
					return i, g.GetTerm(), nil
				}
			}
		}
		return -1, 0, fmt.Errorf("group %d has no leader", gid)
	}
	admitOnce(t, c, 0, "quiet", key, "q-1")
	var leader int
	var term uint64
	c.Eventually(t, 20*time.Second, "the leader turns quiet", func() error {
		var err error
		if leader, term, err = leaderOf(); err != nil {
			return err
		}
		if hb := node.GroupHeartbeat(c.Node(leader), gid); hb != quiet {
			return fmt.Errorf("leader node%d heartbeat timeout %v, want %v", leader+1, hb, quiet)
		}
		return nil
	})
	for i := range c.Len() {
		if i != leader {
			if hb := node.GroupHeartbeat(c.Node(i), gid); hb != normal {
				t.Errorf("follower node%d runs with %v, want the normal %v", i+1, hb, normal)
			}
		}
	}
	// Quiet for several follower timeouts: nobody starts an election.
	quietSince := time.Now()
	c.Eventually(t, 20*time.Second, "quiet for 4 follower timeouts", func() error {
		l, tm, err := leaderOf()
		if err != nil {
			return err
		}
		if l != leader || tm != term {
			t.Fatalf("group %d changed leader while quiet: node%d term %d, was node%d term %d", gid, l+1, tm, leader+1, term)
		}
		if d := time.Since(quietSince); d < 4*normal {
			return fmt.Errorf("quiet for %v", d)
		}
		return nil
	})
	admitOnce(t, c, leader, "quiet", key, "q-2")
	if hb := node.GroupHeartbeat(c.Node(leader), gid); hb != normal {
		t.Errorf("after a decision the leader runs with %v, want the normal %v", hb, normal)
	}
}
