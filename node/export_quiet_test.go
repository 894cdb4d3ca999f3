package node

import (
	"time"

	"github.com/quorate/quorate/node/internal/replica"
	"github.com/quorate/quorate/shard"
)

// GroupHeartbeat is the HeartbeatTimeout n's replica of data group gid runs
// with now (0 when n hosts none).
func GroupHeartbeat(n *Node, gid uint32) time.Duration {
	g := n.engine.DataGroup(shard.GroupID(gid))
	if g == nil {
		return 0
	}
	return g.HeartbeatTimeout()
}

// QuietTimeout is the HeartbeatTimeout of a quiet leader configured as cfg.
func QuietTimeout(cfg *Config) time.Duration {
	return replica.QuietTimeout(cfg.HeartbeatTimeout, cfg.LeaderLeaseTimeout)
}
