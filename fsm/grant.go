package fsm

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/quorate/quorate/admission"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// Bounds of budget leases.
const (
	// MaxGrantsPerKey is the most holders one (policy, key) grants to at
	// once.
	MaxGrantsPerKey = 1024
	// MaxGrantsPerCaller is the most holders one caller holds grants of
	// one (policy, key) under: one caller cannot take a key's
	// MaxGrantsPerKey from the others, nor hold more than this many times
	// local.max_grant of it.
	MaxGrantsPerCaller = 128
	// MaxGrants is the most live grants of one group.
	MaxGrants = 1 << 20
	// MaxHolderBytes is the longest holder name.
	MaxHolderBytes = 64
	// maxDemandMilli caps a reported demand, so that the sum over a key's
	// MaxGrantsPerKey holders fits in an int64 (2^10 × 2^50).
	maxDemandMilli = 1 << 50
)

// GrantResult is the Apply result of a Grant.
type GrantResult struct {
	Total, Added, Used, Returned    int64              // Used: as recorded after the call
	StartedAt, ExpiresAt, DecidedAt int64              // unix nanos, log time
	Decision                        admission.Decision // the key after the call: Limit, Remaining, RetryAfter (when nothing was added and nothing is left)
	PolicyVersion                   uint64
	ShareMicro                      int64 // the holder's share of the key's demand × 1e6
	DemandMilli                     int64 // the demand counted for the holder (observeSpend)
	Duplicate                       bool
	// Window and Quota are those of the policy version decided with, at
	// DecidedAt (admission.Policy.Window and Policy.Limit), read from the
	// group's table when the result is made, as CheckResult's are; both
	// are zero when the call was refused before a decision.
	Window time.Duration
	Quota  int64
}

// GrantInfo describes one live grant, for status.
type GrantInfo struct {
	Sync                     bool // a local-plus-global allowance: Total is the allowance, Used what was reported admitted
	Holder, Caller           string
	Total, Used, DemandMilli int64
	StartedAt, ExpiresAt     int64
}

// applyGrant starts, tops up or releases a budget lease (DESIGN.md,
// "Budget leases"), its answer carrying the window and quota of the policy
// version it was decided with.
func (d *dataState) applyGrant(c *raftcmdv1.Grant, o op) interface{} {
	res := d.grant(c, o)
	if r, ok := res.(*GrantResult); ok {
		if pv, ok := d.policies.byName[c.GetPolicy()]; ok && pv.Version == r.PolicyVersion {
			r.Window, r.Quota = pv.Policy.Window(r.DecidedAt), pv.Policy.Limit
		}
	}
	return res
}

// grant is applyGrant's decision.
func (d *dataState) grant(c *raftcmdv1.Grant, o op) interface{} {
	now := o.now
	pv, ok := d.policies.byName[c.GetPolicy()]
	if !ok {
		return fmt.Errorf("%w %s", ErrUnknownPolicy, admission.Quote(c.GetPolicy()))
	}
	p := pv.Policy
	if err := checkGrant(c); err != nil {
		return err
	}
	id := grantID(c.GetPolicy(), c.GetKey(), c.GetCaller(), c.GetHolder())
	g, exists := d.grants.get(id)
	live := exists && g.expiresAt > now
	syncMode := p.Local.Mode == admission.LocalSync
	if p.Local.Mode == "" && !(live && c.GetRelease()) {
		return &admission.FieldError{Field: "policy", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("%s has no local decisions (local.mode %s or %s)", admission.Quote(c.GetPolicy()), admission.LocalGrant, admission.LocalSync)}
	}
	if live {
		switch seq := c.GetSeq(); {
		case seq == g.seq:
			return d.grantAnswer(p, g, now)
		case seq < g.seq:
			return fmt.Errorf("%w: seq %d, the grant is at seq %d", ErrGrantSeq, seq, g.seq)
		}
		if err := checkUsed(g, c.GetUsed()); err != nil {
			return err
		}
	}
	if !c.GetRelease() && c.GetWant() < 1 {
		return &admission.FieldError{Field: "want", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("must be at least 1 (got %d)", c.GetWant())}
	}
	if c.GetUsed() < 0 && (syncMode || live && g.sync) {
		return &admission.FieldError{Field: "used", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("must be at least 0 (got %d)", c.GetUsed())}
	}
	bk := BucketKey(c.GetPolicy(), c.GetKey())
	st, _ := d.buckets.Get(bk)
	switch {
	case c.GetRelease() && (live && g.sync || !live && syncMode):
		return d.releaseSync(c, id, g, exists, live, pv, now)
	case c.GetRelease():
		return d.releaseGrant(id, g, exists, live, pv, st, c.GetUsed(), now)
	case exists && g.sync != syncMode:
		// The policy changed mode: the old record ends (a grant-mode grant
		// without refund, as waste; a sync allowance charged what the call
		// reports, or whole once expired) and a new one starts in the
		// current mode. What the call reports belongs to the old record.
		if err := d.endMismatched(id, g, live, pv, c.GetUsed(), now); err != nil {
			return err
		}
		if syncMode {
			return d.applySyncGrant(c, id, grant{}, false, pv, now)
		}
		st, _ = d.buckets.Get(bk)
		g, exists, live = grant{}, false, false
	case syncMode:
		return d.applySyncGrant(c, id, g, exists, pv, now)
	}

	// Size the top-up. A new grant reports nothing used: what a call for a
	// grant that expired reports belongs to the old one.
	others, holders := int64(0), 0
	if a := d.grants.agg(c.GetPolicy(), c.GetKey()); a != nil {
		others, holders = a.demand, len(a.ids)
	}
	if exists {
		others -= g.reserveDemand()
		holders--
	}
	if !live {
		g = grant{policy: c.GetPolicy(), key: c.GetKey(), caller: c.GetCaller(), holder: c.GetHolder(), startedAt: now}
	} else {
		g.used = c.GetUsed()
	}
	g = observeSpend(g, !live, g.used, c.GetDemandMilli(), now)
	g.seq = c.GetSeq()
	dm := max(g.demand, 1)
	avail := admission.Peek(p, st, now).Remaining
	unspent := g.total - g.used
	topUp := max(0, min(c.GetWant()-unspent, p.Local.MaxGrant-unspent, fairShare(avail, dm, others+dm), avail))
	next := st
	if topUp > 0 {
		var dec admission.Decision
		if next, dec = admission.Decide(p, st, topUp, now); !dec.Allowed {
			next, topUp = st, 0
		}
	}
	if !live && topUp == 0 {
		// Nothing to hold: no grant is stored (an expired one goes).
		if exists {
			d.endGrant(id, g, now)
		}
		return &GrantResult{DecidedAt: now, Decision: keyDecision(p, st, now, false, false), PolicyVersion: pv.Version, DemandMilli: g.demand}
	}
	if !live {
		if err := d.roomForHolder(c, exists, holders); err != nil {
			return err
		}
		if n := d.grants.len(); !exists && n >= MaxGrants {
			d.grants.sweep(now, n-MaxGrants+1)
			if d.grants.len() >= MaxGrants {
				return fmt.Errorf("%w: a new grant of %s on key %s: the group holds %d grants, the most it holds",
					ErrTooManyGrants, admission.Quote(c.GetPolicy()), admission.Quote(c.GetKey()), MaxGrants)
			}
		}
	}
	if topUp > 0 {
		var states pendingStates
		states.set(bk, next)
		if err := d.makeRoom(&states, now); err != nil {
			return err
		}
	}
	if exists && !live {
		d.endGrant(id, g, now)
	}
	if topUp > 0 {
		g.carried = carry(p, next, g, unspent, now)
		g.lastTopUp = admission.SpendOf(p, next, topUp, now)
		g.total += topUp
		d.buckets.Put(bk, next, admission.ExpiresAt(p, next))
	}
	dec := keyDecision(p, next, now, g.total > g.used, topUp > 0)
	g.expiresAt = max(g.expiresAt, p.GrantExpiry(now))
	g.lastAdded, g.lastDecidedAt, g.lastRemaining, g.lastPolicyVersion = topUp, now, dec.Remaining, pv.Version
	d.grants.put(id, g)
	return &GrantResult{Total: g.total, Added: topUp, Used: g.used, StartedAt: g.startedAt, ExpiresAt: g.expiresAt,
		DecidedAt: now, Decision: dec, PolicyVersion: pv.Version, ShareMicro: shareMicro(dm, others+dm), DemandMilli: g.demand}
}

// roomForHolder refuses a new holder of c's (policy, key) beyond
// MaxGrantsPerCaller of its caller or MaxGrantsPerKey of the key, counting
// the key's holders other than c's own (holders; exists: c's holder has a
// record, expired).
func (d *dataState) roomForHolder(c *raftcmdv1.Grant, exists bool, holders int) error {
	mine := d.grants.callerGrants(c.GetPolicy(), c.GetKey(), c.GetCaller())
	if exists {
		mine--
	}
	if mine >= MaxGrantsPerCaller {
		return fmt.Errorf("%w: a new holder %s for caller %s: it already holds grants of %s on key %s under %d holders, "+
			"the most one caller may (one holder per process is enough: reuse it, or release the grants of holders that are gone)",
			ErrTooManyGrants, admission.Quote(c.GetHolder()), admission.Quote(c.GetCaller()), admission.Quote(c.GetPolicy()),
			admission.Quote(c.GetKey()), mine)
	}
	if holders >= MaxGrantsPerKey {
		return fmt.Errorf("%w: a new holder %s for caller %s: key %s of %s already grants to %d holders, the most one key grants to",
			ErrTooManyGrants, admission.Quote(c.GetHolder()), admission.Quote(c.GetCaller()), admission.Quote(c.GetKey()),
			admission.Quote(c.GetPolicy()), holders)
	}
	return nil
}

// checkGrant checks the fields of a Grant that need no state: key, holder
// and demand.
func checkGrant(c *raftcmdv1.Grant) error {
	if err := admission.CheckKeyCost(c.GetKey(), 1); err != nil {
		return err
	}
	switch h := c.GetHolder(); {
	case h == "":
		return &admission.FieldError{Field: "holder", Err: admission.ErrInvalidRequest, Reason: "must not be empty"}
	case len(h) > MaxHolderBytes:
		return &admission.FieldError{Field: "holder", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("must be at most %d bytes (got %d)", MaxHolderBytes, len(h))}
	}
	if c.GetDemandMilli() < 0 {
		return &admission.FieldError{Field: "demand_milli", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("must be at least 0 (got %d)", c.GetDemandMilli())}
	}
	return nil
}

// checkUsed checks the used a call reports for live grant g: for a reserve
// grant between the recorded used and the total, for a sync allowance at
// least the recorded used.
func checkUsed(g grant, u int64) error {
	switch {
	case g.sync && u < g.used:
		return &admission.FieldError{Field: "used", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("must be at least the recorded %d (got %d)", g.used, u)}
	case !g.sync && (u < g.used || u > g.total):
		return &admission.FieldError{Field: "used", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("must be between the recorded %d and the granted %d (got %d)", g.used, g.total, u)}
	}
	return nil
}

// releaseGrant ends grant id, giving back what the holder did not use:
// total − used, as the last top-up's spend (admission.Refund). A release of
// no live grant answers with nothing returned.
func (d *dataState) releaseGrant(id string, g grant, exists, live bool, pv PolicyVersion, st admission.State, used, now int64) interface{} {
	p := pv.Policy
	if !live {
		if exists {
			d.endGrant(id, g, now)
		}
		return &GrantResult{DecidedAt: now, Decision: keyDecision(p, st, now, false, false), PolicyVersion: pv.Version}
	}
	g.used = used
	returned := g.total - g.used
	bk := BucketKey(g.policy, g.key)
	if _, ok := d.buckets.Get(bk); ok && returned > 0 {
		// The last top-up's units come back first (the latest of the
		// schedule), then the carried ones, each from where it lies.
		last := min(returned, g.lastTopUp.Cost)
		st = admission.Refund(p, st, withCost(g.lastTopUp, last), now)
		st = admission.Refund(p, st, withCost(g.carried, min(returned-last, g.carried.Cost)), now)
		d.buckets.Put(bk, st, admission.ExpiresAt(p, st))
	}
	d.grants.remove(id)
	return &GrantResult{Total: g.total, Used: g.used, Returned: returned, StartedAt: g.startedAt, ExpiresAt: now,
		DecidedAt: now, Decision: keyDecision(p, st, now, false, false), PolicyVersion: pv.Version}
}

// grantAnswer is the answer a retry of grant g's last call gets.
func (d *dataState) grantAnswer(p admission.Policy, g grant, now int64) *GrantResult {
	st, _ := d.buckets.Get(BucketKey(g.policy, g.key))
	dec := keyDecision(p, st, now, g.total > g.used || g.lastAdded > 0, g.lastAdded > 0)
	dec.Remaining = g.lastRemaining
	dm, sum := max(g.demand, 1), int64(0)
	if g.sync {
		_, sum, _ = d.syncOthers(g.policy, g.key, grantID(g.policy, g.key, g.caller, g.holder))
	} else if a := d.grants.agg(g.policy, g.key); a != nil {
		sum = a.demand - g.demand
	}
	return &GrantResult{Total: g.total, Added: g.lastAdded, Used: g.used, StartedAt: g.startedAt, ExpiresAt: g.expiresAt,
		DecidedAt: g.lastDecidedAt, Decision: dec, PolicyVersion: g.lastPolicyVersion, ShareMicro: shareMicro(dm, sum+dm),
		DemandMilli: g.demand, Duplicate: true}
}

// keyDecision describes the key's state st at now: Limit, Remaining,
// Allowed when the holder holds units (holds) and, unless the call added
// some (added), RetryAfter: when the key has a unit again, the time to ask.
func keyDecision(p admission.Policy, st admission.State, now int64, holds, added bool) admission.Decision {
	dec := admission.Peek(p, st, now)
	dec.Allowed = holds
	if added {
		dec.RetryAfter = 0
	}
	return dec
}

// endGrant deletes an expired grant: its unspent units are not given back
// (the holder may have spent them) and count as waste; an expired sync
// allowance is charged whole (expireGrant).
func (d *dataState) endGrant(id string, g grant, now int64) {
	d.grants.remove(id)
	d.expireGrant(g, now)
}

// expireGrant ends grant g, deleted unreleased at now: a reserve grant's
// unspent units are waste; a sync allowance is charged (chargeExpired).
func (d *dataState) expireGrant(g grant, now int64) {
	if g.sync {
		d.chargeExpired(g, now)
		return
	}
	d.wasteGrant(g)
}

// wasteGrant counts what grant g, gone without a release, did not report
// spent (nothing for a sync allowance: nothing was spent ahead).
func (d *dataState) wasteGrant(g grant) { d.wastedUnits += max(0, g.unspent()) }

// fairShare is ceil(avail × d / sum) in 128-bit arithmetic (d ≤ sum).
func fairShare(avail, d, sum int64) int64 {
	if avail <= 0 || sum <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(avail), uint64(d))
	q, r := bits.Div64(hi, lo, uint64(sum)) // hi < sum: the quotient is at most avail
	if r != 0 {
		q++
	}
	return int64(q)
}

// shareMicro is d / sum × 1e6.
func shareMicro(d, sum int64) int64 {
	if sum <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(d), 1_000_000)
	q, _ := bits.Div64(hi, lo, uint64(sum))
	return int64(q)
}

// GrantsOf returns the live grants of (policy, key), by caller then
// holder, as of the last applied entry.
func (f *FSM) GrantsOf(policy, key string) []GrantInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a := f.data.grants.agg(policy, key)
	if a == nil {
		return nil
	}
	out := make([]GrantInfo, 0, len(a.ids))
	for _, id := range a.ids {
		if g, ok := f.data.grants.get(id); ok && g.expiresAt > f.lastNow {
			out = append(out, GrantInfo{Sync: g.sync, Holder: g.holder, Caller: g.caller, Total: g.total, Used: g.used,
				DemandMilli: g.demand, StartedAt: g.startedAt, ExpiresAt: g.expiresAt})
		}
	}
	slices.SortFunc(out, func(x, y GrantInfo) int {
		if c := strings.Compare(x.Caller, y.Caller); c != 0 {
			return c
		}
		return strings.Compare(x.Holder, y.Holder)
	})
	return out
}

// GrantStats returns the group's grants held (expired ones not yet swept
// included), the units they hold unspent, and the units this replica saw
// wasted since it started: granted but neither reported spent nor given
// back, when a grant expired or its slot left the group (not replicated
// state: it decides nothing).
func (f *FSM) GrantStats() (live int, units int64, wasted int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.data.grants.len(), f.data.grants.units, f.data.wastedUnits
}

// carry is what of g's units, at most unspent, a release can still give
// back once a new top-up is the last: those of its last top-up and of its
// carried units that the key's state st still holds ahead of now
// (admission.Refundable; a token bucket's schedule keeps only those, the
// rest rolled out), as one spend placed no later than any of them lies —
// where the carried ones were, else where the last top-up was. Units
// placed earlier than they lie roll out of the count earlier than they do
// out of the schedule, so a release gives back no more than they hold.
func carry(p admission.Policy, st admission.State, g grant, unspent, now int64) admission.Spend {
	old := admission.Refundable(p, st, g.carried, now)
	last := admission.Refundable(p, st, g.lastTopUp, now)
	n := min(unspent, old+last)
	switch {
	case n <= 0:
		return admission.Spend{}
	case old > 0:
		return withCost(g.carried, n)
	default:
		return withCost(g.lastTopUp, n)
	}
}

// withCost is sp with cost units (none: the zero Spend).
func withCost(sp admission.Spend, cost int64) admission.Spend {
	if cost <= 0 {
		return admission.Spend{}
	}
	sp.Cost = cost
	return sp
}
