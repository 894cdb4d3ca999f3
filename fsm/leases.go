package fsm

import (
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	"github.com/quorate/quorate/fsm/internal/table"
	"github.com/quorate/quorate/lease"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// LeaseResult is the Apply result of a lease operation.
type LeaseResult struct {
	// Allowed: acquire got a slot; renew/release/check: the token held one.
	Allowed       bool
	Lease         lease.Lease
	Limit, Held   int64
	RetryAfter    time.Duration
	PolicyVersion uint64
	DecidedAt     int64
	Duplicate     bool
	// A lease acquired with a reservation: its ID; on release, how it was
	// settled (see ReserveResult).
	ReservationID           string
	Charged, Released, Over int64
}

// leaseReservationPrefix starts the name of every reservation held with a
// lease, apart from ReservationName's digits; a Commit cannot name one (its
// lease's release settles it).
const leaseReservationPrefix = "lease:"

// leaseReservationID names the reservation held with a lease.
func leaseReservationID(stateKey string, token int64) string {
	return leaseReservationPrefix + stateKey + "#" + strconv.FormatInt(token, 10)
}

// semExpires is when a semaphore is equivalent to none: its leases'
// latest end. The policy does not change it.
func semExpires(_ admission.Policy, s lease.Semaphore) int64 { return lease.ExpiresAt(s) }

// applyLease acquires, renews, releases or checks a lease of a concurrency
// policy's key. Acquire, renew and release with a request ID are recorded:
// a repeat gets the first answer and changes nothing. A token that holds no
// live lease of the command's holder (its caller and the secret of its
// lease ID) is refused with lease.ErrStale, another holder's lease
// included: to anyone but its holder a lease does not exist.
func (d *dataState) applyLease(c *raftcmdv1.LeaseOp, o op) interface{} {
	now := o.now
	kind := c.GetKind()
	if kind < raftcmdv1.LeaseOp_KIND_ACQUIRE || kind > raftcmdv1.LeaseOp_KIND_CHECK {
		panic(fmt.Sprintf("fsm: lease operation of unknown kind %d: upgrade this binary", kind))
	}
	var dk dedupe.Key
	var fp [16]byte
	recorded := c.GetRequestId() != "" && kind != raftcmdv1.LeaseOp_KIND_CHECK
	if recorded {
		dk, fp = dedupe.Key{Caller: c.GetCaller(), RequestID: c.GetRequestId()}, leaseFingerprint(c)
		if e, ok := d.dedupe.Get(dk, now); ok {
			if e.Fingerprint != fp {
				return reusedRequestID(e)
			}
			return decodeLeaseRecord(e)
		}
	}
	pv, ok := d.policies.byName[c.GetPolicy()]
	if !ok {
		return fmt.Errorf("%w %s", ErrUnknownPolicy, admission.Quote(c.GetPolicy()))
	}
	p := pv.Policy.WithDefaults()
	if p.Algorithm != admission.AlgorithmConcurrency {
		return &admission.FieldError{Field: "policy", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("%s is a %s policy, not concurrency: use Admit", admission.Quote(c.GetPolicy()), p.Algorithm)}
	}
	if err := admission.CheckKeyCost(c.GetKey(), 1); err != nil {
		return err
	}
	// Without a secret of the right size the holder has the zero secret,
	// which holds nothing: refused below like any other holder.
	holder, okSecret := holderOf(c.GetCaller(), c.GetSecret())
	if kind == raftcmdv1.LeaseOp_KIND_ACQUIRE && !okSecret {
		return errSecret(c.GetSecret())
	}
	ttl := time.Duration(c.GetTtlNanos())
	if ttl != 0 {
		if fe := admission.CheckLeaseTTL("ttl", ttl); fe != nil {
			return &admission.FieldError{Field: fe.Field, Reason: fe.Reason, Err: admission.ErrInvalidRequest}
		}
	}
	key := BucketKey(c.GetPolicy(), c.GetKey())
	s, exists := d.sems.Get(key)
	res := &LeaseResult{Limit: p.Limit, PolicyVersion: pv.Version, DecidedAt: now}
	next := s
	var err error
	var hold *pendingReservation // acquire with a reservation
	var settleRes func()         // release of a lease with a reservation
	switch kind {
	case raftcmdv1.LeaseOp_KIND_ACQUIRE:
		if ttl == 0 {
			ttl = p.LeaseTTL
		}
		var dec lease.Decision
		next, dec = lease.Acquire(s, p.Limit, int64(ttl), now, lease.Claim{Holder: holder, Jitter: c.GetTokenJitter()})
		res.Allowed, res.Lease, res.Held, res.RetryAfter = dec.Allowed, dec.Lease, dec.Held, dec.RetryAfter
		if dec.Allowed && c.GetReservePolicy() != "" {
			// Lease and reservation together or not at all.
			hold, err = d.prepareReservation(reserveFields{"reserve_policy", "reserve_estimate"}, leaseReservationID(key, dec.Lease.Token), c.GetReservePolicy(), c.GetKey(),
				c.GetReserveEstimate(), holder, dec.Lease.ExpiresAt, now)
			if err != nil {
				return err
			}
			if !hold.res.Allowed {
				res.Allowed, res.Lease, res.Held, res.RetryAfter = false, lease.Lease{}, lease.Live(s, now), hold.res.Decision.RetryAfter
				next, hold = s, nil
			} else {
				res.ReservationID = hold.id
			}
		}
		if res.Allowed && !exists && d.sems.Len() >= d.maxStates {
			d.sems.Sweep(now, d.sems.Len()-d.maxStates+1, d.policies.ofStateKey)
			if d.sems.Len() >= d.maxStates {
				return fmt.Errorf("%w (%d semaphores)", ErrGroupFull, d.maxStates)
			}
		}
	case raftcmdv1.LeaseOp_KIND_RENEW:
		next, res.Lease, err = lease.Renew(s, c.GetToken(), int64(ttl), now, holder)
	case raftcmdv1.LeaseOp_KIND_RELEASE:
		next, res.Lease, err = lease.Release(s, c.GetToken(), now, holder)
		if err == nil {
			settleRes, err = d.prepareSettle(key, c, res, now)
		}
	case raftcmdv1.LeaseOp_KIND_CHECK:
		res.Lease, res.Allowed = lease.Holds(s, c.GetToken(), now, holder)
		res.Held = lease.Live(s, now)
		return res
	}
	if err != nil {
		return fmt.Errorf("%w (policy %s, key %s)", err, admission.Quote(c.GetPolicy()), admission.Quote(c.GetKey()))
	}
	if kind != raftcmdv1.LeaseOp_KIND_ACQUIRE {
		res.Allowed, res.Held = true, lease.Live(next, now)
	}
	// Record before changing the state: a refused record changes nothing.
	// A denied acquire is not recorded: it took nothing, and a request
	// waiting for a slot asks again under the same ID.
	if recorded && res.Allowed {
		if err := d.record(o, dk, recordLease, fp, encodeLeaseRecord(res), int64(p.DedupeRetention)); err != nil {
			return err
		}
	}
	if res.Allowed {
		d.sems.Put(key, next, lease.ExpiresAt(next))
	}
	if hold != nil {
		d.storeReservation(hold)
	}
	if settleRes != nil {
		settleRes()
	}
	if kind == raftcmdv1.LeaseOp_KIND_RENEW {
		// A reservation held with the lease lives as long as the lease.
		rid := leaseReservationID(key, c.GetToken())
		if r, ok := d.reservations.Get(rid); ok {
			r.expiresAt = res.Lease.ExpiresAt
			d.reservations.Put(rid, r, r.expiresAt)
		}
	}
	return res
}

// prepareSettle works out, for the release of a lease that holds a
// reservation, how its reservation is settled (at actual_cost, or the whole
// estimate when unset), fills res, and returns the step that applies it.
// A release with actual_cost of a lease without a reservation is refused.
func (d *dataState) prepareSettle(key string, c *raftcmdv1.LeaseOp, res *LeaseResult, now int64) (func(), error) {
	rid := leaseReservationID(key, c.GetToken())
	r, ok := d.reservations.Get(rid)
	if ok && r.expiresAt <= now {
		ok = false
	}
	if !ok {
		if c.ActualCost != nil {
			return nil, &admission.FieldError{Field: "actual_cost", Err: admission.ErrInvalidRequest,
				Reason: "the lease holds no reservation to settle (acquire it with reserve_policy)"}
		}
		return nil, nil
	}
	actual := r.estimate
	if c.ActualCost != nil {
		if actual = c.GetActualCost(); actual < 0 {
			return nil, &admission.FieldError{Field: "actual_cost", Err: admission.ErrInvalidRequest,
				Reason: fmt.Sprintf("must be at least 0 (got %d)", actual)}
		}
	}
	pv, ok := d.policies.byName[r.policy]
	if !ok {
		return func() { d.reservations.Remove(rid) }, nil
	}
	res.ReservationID = rid
	res.Charged, res.Released, res.Over, _ = settle(pv.Policy, d.stateOf(r), r, actual, now)
	return func() { d.commitReservation(rid, pv.Policy, r, actual, now) }, nil
}

// shiftLeases runs on the first entry of a new Raft term: every lease's end
// moves by the time the log advanced across the leader change, so a lease
// keeps the remaining time it had by the old leader's last entry. A new
// leader whose clock is ahead never expires a lease earlier than the old one
// would have; leases may outlive their TTL by the election gap, which
// fencing tokens make safe.
func (d *dataState) shiftLeases(by int64) {
	if by <= 0 {
		return
	}
	d.sems.Each(func(_ string, s lease.Semaphore, _ int64) (lease.Semaphore, int64) {
		s = lease.Shift(s, by)
		return s, lease.ExpiresAt(s)
	})
	// Reservations keep their remaining time too (those held with a lease
	// must not end before it).
	d.reservations.Each(func(_ string, r reservation, _ int64) (reservation, int64) {
		r.expiresAt = addSaturating(r.expiresAt, by)
		return r, r.expiresAt
	})
}

// leaseFingerprint identifies what a lease operation asks: an acquire's
// secret and jitter are not part of it (each attempt's handler draws them
// afresh, and a retry gets the first attempt's lease), a renewal's or
// release's secret is (it is part of the lease ID asked about).
func leaseFingerprint(c *raftcmdv1.LeaseOp) [16]byte {
	fp := newFingerprint("lease").count(int(c.GetKind())).str(c.GetPolicy()).str(c.GetKey()).
		num(c.GetToken()).num(c.GetTtlNanos())
	if c.GetKind() != raftcmdv1.LeaseOp_KIND_ACQUIRE {
		fp = fp.str(string(c.GetSecret()))
	}
	if c.GetReservePolicy() != "" || c.ActualCost != nil {
		fp = fp.str(c.GetReservePolicy()).num(c.GetReserveEstimate())
		if c.ActualCost != nil {
			fp = fp.num(c.GetActualCost())
		}
	}
	return fp.sum()
}

func encodeLeaseRecord(r *LeaseResult) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&raftcmdv1.LeaseOpRecord{
		Allowed: r.Allowed,
		Lease:   leaseToRecord(r.Lease),
		Limit:   r.Limit, Held: r.Held, RetryAfterNanos: int64(r.RetryAfter),
		PolicyVersion: r.PolicyVersion, DecidedAtUnixNano: r.DecidedAt,
		ReservationId: r.ReservationID, Charged: r.Charged, Released: r.Released, Over: r.Over,
	})
	if err != nil {
		panic(fmt.Sprintf("fsm: encoding a lease record: %v", err))
	}
	return b
}

func decodeLeaseRecord(e dedupe.Entry) *LeaseResult {
	var rec raftcmdv1.LeaseOpRecord
	if err := proto.Unmarshal(e.Result, &rec); err != nil {
		panic(fmt.Sprintf("fsm: recorded lease result of %q/%q is corrupt: %v", e.Key.Caller, e.Key.RequestID, err))
	}
	l := rec.GetLease()
	return &LeaseResult{
		Allowed: rec.GetAllowed(),
		Lease:   leaseFromRecord(l),
		Limit:   rec.GetLimit(), Held: rec.GetHeld(), RetryAfter: time.Duration(rec.GetRetryAfterNanos()),
		PolicyVersion: rec.GetPolicyVersion(), DecidedAt: rec.GetDecidedAtUnixNano(), Duplicate: true,
		ReservationID: rec.GetReservationId(), Charged: rec.GetCharged(), Released: rec.GetReleased(), Over: rec.GetOver(),
	}
}

func semToRecord(rec *raftcmdv1.SemaphoreRecord, r table.Record[lease.Semaphore]) {
	rec.Key, rec.LastToken, rec.ExpiresAtUnixNano = r.Key, r.State.LastToken, r.ExpiresAt
	rec.Leases = rec.Leases[:0]
	for _, l := range r.State.Leases {
		rec.Leases = append(rec.Leases, leaseToRecord(l))
	}
}

func semFromRecord(rec *raftcmdv1.SemaphoreRecord) table.Record[lease.Semaphore] {
	s := lease.Semaphore{LastToken: rec.GetLastToken()}
	for _, l := range rec.GetLeases() {
		s.Leases = append(s.Leases, leaseFromRecord(l))
	}
	return table.Record[lease.Semaphore]{Key: rec.GetKey(), State: s, ExpiresAt: rec.GetExpiresAtUnixNano()}
}

// leaseToRecord is a lease's stored form, its holder included (nil
// secret for the zero Lease of a denied answer).
func leaseToRecord(l lease.Lease) *raftcmdv1.LeaseRecord {
	rec := &raftcmdv1.LeaseRecord{Token: l.Token, AcquiredAtUnixNano: l.AcquiredAt,
		ExpiresAtUnixNano: l.ExpiresAt, TtlNanos: l.TTL, Caller: l.Holder.Caller}
	if l.Token != 0 {
		rec.Secret = append([]byte(nil), l.Holder.Secret[:]...)
	}
	return rec
}

// leaseFromRecord reverses leaseToRecord. A secret of the wrong length
// (a damaged record) leaves the zero secret, which no command carries.
func leaseFromRecord(rec *raftcmdv1.LeaseRecord) lease.Lease {
	h, _ := holderOf(rec.GetCaller(), rec.GetSecret())
	return lease.Lease{Token: rec.GetToken(), AcquiredAt: rec.GetAcquiredAtUnixNano(),
		ExpiresAt: rec.GetExpiresAtUnixNano(), TTL: rec.GetTtlNanos(), Holder: h}
}
