package fsm

import (
	"github.com/quorate/quorate/admission"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// applySyncGrant serves a Grant call of a policy in local.mode sync
// (DESIGN.md, "Budget leases", local-plus-global): it charges what the
// holder reports admitting since its last call (delta, spent from the key
// even past its limit: it already happened), then gives the holder its
// allowance until its next report, sized from its share of the key's
// demand so that the live allowances of a key never add up to more than
// Policy.SyncBound. g is the holder's record (exists: stored, maybe
// expired); the call's seq and used were checked.
func (d *dataState) applySyncGrant(c *raftcmdv1.Grant, id string, g grant, exists bool, pv PolicyVersion, delta, now int64) interface{} {
	p := pv.Policy
	live := exists && g.expiresAt > now
	bk := BucketKey(c.GetPolicy(), c.GetKey())
	st, _ := d.buckets.Get(bk)
	next, over := d.chargeSync(p, st, delta, now)
	if delta > 0 {
		var states pendingStates
		states.set(bk, next)
		if err := d.makeRoom(&states, now); err != nil {
			return err
		}
	}
	othersAlloc, othersDemand, holders := d.syncOthers(c.GetPolicy(), c.GetKey(), id, now)
	demand := min(c.GetDemandMilli(), maxDemandMilli)
	dm, bound := max(demand, 1), p.SyncBound()
	availAfter := admission.Peek(p, next, now).Remaining
	allowance := max(0, min(c.GetWant(), fairShare(bound, dm, othersDemand+dm), bound-othersAlloc, availAfter))
	// Everything below changes state: nothing may fail from here on.
	d.syncOvershoot += over
	if delta > 0 {
		d.buckets.Put(bk, next, admission.ExpiresAt(p, next))
	}
	if exists && !live {
		d.endGrant(id, g, now)
	}
	dec := keyDecision(p, next, now, allowance > 0, allowance > 0)
	store := live || holders < MaxGrantsPerKey && d.roomForGrant(now)
	if !store {
		// No room for a record: the charge stands, no allowance is given.
		dec = keyDecision(p, next, now, false, false)
		return &GrantResult{Used: c.GetUsed(), DecidedAt: now, Decision: dec, PolicyVersion: pv.Version,
			ShareMicro: shareMicro(dm, othersDemand+dm)}
	}
	if !live {
		g = grant{sync: true, policy: c.GetPolicy(), key: c.GetKey(), caller: c.GetCaller(), holder: c.GetHolder(), startedAt: now}
	}
	g.seq, g.demand, g.used, g.total = c.GetSeq(), demand, c.GetUsed(), allowance
	g.expiresAt = p.SyncExpiry(now)
	g.lastAdded, g.lastDecidedAt, g.lastRemaining, g.lastPolicyVersion = allowance, now, dec.Remaining, pv.Version
	d.grants.put(id, g)
	return &GrantResult{Total: allowance, Added: allowance, Used: g.used, StartedAt: g.startedAt, ExpiresAt: g.expiresAt,
		DecidedAt: now, Decision: dec, PolicyVersion: pv.Version, ShareMicro: shareMicro(dm, othersDemand+dm)}
}

// roomForGrant reports whether the group can store one more grant,
// sweeping expired ones first when it is at MaxGrants.
func (d *dataState) roomForGrant(now int64) bool {
	if n := d.grants.len(); n >= MaxGrants {
		d.grants.sweep(now, n-MaxGrants+1)
	}
	return d.grants.len() < MaxGrants
}

// chargeSync charges delta units already admitted to state st of p at now
// (admission.Charge) and returns the new state and the overshoot: the
// units beyond what the key had left.
func (d *dataState) chargeSync(p admission.Policy, st admission.State, delta, now int64) (admission.State, int64) {
	if delta <= 0 {
		return st, 0
	}
	avail := admission.Peek(p, st, now).Remaining
	return admission.Charge(p, st, delta, now), max(0, delta-avail)
}

// syncOthers sums over the live sync allowances of (policy, key) other
// than id: their allowances and demands, and counts the key's other
// records of any kind (for MaxGrantsPerKey).
func (d *dataState) syncOthers(policy, key, id string, now int64) (alloc, demand int64, holders int) {
	a := d.grants.agg(policy, key)
	if a == nil {
		return 0, 0, 0
	}
	for _, oid := range a.ids {
		if oid == id {
			continue
		}
		holders++
		if o, ok := d.grants.get(oid); ok && o.sync && o.expiresAt > now {
			alloc += o.total
			demand += o.demand
		}
	}
	return alloc, demand, holders
}

// releaseSync ends the holder's sync allowance id (g when live): what the
// holder reports admitting since its last call is charged (all of used
// when no allowance is live), the record goes, and nothing comes back.
func (d *dataState) releaseSync(c *raftcmdv1.Grant, id string, g grant, exists, live bool, pv PolicyVersion, now int64) interface{} {
	p := pv.Policy
	delta := c.GetUsed()
	if live {
		delta -= g.used
	}
	bk := BucketKey(c.GetPolicy(), c.GetKey())
	st, _ := d.buckets.Get(bk)
	next, over := d.chargeSync(p, st, delta, now)
	if delta > 0 {
		var states pendingStates
		states.set(bk, next)
		if err := d.makeRoom(&states, now); err != nil {
			return err
		}
		d.syncOvershoot += over
		d.buckets.Put(bk, next, admission.ExpiresAt(p, next))
	}
	res := &GrantResult{Used: c.GetUsed(), DecidedAt: now, Decision: keyDecision(p, next, now, false, false), PolicyVersion: pv.Version}
	switch {
	case live:
		d.grants.remove(id)
		res.Total, res.StartedAt, res.ExpiresAt = g.total, g.startedAt, now
	case exists:
		d.endGrant(id, g, now)
	}
	return res
}

// endMismatched ends the live record g of a holder whose policy changed
// local mode: a reserve grant goes without refund (its unspent units are
// waste), a sync allowance is charged what the call reports admitting
// (used). It fails, changing nothing, when the charge needs a bucket the
// group has no room for.
func (d *dataState) endMismatched(id string, g grant, pv PolicyVersion, used, now int64) error {
	if !g.sync {
		g.used = used // checked: what the holder spent of it is not waste
		d.endGrant(id, g, now)
		return nil
	}
	if delta := used - g.used; delta > 0 {
		bk := BucketKey(g.policy, g.key)
		st, _ := d.buckets.Get(bk)
		next, over := d.chargeSync(pv.Policy, st, delta, now)
		var states pendingStates
		states.set(bk, next)
		if err := d.makeRoom(&states, now); err != nil {
			return err
		}
		d.syncOvershoot += over
		d.buckets.Put(bk, next, admission.ExpiresAt(pv.Policy, next))
	}
	d.grants.remove(id)
	return nil
}

// SyncStats returns the units local-plus-global holders of this group
// reported admitting beyond what their key had left when charged, as this
// replica saw since it started (not replicated state: it decides nothing).
// Each key's overshoot is bounded per window by its policy's SyncBound.
func (f *FSM) SyncStats() (overshoot int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.data.syncOvershoot
}
