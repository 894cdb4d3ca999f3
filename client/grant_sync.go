package client

import (
	"math"
	"time"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Local-plus-global (local.mode sync), the client's side. The grant state of
// a sync policy holds an allowance: units this client may admit until its
// next report. Nothing was spent ahead; the cluster charges what a report
// says was admitted, past the limit if need be, and answers the allowance
// for the next interval, which replaces the previous one. The hot path is
// the grant mode's (one CAS on a stripe of avail); only the loop differs:
//
//   - used (base − avail) runs over the state's life and is never reset: a
//     call that starts a new record has its used taken as the baseline, and
//     a report for an ended record is ignored (the cluster charged that
//     allowance whole).
//   - An answer to a report of used_sent gives allowance A. The units
//     admitted since the report was sent (used_now − used_sent) were taken
//     from the old allowance, which the answer replaced: they count against
//     A, so avail becomes A − (used_now − used_sent), which is
//     avail.add(A − base + used_sent) with base = A + used_sent after it
//     (used = base − avail stays used_now). It may be negative (a debt
//     on stripe 0): local decisions then wait for the next allowance.
//   - Reports every sync interval, and early — at most every quarter
//     interval — when the allowance runs out while the key is in demand (a
//     local decision leaving its stripe of avail at 0, or a strict one, wakes
//     the loop).
//   - At the local deadline (the first send of the call + expires_at −
//     decided_at − margin, as in grant mode) avail goes to 0; nothing is
//     counted lost: the cluster counts what it charged unreported.
//   - A key idle for two sync intervals, or Close, sends a final report
//     with release set.

// defaultSyncInterval is a sync policy's sync_interval when it leaves it
// unset.
const defaultSyncInterval = time.Second

// wantSync is the allowance to ask for: the demand over two sync
// intervals, at least 1; g.mu is held.
func (g *grantState) wantSync() int64 {
	w := math.Ceil(2 * g.demand * g.spec.interval.Seconds())
	if w >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return max(1, int64(w))
}

// applySync takes in the answer to a report of usedSent first sent at sent
// (a retry of a report sends the same used, so a duplicate answer counts
// from it too); g.mu is held.
func (g *grantState) applySync(resp *quoratev1.GrantResponse, sent time.Time, usedSent int64) grantWait {
	m := g.m
	switch started := resp.GetStartedAt(); {
	case started == nil:
		// No record was stored (the group had no room): no allowance.
		g.started = time.Time{}
	case !started.AsTime().Equal(g.started):
		g.started = started.AsTime()
		m.acquired.Add(1)
	default:
		m.renewed.Add(1)
	}
	g.seq++
	g.seqSent = time.Time{}
	if usedSent > g.reported {
		m.unitsReported.Add(uint64(usedSent - g.reported))
		g.reported = usedSent
	}

	allowance := max(resp.GetTotal(), 0)
	lifetime := resp.GetExpiresAt().AsTime().Sub(resp.GetDecidedAt().AsTime())
	margin := min(lifetime/10, 100*time.Millisecond)
	g.deadline = sent.Add(lifetime - margin)
	until := time.Until(g.deadline)
	if g.started.IsZero() || until <= 0 {
		allowance = 0
	}
	m.unitsAllowed.Add(uint64(allowance))
	// The allowance is charged to the key once reported: the key's units
	// are its remaining less what was admitted from the allowance.
	g.answered(resp, resp.GetRemaining()-allowance)
	g.gen++
	if g.timer != nil {
		g.timer.Stop()
	}
	g.granting(resp.GetDecidedAt().AsTime()) // before the units are added
	// The old allowance is void; what was admitted since the report was
	// sent counts against the new one.
	g.avail.add(allowance - g.base + usedSent)
	g.base = allowance + usedSent
	g.voided = 0
	if allowance > 0 {
		gen := g.gen
		g.timer = time.AfterFunc(until, func() { g.expire(gen) })
	} else {
		g.expireLocked()
	}
	g.lowWater.Store(1) // a stripe of the allowance running out wakes the loop

	iv := g.spec.interval
	period := iv - time.Since(sent)
	if allowance > 0 && until < period {
		period = until // a new allowance as this one ends (its window's end)
	}
	period = max(period, time.Millisecond)
	gap := iv / 4
	if allowance == 0 {
		gap = max(gap, resp.GetRetryAfter().AsDuration())
	}
	return grantWait{gap: min(gap, period), period: period}
}

// releaseSync stops local decisions and sends the final report: the units
// admitted since the last one are charged and the record ends.
func (g *grantState) releaseSync() {
	m := g.m
	g.mu.Lock()
	g.stopLocked()
	if g.started.IsZero() {
		g.mu.Unlock()
		return
	}
	req, doubt := g.releaseRequestLocked()
	g.mu.Unlock()
	// (A report of this seq that failed was applied: nothing to count.)
	_, err := m.sendRelease(req, doubt, func(*quoratev1.GrantResponse) {})
	used := req.GetUsed()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq = req.GetSeq()
	if err == nil {
		m.released.Add(1)
		if used > g.reported {
			m.unitsReported.Add(uint64(used - g.reported))
			g.reported = used
		}
	} else {
		m.src.logger.Debug("sync release", "policy", g.key.policy, "error", err)
	}
	g.seq++
	g.seqSent = time.Time{}
	g.started = time.Time{}
}
