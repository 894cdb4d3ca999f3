package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
)

// Nodes on distinct loopback IPs dial each other from those IPs (Raft and
// forwarding): the cluster forms, and a follower forwards to the leader.
func TestClusterOnDistinctLoopbackIPs(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		ip := fmt.Sprintf("127.0.0.%d", 21+i)
		cfg.APIAddr, cfg.RaftAddr = ip+":0", ip+":0"
	}})
	applyPolicy(t, c, "ips", 100, time.Hour, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.Leader(t)
	for i := range c.Len() {
		if _, err := admit(ctx, c, i, "ips", "k", 0); err != nil {
			t.Fatalf("admit on node %d (leader %d): %v", i, leader, err)
		}
	}
}
