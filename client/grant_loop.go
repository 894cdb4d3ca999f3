package client

import (
	"context"
	"math"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// A grant's loop: it acquires the grant, renews it when the unspent units
// fall under a quarter of the last grant (a local decision wakes it) or at
// half its local lifetime, releases it when the key was not used for a
// ttl or Close begins, and then ends (the state stays, idle, for the key's
// next request to start a loop again).

// grantWait is what the loop waits for after a call: no renewal before gap
// (a kick waits), one at the latest after period.
type grantWait struct {
	gap, period time.Duration
	end         bool // the loop ends (the grant was refused or dropped)
}

func (g *grantState) loop() {
	m := g.m
	defer m.wg.Done()
	g.kicked.Store(false)
	select {
	case <-g.kick:
	default:
	}
	g.mu.Lock()
	g.activeAt = time.Now()
	g.mu.Unlock()
	failures := 0
	for {
		if m.closing() {
			g.release()
			g.stopped()
			return
		}
		w := g.renew(&failures)
		if w.end {
			g.stopped()
			return
		}
		kicked, closing := g.wait(w)
		if closing {
			continue
		}
		if !kicked && g.idle() {
			g.release()
			g.stopped()
			return
		}
	}
}

// stopped marks g as served by no loop.
func (g *grantState) stopped() {
	g.mu.Lock()
	g.running = false
	g.mu.Unlock()
}

// wait waits for w: a kick after w.gap, or w.period. closing: Close began.
func (g *grantState) wait(w grantWait) (kicked, closing bool) {
	done := g.m.renewCtx.Done()
	if w.gap > 0 {
		t := time.NewTimer(w.gap)
		select {
		case <-done:
			t.Stop()
			return false, true
		case <-t.C:
		}
	}
	t := time.NewTimer(max(w.period-w.gap, 0))
	defer t.Stop()
	select {
	case <-done:
		return false, true
	case <-g.kick:
		g.kicked.Store(false)
		return true, false
	case <-t.C:
		return false, false
	}
}

// idle reports whether the key saw no request since the loop last looked,
// a ttl or more ago.
func (g *grantState) idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	spent, strict := g.spentBefore+g.base-g.avail.sum(), g.strict.Load()
	now := time.Now()
	if spent != g.idleSpent || strict != g.idleStrict {
		g.idleSpent, g.idleStrict, g.activeAt = spent, strict, now
		return false
	}
	return now.Sub(g.activeAt) >= g.idleAfter()
}

// idleAfter is how long a key goes unused before its grant is released: a
// ttl, or in sync mode two sync intervals.
func (g *grantState) idleAfter() time.Duration {
	if g.spec.sync {
		return 2 * g.spec.interval
	}
	return g.spec.ttl
}

// renew makes one Grant call (a new grant or a renewal) and applies its
// answer.
func (g *grantState) renew(failures *int) grantWait {
	m := g.m
	sent := time.Now()
	g.mu.Lock()
	used := g.base - g.avail.sum()
	g.sample(sent, g.spentBefore+used, g.strict.Load())
	seq := g.seq
	if g.seqSent.IsZero() {
		g.seqSent, g.seqUsed = sent, used
	} else if g.spec.sync {
		// A retry of seq reports what its first send did: a duplicate's
		// allowance counts from that used.
		used = g.seqUsed
	}
	first := g.seqSent
	req := &quoratev1.GrantRequest{Policy: g.key.policy, Key: g.key.key, Holder: m.holder, Caller: m.src.caller,
		Seq: seq, Want: g.want(), Used: used, Demand: g.demand}
	g.mu.Unlock()
	// Not cut when Close begins: a call abandoned in flight could reach
	// the server after the release and begin a grant nobody holds.
	ctx, cancel := context.WithTimeout(m.ctx, m.src.timeout)
	resp, err := m.src.send(ctx, req)
	cancel()
	if err != nil {
		return g.failed(err, seq, failures)
	}
	*failures = 0
	g.mu.Lock()
	defer g.mu.Unlock()
	// The local deadline counts from the first send of seq: the answer may
	// be the recorded one of an earlier attempt (duplicate).
	return g.apply(resp, first, used)
}

// sample updates the demand estimate: units spent locally and requests
// decided strictly per second since the last call, averaged over the recent
// renewal periods (EWMA, half weight to the last).
func (g *grantState) sample(now time.Time, spent, strict int64) {
	if !g.sampleAt.IsZero() {
		if dt := now.Sub(g.sampleAt).Seconds(); dt > 0 {
			r := float64(spent-g.sampleSpent+strict-g.sampleStrict) / dt
			if g.demand == 0 {
				g.demand = r
			} else {
				g.demand = (g.demand + r) / 2
			}
		}
	}
	g.sampleAt, g.sampleSpent, g.sampleStrict = now, spent, strict
}

// want is what to hold unspent after a call: enough for two half-ttl
// renewal periods at the estimated demand, 1 to max_grant. A window
// policy's grant ends with its window, whatever a renewal asks: it wants
// no more than the demand until its local deadline, so that little is
// left unspent when the window ends; g.mu is held.
func (g *grantState) want() int64 {
	if g.spec.sync {
		return g.wantSync()
	}
	horizon := g.spec.ttl
	if left := time.Until(g.deadline); g.window.Load() > 0 && left > 0 {
		horizon = min(horizon, left)
	}
	w := math.Ceil(g.demand * horizon.Seconds())
	if w >= float64(g.spec.maxGrant) {
		return g.spec.maxGrant
	}
	return max(1, int64(w))
}

// apply takes in an answer to a call first sent at sent reporting used;
// g.mu is held.
func (g *grantState) apply(resp *quoratev1.GrantResponse, sent time.Time, used int64) grantWait {
	if g.spec.sync {
		return g.applySync(resp, sent, used)
	}
	m := g.m
	started := resp.GetStartedAt().AsTime()
	if !started.Equal(g.started) {
		// A new grant: whatever the old one left unspent ended with it.
		g.dropLocked()
		g.started = started
		m.acquired.Add(1)
	} else {
		m.renewed.Add(1)
	}
	g.seq++
	g.seqSent = time.Time{}
	m.unitsGranted.Add(uint64(max(resp.GetAdded(), 0)))
	g.answered(resp, resp.GetRemaining())

	// The units the answer says are unspent, minus those spent since the
	// call was sent, are what this client may spend: total - used now.
	delta := max(resp.GetTotal()-g.base, 0)
	lifetime := resp.GetExpiresAt().AsTime().Sub(resp.GetDecidedAt().AsTime())
	margin := min(lifetime/10, 100*time.Millisecond)
	g.deadline = sent.Add(lifetime - margin)
	until := time.Until(g.deadline)
	g.gen++
	if g.timer != nil {
		g.timer.Stop()
	}
	g.granting(resp.GetDecidedAt().AsTime()) // before the units are added
	g.base += delta
	// Units the local deadline voided (counted wasted) that this answer
	// shows still granted count as granted again.
	m.unitsGranted.Add(uint64(g.voided))
	g.voided = 0
	if until > 0 {
		g.avail.add(delta)
		gen := g.gen
		g.timer = time.AfterFunc(until, func() { g.expire(gen) })
	} else {
		g.expireLocked()
	}
	unspent := resp.GetTotal() - used
	g.setLowWater((unspent + 3) / 4)

	w := grantWait{period: max(lifetime/2-time.Since(sent), time.Millisecond)}
	if resp.GetAdded() == 0 {
		// Nothing to spare (or the share is held): no renewal at once.
		w.gap = min(max(resp.GetRetryAfter().AsDuration(), 10*time.Millisecond), w.period)
	}
	return w
}

// answered stores what local decisions report from an answer; base is
// what keyUnits adds the stripe's units to (g.mu is held).
func (g *grantState) answered(resp *quoratev1.GrantResponse, base int64) {
	g.limit.Store(resp.GetLimit())
	g.window.Store(int64(resp.GetWindow().AsDuration()))
	g.quota.Store(resp.GetQuota())
	g.resetAfter.Store(int64(resp.GetResetAfter().AsDuration()))
	g.keyBase.Store(base)
	g.version.Store(resp.GetPolicyVersion())
}

// expire ends local spending at the local deadline of the answer of
// generation gen.
func (g *grantState) expire(gen uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gen == g.gen {
		g.expireLocked()
	}
}

// expireLocked stops local spending: the unspent units are voided and
// counted wasted (granted again if the next answer shows the grant alive);
// g.mu is held.
func (g *grantState) expireLocked() {
	a := g.avail.drain()
	g.base -= a
	if g.spec.sync {
		return // an allowance is not spent ahead: nothing is lost
	}
	g.voided += a
	g.m.unitsLost.Add(uint64(a))
}

// dropLocked forgets the grant held: its unspent units are wasted; g.mu is
// held.
func (g *grantState) dropLocked() {
	a := g.stopLocked()
	if !g.spec.sync {
		// (In sync mode used keeps running: the next record takes it as
		// its baseline.)
		g.m.unitsLost.Add(uint64(a))
		g.spentBefore += g.base
		g.base, g.voided = 0, 0
	}
	g.started = time.Time{}
}

// failed handles a failed call of seq.
func (g *grantState) failed(err error, seq uint64, failures *int) grantWait {
	m := g.m
	switch connect.CodeOf(err) {
	case connect.CodeFailedPrecondition:
		if seq > 0 {
			// Our seq is behind the grant's record: start a new grant.
			g.mu.Lock()
			g.dropLocked()
			g.seq, g.seqSent = 0, time.Time{}
			g.mu.Unlock()
			return grantWait{period: 0}
		}
		fallthrough
	case connect.CodeUnimplemented, connect.CodeInvalidArgument, connect.CodeNotFound,
		connect.CodePermissionDenied, connect.CodeUnauthenticated:
		// This policy gets no grants here (not built, not in grant mode,
		// not allowed): strict decisions for a while.
		m.src.logger.Debug("grant refused", "policy", g.key.policy, "error", err)
		m.refuse(g.key.policy)
		g.mu.Lock()
		g.dropLocked()
		g.mu.Unlock()
		return grantWait{end: true}
	}
	// No answer: the same seq again later (a retry of a call that was
	// applied gets its answer); the local deadline voids the units meanwhile.
	m.src.logger.Debug("grant", "policy", g.key.policy, "seq", seq, "error", err)
	*failures++
	d := min(50*time.Millisecond<<min(*failures, 8), g.spec.ttl/2)
	if g.spec.sync {
		d = min(d, g.spec.interval/2)
	}
	return grantWait{gap: d, period: d}
}

// release stops local spending and gives the grant back: total - used
// return to the key.
func (g *grantState) release() {
	if g.spec.sync {
		g.releaseSync()
		return
	}
	m := g.m
	g.mu.Lock()
	if g.started.IsZero() {
		g.dropLocked()
		g.mu.Unlock()
		return
	}
	a := g.stopLocked()
	req, doubt := g.releaseRequestLocked()
	g.mu.Unlock()
	resp, err := m.sendRelease(req, doubt, func(dup *quoratev1.GrantResponse) {
		// A renewal that was applied: its units were granted.
		m.unitsGranted.Add(uint64(max(dup.GetAdded(), 0)))
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	used := req.GetUsed()
	g.seq = req.GetSeq()
	if err == nil {
		// a were held; the voided units are counted wasted already: those
		// given back beyond a count as granted again, a shortfall as waste.
		r := max(resp.GetReturned(), 0)
		m.released.Add(1)
		m.unitsReturned.Add(uint64(r))
		if r >= a {
			m.unitsGranted.Add(uint64(r - a))
		} else {
			m.unitsLost.Add(uint64(a - r))
		}
	} else {
		m.src.logger.Debug("grant release", "policy", g.key.policy, "error", err)
		m.unitsLost.Add(uint64(a))
	}
	g.seq++
	g.seqSent = time.Time{}
	g.spentBefore += used
	g.base, g.voided = 0, 0
	g.started = time.Time{}
}

// stopLocked stops local spending: the unspent units are taken back (and
// returned) and the expiry timers of earlier answers do nothing; g.mu is
// held.
func (g *grantState) stopLocked() int64 {
	a := g.avail.drain()
	g.base -= a
	g.gen++
	if g.timer != nil {
		g.timer.Stop()
	}
	return a
}

// releaseRequestLocked is the release of the grant held, reporting the
// units used; doubt says a call of its seq failed (and may have been
// applied); g.mu is held.
func (g *grantState) releaseRequestLocked() (req *quoratev1.GrantRequest, doubt bool) {
	m := g.m
	return &quoratev1.GrantRequest{Policy: g.key.policy, Key: g.key.key, Holder: m.holder, Caller: m.src.caller,
		Seq: g.seq, Used: g.base, Demand: g.demand, Release: true}, !g.seqSent.IsZero()
}

// sendRelease sends a release, waiting at most releaseTimeout. When the
// answer is the recorded one of an earlier call of its seq that failed
// (doubt), that call was applied: dup sees its answer and the release goes
// again with the next seq (req.Seq is then that seq).
func (m *grants) sendRelease(req *quoratev1.GrantRequest, doubt bool, dup func(*quoratev1.GrantResponse)) (*quoratev1.GrantResponse, error) {
	ctx, cancel := context.WithTimeout(m.ctx, m.releaseTimeout())
	defer cancel()
	resp, err := m.src.send(ctx, req)
	if err == nil && resp.GetDuplicate() && doubt {
		dup(resp)
		req.Seq++
		resp, err = m.src.send(ctx, req)
	}
	return resp, err
}
