package node

import (
	"context"
	"time"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// expireInterval is how often the leader checks for expired state.
const expireInterval = 500 * time.Millisecond

// maxExpiresPerTick bounds the Expire entries one check proposes (each
// reclaims up to fsm.ExpireBatch buckets and as many dedupe entries).
const maxExpiresPerTick = 16

// expireLoop runs on every node and acts on the leader: when its replica
// holds state that has expired by the leader's clock, it proposes Expire
// entries until none is left (bounded per tick), so memory follows live
// state even without traffic. Followers do nothing: expiry is decided
// through the log, never by a follower's clock.
func (n *Node) expireLoop(ctx context.Context) {
	t := time.NewTicker(expireInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for range maxExpiresPerTick {
			next, ok := n.meta.fsm.NextExpiry()
			if !n.isLeader() || !ok || next > n.now().UnixNano() {
				break
			}
			pctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
			_, err := n.propose(pctx, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Expire{Expire: &raftcmdv1.Expire{}}})
			cancel()
			if err != nil {
				n.log.Debug("expire", "err", err)
				break
			}
		}
	}
}
