package node_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
)

// appliedAsMuch waits until node i applied, in every group it shares with node
// j, at least what node j had applied when called.
func appliedAsMuch(t *testing.T, c *nodetest.Cluster, i, j int) {
	t.Helper()
	want := node.AppliedIndexes(c.Node(j))
	c.Eventually(t, 20*time.Second, fmt.Sprintf("node%d to catch up with node%d", i+1, j+1), func() error {
		got := node.AppliedIndexes(c.Node(i))
		for g, idx := range want {
			if have, ok := got[g]; ok && have < idx {
				return fmt.Errorf("group %d: applied %d, node%d had %d", g, have, j+1, idx)
			}
		}
		return nil
	})
}

// A node held below the shared-connection level (an older binary, or one
// started with --max-feature-level below it) is neither sent to nor sends
// over the shared Raft connection, yet replicates with nodes that use it
// between themselves; once it registers the level, Raft traffic to and
// from it moves to the shared connection too. (The old node, node1,
// bootstraps the cluster: one below the cluster's level could not join.)
func TestMixedRaftTransportsThenSwitch(t *testing.T) {
	below := node.RaftMuxLevel() - 1
	c := nodetest.NewClusterWith(t, nodetest.Options{Configure: func(i int, cfg *node.Config) {
		if i == 0 {
			cfg.MaxFeatureLevel = below
		}
	}})
	c.Eventually(t, 10*time.Second, "node1 registered below the level", func() error {
		if got := node.MinFeatureLevel(c.Node(c.Leader(t))); got != below {
			return fmt.Errorf("lowest feature level %d", got)
		}
		return nil
	})
	applyBucket(t, c, "p", 1000)
	for k := range 16 {
		admitOnce(t, c, k%3, "p", fmt.Sprintf("k%d", k), fmt.Sprintf("a%d", k))
	}
	for _, j := range []int{1, 2} {
		appliedAsMuch(t, c, 0, j)
	}
	if s := node.RaftMuxStats(c.Node(0)); s.Dials+s.Accepted+s.FramesReceived != 0 {
		t.Fatalf("node1, below the level, used shared connections: %+v", s)
	}
	// A node reads the registry for its peers' levels at most once a
	// second: the meta leader's RPCs to the other node at the level move
	// to a shared connection within about that. node1, below the level,
	// sends to nobody over them: it hands its leadership over.
	c.Eventually(t, 10*time.Second, "the meta leader's RPCs to its peer at the level on a shared connection", func() error {
		l := c.Leader(t)
		if l == 0 {
			if err := node.TransferMetaLeadership(c.Node(0)); err != nil {
				return fmt.Errorf("handing node1's leadership over: %w", err)
			}
			return errors.New("node1 led")
		}
		if s := node.RaftMuxStats(c.Node(l)); s.Dials == 0 || s.FramesSent == 0 {
			return fmt.Errorf("meta leader node%d sent nothing over shared connections: %+v", l+1, s)
		}
		return nil
	})
	if s := node.RaftMuxStats(c.Node(0)); s.Dials+s.Accepted+s.FramesReceived != 0 {
		t.Fatalf("node1, below the level, used shared connections: %+v", s)
	}

	c.Stop(0)
	c.Config(0).MaxFeatureLevel = 0
	c.Start(0)
	c.Eventually(t, 20*time.Second, "node1 registered at the level", func() error {
		if got := node.MinFeatureLevel(c.Node(c.Leader(t))); got != node.FeatureLevel() {
			return fmt.Errorf("lowest feature level %d", got)
		}
		return nil
	})
	c.Eventually(t, 20*time.Second, "node1's Raft traffic on shared connections", func() error {
		if s := node.RaftMuxStats(c.Node(0)); s.FramesReceived == 0 {
			return fmt.Errorf("node1's hub: %+v", s)
		}
		return nil
	})
	for k := range 16 {
		admitOnce(t, c, k%3, "p", fmt.Sprintf("k%d", k), fmt.Sprintf("b%d", k))
	}
	for _, j := range []int{1, 2} {
		appliedAsMuch(t, c, 0, j)
	}
}
