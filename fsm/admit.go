package fsm

import (
	"fmt"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// check is one (policy, key, cost) of an Admit, resolved.
type check struct {
	policy  PolicyVersion
	key     string // state key: policy/key
	bareKey string // the request's key
	cost    int64
}

// pendingStates are the new states of a request's keys as its checks leave
// them, not stored yet: at most admission.MaxChecks, kept in place (on the stack of
// applyAdmit) rather than in a map.
type pendingStates struct {
	n      int
	keys   [admission.MaxChecks]string
	states [admission.MaxChecks]admission.State
}

// find is the index of key's state, or -1.
func (p *pendingStates) find(key string) int {
	for i := range p.n {
		if p.keys[i] == key {
			return i
		}
	}
	return -1
}

// get returns key's pending state, if any.
func (p *pendingStates) get(key string) (admission.State, bool) {
	if i := p.find(key); i >= 0 {
		return p.states[i], true
	}
	return admission.State{}, false
}

// set makes s key's pending state.
func (p *pendingStates) set(key string, s admission.State) {
	i := p.find(key)
	if i < 0 {
		i = p.n
		p.keys[i] = key
		p.n++
	}
	p.states[i] = s
}

// take returns key's state and forgets it.
func (p *pendingStates) take(key string) (admission.State, bool) {
	i := p.find(key)
	if i < 0 {
		return admission.State{}, false
	}
	s := p.states[i]
	p.n--
	p.keys[i], p.states[i] = p.keys[p.n], p.states[p.n]
	p.keys[p.n], p.states[p.n] = "", admission.State{}
	return s, true
}

// applyAdmit decides every check of c at o.now, all or none: either every
// check is admitted (or shadow-denied) and charged, or nothing changes and
// the result names the first check that denied. With a request ID, a repeat
// gets the recorded result and the decision is recorded before anything is
// spent.
func (d *dataState) applyAdmit(c *raftcmdv1.Admit, o op) interface{} {
	now := o.now
	var dk dedupe.Key
	var fp [16]byte
	recorded := c.GetRequestId() != "" && !plantedBug
	if recorded {
		dk, fp = dedupe.Key{Caller: c.GetCaller(), RequestID: c.GetRequestId()}, admitFingerprint(c)
		if e, ok := d.dedupe.Get(dk, now); ok {
			res := recordedAdmit(e, fp)
			if r, ok := res.(*AdmitResult); ok {
				d.policies.windows(r)
			}
			return res
		}
	}
	var buf [admission.MaxChecks]check
	checks, err := d.resolveChecks(c, o.slot, buf[:0])
	if err != nil {
		return err
	}

	// Pacing: while the only denials are token buckets that would conform
	// within max_wait, move the whole request to the earliest slot where
	// every check conforms, and decide every check at that slot (deciding
	// some checks now and others later would let their buckets refill in
	// between).
	at := now
	var scratch pendingStates // states as this request leaves them
	res := d.decideChecks(checks, now, at, &scratch)
	for range checks {
		slot, ok := paceTo(res, checks)
		if !ok || int64(slot) > c.GetMaxWaitNanos() || now+int64(slot) <= at {
			break
		}
		at = now + int64(slot)
		res = d.decideChecks(checks, now, at, &scratch)
	}
	if res.DeniedCheck < 0 {
		res.Wait = time.Duration(at - now)
	}
	top := 0
	if res.DeniedCheck >= 0 {
		top = res.DeniedCheck
		for i := range res.Checks {
			res.Checks[i].Spent = 0
		}
	}
	res.Decision, res.PolicyVersion, res.ShadowDenied = res.Checks[top].Decision, res.Checks[top].PolicyVersion, res.Checks[top].ShadowDenied

	if res.DeniedCheck < 0 {
		if err := d.makeRoom(&scratch, now); err != nil {
			return err
		}
	}
	// Record before spending: a refused record must leave every state as it was.
	if recorded {
		retention := int64(0)
		for _, ch := range checks {
			retention = max(retention, int64(ch.policy.Policy.WithDefaults().DedupeRetention))
		}
		// The table keeps a copy of the record: its bytes go to a scratch
		// buffer the next record reuses.
		d.recordBuf = encodeAdmitRecord(res, &d.recordScratch, d.recordBuf[:0])
		if err := d.record(o, dk, recordAdmit, fp, d.recordBuf, retention); err != nil {
			return err
		}
	}
	if res.DeniedCheck < 0 {
		for _, ch := range checks {
			if st, ok := scratch.take(ch.key); ok {
				d.buckets.Put(ch.key, st, admission.ExpiresAt(ch.policy.Policy, st))
			}
		}
	}
	d.policies.windows(res)
	return res
}

// windows sets each check's Window and Quota from t, when t holds the
// version the check was decided with (CheckResult).
func (t *policyTable) windows(res *AdmitResult) {
	at := res.DecidedAt + int64(res.Wait)
	for i := range res.Checks {
		c := &res.Checks[i]
		if pv, ok := t.byName[c.Policy]; ok && pv.Version == c.PolicyVersion {
			c.Window, c.Quota = pv.Policy.Window(at), pv.Policy.Limit
		}
	}
}

// decideChecks decides every check at the slot time at (≥ now), in order,
// each seeing the spends of the checks before it on the same key. Times in
// the decisions are relative to now. Nothing is stored: the new states are
// left in scratch (emptied first) for the caller to store if the request is
// admitted.
func (d *dataState) decideChecks(checks []check, now, at int64, scratch *pendingStates) *AdmitResult {
	res := newAdmitResult(len(checks))
	res.DecidedAt, res.Multi, res.DeniedCheck = now, len(checks) > 1, -1
	*scratch = pendingStates{}
	shift := time.Duration(at - now)
	for i, ch := range checks {
		st, ok := scratch.get(ch.key)
		if !ok {
			st, _ = d.buckets.Get(ch.key)
		}
		p := ch.policy.Policy
		next, dec := admission.Decide(p, st, ch.cost, at)
		dec.ResetAfter += shift
		if !dec.Allowed && dec.RetryAfter != admission.NeverRetry {
			dec.RetryAfter += shift
		}
		cr := CheckResult{Policy: p.Name, Key: ch.bareKey, Cost: ch.cost, Decision: dec, PolicyVersion: ch.policy.Version}
		switch {
		case dec.Allowed:
			scratch.set(ch.key, next)
			cr.Spent, cr.Shifted = cr.Cost, next.Shifted
		case p.Shadow:
			cr.ShadowDenied = true
			cr.Decision.Allowed = true
		case res.DeniedCheck < 0:
			res.DeniedCheck = i
		}
		res.Checks[i] = cr
	}
	return res
}

// newAdmitResult returns an AdmitResult with n zero check results; with
// one check, the result and its check are one allocation.
func newAdmitResult(n int) *AdmitResult {
	if n == 1 {
		b := new(struct {
			res    AdmitResult
			checks [1]CheckResult
		})
		b.res.Checks = b.checks[:]
		return &b.res
	}
	return &AdmitResult{Checks: make([]CheckResult, n)}
}

// paceTo returns, from now, the slot at which every check that denied would
// conform, when all of them are token buckets (pacing smooths only those):
// the latest of their retry times.
func paceTo(res *AdmitResult, checks []check) (time.Duration, bool) {
	if res.DeniedCheck < 0 {
		return 0, false
	}
	var slot time.Duration
	for i, cr := range res.Checks {
		if cr.Decision.Allowed {
			continue
		}
		if checks[i].policy.Policy.Algorithm != admission.AlgorithmTokenBucket || cr.Decision.RetryAfter == admission.NeverRetry {
			return 0, false
		}
		slot = max(slot, cr.Decision.RetryAfter)
	}
	return slot, true
}

// resolveChecks appends to out the checks of c, first its own, with their
// policies, or returns the first problem: an unknown policy or a bad key or
// cost, or a key outside slot (unless dedupe.NoSlot), naming the field
// ("key", "also[1].cost", …).
func (d *dataState) resolveChecks(c *raftcmdv1.Admit, slot uint16, out []check) ([]check, error) {
	also := c.GetAlso()
	if n := 1 + len(also); n > admission.MaxChecks {
		return nil, &admission.FieldError{Field: "also", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("at most %d checks in one request (got %d)", admission.MaxChecks, n)}
	}
	for i := range 1 + len(also) {
		policy, key, cost, prefix := c.GetPolicy(), c.GetKey(), c.GetCost(), ""
		if i > 0 {
			policy, key, cost = also[i-1].GetPolicy(), also[i-1].GetKey(), also[i-1].GetCost()
			prefix = fmt.Sprintf("also[%d].", i-1)
		}
		pv, ok := d.policies.byName[policy]
		if !ok {
			return nil, fmt.Errorf("%w %s (%spolicy)", ErrUnknownPolicy, admission.Quote(policy), prefix)
		}
		if pv.Policy.Algorithm == admission.AlgorithmConcurrency {
			return nil, &admission.FieldError{Field: prefix + "policy", Err: admission.ErrInvalidRequest,
				Reason: fmt.Sprintf("%s is a concurrency policy: take its slots with AcquireLease", admission.Quote(policy))}
		}
		if err := pv.Policy.CheckRequest(key, cost); err != nil {
			return nil, admission.Nested(prefix, err)
		}
		if slot != dedupe.NoSlot && uint16(shard.SlotOf(key)) != slot {
			// The API checks hash tags; a group must never touch another
			// slot (it may be frozen, or not be this group's).
			return nil, &admission.FieldError{Field: prefix + "key", Err: admission.ErrInvalidRequest,
				Reason: fmt.Sprintf("%s is in slot %d, the request's first key in slot %d: the keys of one request must share a hash tag", admission.Quote(key), shard.SlotOf(key), slot)}
		}
		out = append(out, check{policy: pv, key: BucketKey(policy, key), bareKey: key, cost: cost})
	}
	return out, nil
}

// makeRoom checks that the new bucket states of a request fit under
// Options.MaxBuckets (d.maxStates), reclaiming expired states first.
func (d *dataState) makeRoom(states *pendingStates, now int64) error {
	added := 0
	for _, key := range states.keys[:states.n] {
		if _, exists := d.buckets.Get(key); !exists {
			added++
		}
	}
	if added == 0 {
		return nil
	}
	if over := d.buckets.Len() + added - d.maxStates; over > 0 {
		// Expired states are absent: make room from them first (more than
		// needed now when a restore left the group above its bound).
		d.buckets.Sweep(now, over, d.policies.ofStateKey)
	}
	if d.buckets.Len()+added > d.maxStates {
		return fmt.Errorf("%w (%d buckets)", ErrGroupFull, d.maxStates)
	}
	return nil
}

// applyPeek describes a key's state at now without changing anything.
func (d *dataState) applyPeek(c *raftcmdv1.Peek, now int64) interface{} {
	pv, ok := d.policies.byName[c.GetPolicy()]
	if !ok {
		return fmt.Errorf("%w %s", ErrUnknownPolicy, admission.Quote(c.GetPolicy()))
	}
	if err := admission.CheckKeyCost(c.GetKey(), 1); err != nil {
		return err
	}
	if pv.Policy.Algorithm == admission.AlgorithmConcurrency {
		return &admission.FieldError{Field: "policy", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("%s is a concurrency policy: check a lease with CheckFence", admission.Quote(c.GetPolicy()))}
	}
	st, _ := d.buckets.Get(BucketKey(c.GetPolicy(), c.GetKey()))
	return &PeekResult{Decision: admission.Peek(pv.Policy, st, now), PolicyVersion: pv.Version, At: now}
}

// applyRefund gives back, once, what the admit recorded under (caller,
// request ID) spent.
func (d *dataState) applyRefund(c *raftcmdv1.Refund, o op) interface{} {
	now := o.now
	k := dedupe.Key{Caller: c.GetCaller(), RequestID: c.GetRequestId()}
	e, ok := d.dedupe.Get(k, now)
	if !ok {
		return fmt.Errorf("%w (caller %s, request_id %s)", ErrNothingToRefund, admission.Quote(k.Caller), admission.Quote(dedupe.SentRequestID(k.RequestID)))
	}
	if e.Kind != recordAdmit {
		return fmt.Errorf("%w (caller %s, request_id %s names another kind of request)", ErrNothingToRefund, admission.Quote(k.Caller), admission.Quote(dedupe.SentRequestID(k.RequestID)))
	}
	rec := decodeAdmitRecord(e)
	if !rec.GetAllowed() {
		return fmt.Errorf("%w (caller %s, request_id %s)", ErrNotAdmitted, admission.Quote(k.Caller), admission.Quote(dedupe.SentRequestID(k.RequestID)))
	}
	var cost int64
	for _, ch := range rec.GetChecks() {
		cost += ch.GetSpent()
	}
	if o.slot != dedupe.NoSlot {
		for _, ch := range rec.GetChecks() {
			if uint16(shard.SlotOf(ch.GetKey())) != o.slot {
				return &admission.FieldError{Field: "key", Err: admission.ErrInvalidRequest,
					Reason: fmt.Sprintf("request_id %s was recorded for key %s, which is not in this key's slot", admission.Quote(dedupe.SentRequestID(k.RequestID)), admission.Quote(ch.GetKey()))}
			}
		}
	}
	if rec.GetRefunded() {
		return &RefundResult{Refunded: false, Cost: cost, RefundedAt: rec.GetRefundedAtUnixNano()}
	}
	for _, ch := range rec.GetChecks() {
		pv, ok := d.policies.byName[ch.GetPolicy()]
		if !ok || ch.GetSpent() == 0 {
			continue // policy deleted since: its state is going away
		}
		key := BucketKey(ch.GetPolicy(), ch.GetKey())
		st, exists := d.buckets.Get(key)
		if !exists {
			continue // already expired: nothing left to give back
		}
		next := admission.Refund(pv.Policy, st, admission.Spend{
			Cost:    ch.GetSpent(),
			At:      rec.GetDecidedAtUnixNano() + rec.GetWaitNanos(),
			Until:   rec.GetDecidedAtUnixNano() + ch.GetResetAfterNanos(),
			Shifted: ch.GetShiftedNanos(),
		}, now)
		d.buckets.Put(key, next, admission.ExpiresAt(pv.Policy, next))
	}
	rec.Refunded, rec.RefundedAtUnixNano = true, now
	d.dedupe.Update(k, marshalRecord(rec, nil))
	return &RefundResult{Refunded: true, Cost: cost, RefundedAt: now}
}
