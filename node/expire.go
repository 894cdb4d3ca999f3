package node

import (
	"context"
	"time"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// expireInterval is how often the leader checks for expired state.
const expireInterval = 500 * time.Millisecond

// maxExpiresPerTick bounds the Expire entries one check proposes (each
// reclaims up to fsm.ExpireBatch state keys — buckets, semaphores,
// reservations — and as many dedupe entries).
const maxExpiresPerTick = 16

// expireLoop runs on every node and acts as leader of each group it hosts
// and leads: when the group's replica holds state that has expired by the
// leader's clock, it proposes Expire entries until none is left (bounded per
// tick), so memory follows live state even without traffic. Followers do
// nothing: expiry is decided through the log, never by a follower's clock.
func (c *controller) expireLoop(ctx context.Context) {
	every(ctx, expireInterval, func() {
		for _, g := range c.hosted() {
			c.expireGroup(ctx, g)
		}
	})
}

// expireGroup proposes Expire entries to g while this node leads it and its
// replica holds expired state by this node's clock.
func (c *controller) expireGroup(ctx context.Context, g *group) {
	for range maxExpiresPerTick {
		next, ok := g.fsm.NextExpiry()
		if !g.isLeader() || !ok || next > c.req.now().UnixNano() {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		_, err := c.req.proposeTo(pctx, dest{g: g, id: g.id}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Expire{Expire: &raftcmdv1.Expire{}}})
		cancel()
		if err != nil {
			c.log.Debug("expire", "group", g.id, "err", err)
			return
		}
	}
}
