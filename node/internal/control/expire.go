package control

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/quorate/quorate/node/internal/engine"
	"github.com/quorate/quorate/node/internal/replica"
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
// Every node, leader or not, then hands the memory of what its replicas
// reclaimed back to the system (see memoryRelease).
func (c *Controller) expireLoop(ctx context.Context) {
	var rel memoryRelease
	every(ctx, expireInterval, func() {
		held := 0
		now := time.Now()
		for _, g := range c.hosted() {
			g.SweepQuiet(now)
			c.expireGroup(ctx, g)
			held += g.FSM.BucketCount() + g.FSM.SemaphoreCount() + g.FSM.ReservationCount() + g.FSM.DedupeLen()
		}
		if rel.due(held, time.Now()) {
			debug.FreeOSMemory()
		}
	})
}

// The thresholds of memoryRelease.
const (
	// releaseEntries is how many entries the node's replicas must have
	// reclaimed (from their most since the last release) for a release
	// while expiry goes on.
	releaseEntries = 100_000
	// releaseSettled is how many they must have reclaimed for a release
	// once expiry has paused (a tick reclaimed nothing): the end of a wave
	// smaller than releaseEntries, or its tail.
	releaseSettled = 10_000
	// releaseEvery is the least time between two releases: each collects
	// garbage in full and returns every free page.
	releaseEvery = 10 * time.Second
)

// memoryRelease decides when a node hands the memory its replicas reclaimed
// back to the system. After a mass expiry the runtime holds the freed heap
// until its next collection, which an idle node may not run for minutes,
// and returns it only slowly after that: a node that served a million keys
// would keep their memory long after they expired. The node collects
// garbage and returns free memory (debug.FreeOSMemory) once the entries its
// replicas hold are releaseEntries below their most since the last release
// — or releaseSettled below it when a tick reclaimed nothing — and
// releaseEvery has passed since the last release. It decides nothing
// replicated.
type memoryRelease struct {
	last time.Time // of the last release
	peak int       // the most entries held since the last release
	prev int       // the entries held at the last tick
}

// due records that the replicas hold held entries at now and reports
// whether to release memory now.
func (r *memoryRelease) due(held int, now time.Time) bool {
	r.peak = max(r.peak, held)
	settled := held >= r.prev
	r.prev = held
	freed := r.peak - held
	if now.Sub(r.last) < releaseEvery || freed < releaseSettled || freed < releaseEntries && !settled {
		return false
	}
	r.peak, r.last = held, now
	return true
}

// expireGroup proposes Expire entries to g while this node leads it and its
// replica holds expired state by this node's clock.
func (c *Controller) expireGroup(ctx context.Context, g *replica.Replica) {
	for range maxExpiresPerTick {
		next, ok := g.FSM.NextExpiry()
		if !g.IsLeader() || !ok || next > c.req.Now().UnixNano() {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		_, err := c.req.ProposeTo(pctx, engine.Dest{Replica: g, ID: g.ID}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Expire{Expire: &raftcmdv1.Expire{}}})
		cancel()
		if err != nil {
			c.log.Debug("expire", "group", g.ID, "err", err)
			return
		}
	}
}
