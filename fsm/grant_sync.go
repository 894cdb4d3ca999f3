package fsm

import (
	"github.com/quorate/quorate/admission"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// applySyncGrant serves a Grant call of a policy in local.mode sync
// (DESIGN.md, "Budget leases", local-plus-global). For a live record it
// charges what the holder reports admitting since its last call (used −
// the recorded used, spent from the key even past its limit: it already
// happened); an expired record is charged its whole allowance instead
// (chargeExpired) and the call's used is ignored, as it belongs to that
// record. Then it gives the holder its allowance until its next report,
// sized from its share of the key's demand (bounded by what it was seen
// admitting, observeSpend) so that the allowances of a key's sync records
// never add up to more than Policy.SyncBound. A new record beyond
// MaxGrantsPerCaller or MaxGrantsPerKey is refused before anything is
// charged (an expired record stays, to be charged by the sweep). g is the
// holder's record (exists: stored, maybe expired) of the policy's mode;
// the call's seq and used were checked.
func (d *dataState) applySyncGrant(c *raftcmdv1.Grant, id string, g grant, exists bool, pv PolicyVersion, now int64) interface{} {
	p := pv.Policy
	live := exists && g.expiresAt > now
	if !live {
		holders := 0
		if a := d.grants.agg(c.GetPolicy(), c.GetKey()); a != nil {
			holders = len(a.ids)
		}
		if exists {
			holders--
		}
		if err := d.roomForHolder(c, exists, holders); err != nil {
			return err
		}
	}
	bk := BucketKey(c.GetPolicy(), c.GetKey())
	st, _ := d.buckets.Get(bk)
	next, over, charged := st, int64(0), false
	switch {
	case live && c.GetUsed() > g.used:
		next, over = d.chargeSync(p, st, c.GetUsed()-g.used, now)
		charged = true
	case exists && !live && g.total > 0:
		next, charged = admission.Charge(p, st, g.total, now), true
	}
	if charged {
		var states pendingStates
		states.set(bk, next)
		if err := d.makeRoom(&states, now); err != nil {
			return err
		}
	}
	if exists && !live {
		d.grants.remove(id) // before summing the others: it is not one
		d.wastedUnits += g.total
	}
	if !live {
		g = grant{sync: true, policy: c.GetPolicy(), key: c.GetKey(), caller: c.GetCaller(), holder: c.GetHolder(), startedAt: now}
	}
	g = observeSpend(g, !live, c.GetUsed(), c.GetDemandMilli(), now)
	othersAlloc, othersDemand, _ := d.syncOthers(c.GetPolicy(), c.GetKey(), id)
	dm, bound := max(g.demand, 1), p.SyncBound()
	availAfter := admission.Peek(p, next, now).Remaining
	allowance := max(0, min(c.GetWant(), fairShare(bound, dm, othersDemand+dm), bound-othersAlloc, availAfter))
	d.syncOvershoot += over
	if charged {
		d.buckets.Put(bk, next, admission.ExpiresAt(p, next))
	}
	dec := keyDecision(p, next, now, allowance > 0, allowance > 0)
	if !live && !d.roomForGrant(now) {
		// No room for a record in the group: no allowance is given (what
		// was charged stays charged).
		return &GrantResult{Used: c.GetUsed(), DecidedAt: now, Decision: keyDecision(p, next, now, false, false),
			PolicyVersion: pv.Version, ShareMicro: shareMicro(dm, othersDemand+dm), DemandMilli: g.demand}
	}
	g.seq, g.used, g.total = c.GetSeq(), c.GetUsed(), allowance
	g.expiresAt = p.SyncExpiry(now)
	g.lastAdded, g.lastDecidedAt, g.lastRemaining, g.lastPolicyVersion = allowance, now, dec.Remaining, pv.Version
	d.grants.put(id, g)
	return &GrantResult{Total: allowance, Added: allowance, Used: g.used, StartedAt: g.startedAt, ExpiresAt: g.expiresAt,
		DecidedAt: now, Decision: dec, PolicyVersion: pv.Version, ShareMicro: shareMicro(dm, othersDemand+dm), DemandMilli: g.demand}
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

// chargeExpired charges the whole allowance of sync record g, deleted
// unreleased at now (expired, or ended by a mode change): its holder may
// have admitted all of it and will never report it (a late report of an
// expired record is ignored). What it did not admit is waste, bounded by
// the allowance. Without room for a new bucket, nothing is charged.
func (d *dataState) chargeExpired(g grant, now int64) {
	pv, ok := d.policies.byName[g.policy]
	if !ok || g.total <= 0 {
		return
	}
	bk := BucketKey(g.policy, g.key)
	st, has := d.buckets.Get(bk)
	if !has && d.buckets.Len() >= d.maxStates {
		return
	}
	if next := admission.Charge(pv.Policy, st, g.total, now); next.Kind != admission.KindNone {
		d.buckets.Put(bk, next, admission.ExpiresAt(pv.Policy, next))
		d.wastedUnits += g.total
	}
}

// syncOthers sums over the sync records of (policy, key) other than id,
// expired ones not yet deleted included (their holders may have admitted
// their allowances, not charged yet): their allowances and demands; and
// counts the key's other records of any kind (for MaxGrantsPerKey).
func (d *dataState) syncOthers(policy, key, id string) (alloc, demand int64, holders int) {
	a := d.grants.agg(policy, key)
	if a == nil {
		return 0, 0, 0
	}
	for _, oid := range a.ids {
		if oid == id {
			continue
		}
		holders++
		if o, ok := d.grants.get(oid); ok && o.sync {
			alloc += o.total
			demand += o.demand
		}
	}
	return alloc, demand, holders
}

// releaseSync ends the holder's sync allowance id: what the holder reports
// admitting since its last call is charged, the record goes, and nothing
// comes back. A release of an expired record charges its allowance whole
// (chargeExpired); of no record, nothing.
func (d *dataState) releaseSync(c *raftcmdv1.Grant, id string, g grant, exists, live bool, pv PolicyVersion, now int64) interface{} {
	p := pv.Policy
	bk := BucketKey(c.GetPolicy(), c.GetKey())
	st, _ := d.buckets.Get(bk)
	if !live {
		if exists {
			d.endGrant(id, g, now)
			st, _ = d.buckets.Get(bk)
		}
		return &GrantResult{DecidedAt: now, Decision: keyDecision(p, st, now, false, false), PolicyVersion: pv.Version}
	}
	next, over := d.chargeSync(p, st, c.GetUsed()-g.used, now)
	if c.GetUsed() > g.used {
		var states pendingStates
		states.set(bk, next)
		if err := d.makeRoom(&states, now); err != nil {
			return err
		}
		d.syncOvershoot += over
		d.buckets.Put(bk, next, admission.ExpiresAt(p, next))
	}
	d.grants.remove(id)
	return &GrantResult{Total: g.total, Used: c.GetUsed(), StartedAt: g.startedAt, ExpiresAt: now, DecidedAt: now,
		Decision: keyDecision(p, next, now, false, false), PolicyVersion: pv.Version}
}

// endMismatched ends the record g (live or not) of a holder whose policy
// changed local mode: a reserve grant goes without refund (its unspent
// units are waste); a live sync allowance is charged what the call reports
// admitting (used), an expired one its whole allowance. It fails, changing
// nothing, when the charge needs a bucket the group has no room for.
func (d *dataState) endMismatched(id string, g grant, live bool, pv PolicyVersion, used, now int64) error {
	if !g.sync {
		if live {
			g.used = used // checked: what the holder spent of it is not waste
		}
		d.endGrant(id, g, now)
		return nil
	}
	delta := used - g.used
	if !live {
		delta = g.total
	}
	if delta > 0 {
		bk := BucketKey(g.policy, g.key)
		st, _ := d.buckets.Get(bk)
		next, over := d.chargeSync(pv.Policy, st, delta, now)
		var states pendingStates
		states.set(bk, next)
		if err := d.makeRoom(&states, now); err != nil {
			return err
		}
		if live {
			d.syncOvershoot += over
		} else {
			d.wastedUnits += delta
		}
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
