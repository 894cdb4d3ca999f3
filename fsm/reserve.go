package fsm

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	"github.com/quorate/quorate/fsm/internal/table"
	"github.com/quorate/quorate/lease"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// DefaultReservationTTL is how long a reservation holds its units when the
// request gives no ttl.
const DefaultReservationTTL = 10 * time.Minute

// reservation is estimate units of (policy, key) held until a Commit or
// until expiresAt, by holder (the caller that reserved and the secret of
// the reservation's ID; for one held with a lease, the lease's).
type reservation struct {
	policy, key string
	holder      lease.Holder
	estimate    int64
	reservedAt  int64
	// spentUntil and spentShifted: admission.SpendOf the key's state
	// right after the spend.
	spentUntil, spentShifted int64
	expiresAt                int64
}

// spend is cost units of r's estimate as the spend it made.
func (r reservation) spend(cost int64) admission.Spend {
	return admission.Spend{Cost: cost, At: r.reservedAt, Until: r.spentUntil, Shifted: r.spentShifted}
}

// ReserveResult is the Apply result of a Reserve or a Commit.
type ReserveResult struct {
	Allowed       bool
	ReservationID string
	Decision      admission.Decision
	ExpiresAt     int64
	PolicyVersion uint64
	DecidedAt     int64
	// Commit only.
	Charged, Released, Over int64
	Duplicate               bool
}

// ReservationName is a reservation's name in the reservations table: the
// log index of its Reserve, and the group of that log in a data group
// (group 0: none), since indexes repeat across groups and reservations
// move between groups with their slots. Its ID (what Reserve answers)
// adds policy, key and secret (see holdid.go).
func ReservationName(index uint64, group uint32) string {
	name := strconv.FormatUint(index, 10)
	if group != 0 {
		name += "@" + strconv.FormatUint(uint64(group), 10)
	}
	return name
}

// applyReserve holds estimate units of a rate or quota policy's key: an
// Admit of that cost that is remembered until Commit or expiry. Its answer's
// ID carries the command's secret; only the command's caller with that ID
// commits it.
func (d *dataState) applyReserve(c *raftcmdv1.Reserve, o op) interface{} {
	index, now := o.index, o.now
	dk, fp, recorded := dedupe.Key{Caller: c.GetCaller(), RequestID: c.GetRequestId()}, reserveFingerprint(c), c.GetRequestId() != ""
	if recorded {
		if e, ok := d.dedupe.Get(dk, now); ok {
			return recordedReserve(e, fp)
		}
	}
	holder, ok := holderOf(c.GetCaller(), c.GetSecret())
	if !ok {
		return errSecret(c.GetSecret())
	}
	ttl := time.Duration(c.GetTtlNanos())
	if ttl == 0 {
		ttl = DefaultReservationTTL
	}
	// Log indexes repeat across groups, and reservations move between
	// them with their slots: a data group's names name the group too, so a
	// name is never issued twice (groups are never reused).
	var group uint32
	if d.owned != nil {
		group = uint32(d.owned.group)
	}
	name := ReservationName(index, group)
	// A reservation that moved here with its slot was named by another
	// group's log index, which may be this one's.
	for k := 1; d.reservations.Has(name); k++ {
		name = ReservationName(index, group) + "." + strconv.Itoa(k)
	}
	hold, err := d.prepareReservation(reserveFields{"policy", "estimate"}, name, c.GetPolicy(), c.GetKey(), c.GetEstimate(),
		holder, addSaturating(now, int64(ttl)), now)
	if err != nil {
		return err
	}
	if hold.res.Allowed {
		hold.res.ReservationID = ReservationID(c.GetPolicy(), c.GetKey(), name, holder.Secret)
	}
	if recorded {
		if err := d.record(o, dk, recordReserve, fp, encodeReserveRecord(hold.res), int64(hold.retention)); err != nil {
			return err
		}
	}
	d.storeReservation(hold)
	return hold.res
}

// pendingReservation is a decided reservation not stored yet.
type pendingReservation struct {
	res       *ReserveResult
	id        string
	r         reservation
	bucketKey string
	next      admission.State // the key's state with the estimate spent
	expires   int64           // next's admission.ExpiresAt
	retention time.Duration   // the policy's dedupe retention
}

// reserveFields names the fields of a command that holds a reservation, for
// its errors: a Reserve's policy and estimate, an acquire's reserve_policy
// and reserve_estimate.
type reserveFields struct{ policy, estimate string }

// prepareReservation decides whether estimate units of (policy, key) can be
// held by holder until expiresAt under the name id, without changing
// anything: the caller stores the result with storeReservation when the
// whole operation goes ahead. Its errors name the command's fields as f
// says.
func (d *dataState) prepareReservation(f reserveFields, id, policy, key string, estimate int64, holder lease.Holder, expiresAt, now int64) (*pendingReservation, error) {
	pv, ok := d.policies.byName[policy]
	if !ok {
		return nil, fmt.Errorf("%w %s", ErrUnknownPolicy, admission.Quote(policy))
	}
	p := pv.Policy
	if p.Algorithm == admission.AlgorithmConcurrency {
		return nil, &admission.FieldError{Field: f.policy, Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("%s is a concurrency policy: reservations hold units of rate and quota policies", admission.Quote(policy))}
	}
	if err := p.CheckRequest(key, estimate); err != nil {
		if fe, ok := err.(*admission.FieldError); ok && fe.Field == "cost" {
			err = &admission.FieldError{Field: f.estimate, Reason: fe.Reason, Err: fe.Err}
		}
		return nil, err
	}
	bk := BucketKey(policy, key)
	st, _ := d.buckets.Get(bk)
	next, dec := admission.Decide(p, st, estimate, now)
	hold := &pendingReservation{
		res:       &ReserveResult{Allowed: dec.Allowed, Decision: dec, PolicyVersion: pv.Version, DecidedAt: now},
		id:        id,
		bucketKey: bk,
		next:      next,
		retention: p.WithDefaults().DedupeRetention,
	}
	if dec.Allowed {
		var states pendingStates
		states.set(bk, next)
		if err := d.makeRoom(&states, now); err != nil {
			return nil, err
		}
		hold.res.ReservationID, hold.res.ExpiresAt = id, expiresAt
		sp := admission.SpendOf(p, next, estimate, now)
		hold.expires = admission.ExpiresAt(p, next)
		hold.r = reservation{policy: policy, key: key, holder: holder, estimate: estimate, reservedAt: now,
			spentUntil: sp.Until, spentShifted: sp.Shifted, expiresAt: expiresAt}
	}
	return hold, nil
}

// storeReservation spends a prepared, allowed reservation's estimate and
// records it.
func (d *dataState) storeReservation(hold *pendingReservation) {
	if !hold.res.Allowed {
		return
	}
	d.buckets.Put(hold.bucketKey, hold.next, hold.expires)
	d.reservations.Put(hold.id, hold.r, hold.r.expiresAt)
}

// applyCommit settles a reservation at its actual cost. Only the caller that
// reserved it, with the ID Reserve answered, may: any other caller or
// secret is refused exactly as an ID that never existed (ErrNoReservation),
// and changes nothing.
func (d *dataState) applyCommit(c *raftcmdv1.Commit, o op) interface{} {
	now := o.now
	dk, fp, recorded := dedupe.Key{Caller: c.GetCaller(), RequestID: c.GetRequestId()}, commitFingerprint(c), c.GetRequestId() != ""
	if recorded {
		if e, ok := d.dedupe.Get(dk, now); ok {
			return recordedReserve(e, fp)
		}
	}
	if c.GetActual() < 0 {
		return &admission.FieldError{Field: "actual", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("must be at least 0 (got %d)", c.GetActual())}
	}
	id, ok := parseHoldID(holdReservation, c.GetReservationId())
	if !ok {
		return fmt.Errorf("%w (not an ID Reserve answered)", ErrNoReservation)
	}
	holder, _ := holderOf(c.GetCaller(), id.secret[:])
	r, ok := d.reservations.Get(id.name)
	if !ok || strings.HasPrefix(id.name, leaseReservationPrefix) || r.expiresAt <= now || r.policy != id.policy || r.key != id.key || !r.holder.Is(holder) {
		return fmt.Errorf("%w (policy %s, key %s)", ErrNoReservation, admission.Quote(id.policy), admission.Quote(id.key))
	}
	pv, ok := d.policies.byName[r.policy]
	if !ok {
		d.reservations.Remove(id.name)
		return fmt.Errorf("%w %s", ErrUnknownPolicy, admission.Quote(r.policy))
	}
	res := &ReserveResult{Allowed: true, ReservationID: c.GetReservationId(), PolicyVersion: pv.Version, DecidedAt: now}
	if recorded {
		// Settle on a copy first: the record must be stored before anything
		// changes, and needs the amounts.
		res.Charged, res.Released, res.Over, _ = settle(pv.Policy, d.stateOf(r), r, c.GetActual(), now)
		if err := d.record(o, dk, recordCommit, fp, encodeReserveRecord(res), int64(pv.Policy.WithDefaults().DedupeRetention)); err != nil {
			return err
		}
	}
	res.Charged, res.Released, res.Over = d.commitReservation(id.name, pv.Policy, r, c.GetActual(), now)
	return res
}

// commitReservation settles reservation id at actual and removes it.
func (d *dataState) commitReservation(id string, p admission.Policy, r reservation, actual, now int64) (charged, released, over int64) {
	charged, released, over, st := settle(p, d.stateOf(r), r, actual, now)
	if st.Kind != admission.KindNone {
		d.buckets.Put(BucketKey(r.policy, r.key), st, admission.ExpiresAt(p, st))
	}
	d.reservations.Remove(id)
	return charged, released, over
}

func (d *dataState) stateOf(r reservation) admission.State {
	st, _ := d.buckets.Get(BucketKey(r.policy, r.key))
	return st
}

// settle computes a commit: below the estimate the rest is given back;
// above it the excess is charged as far as the limit allows.
func settle(p admission.Policy, st admission.State, r reservation, actual, now int64) (charged, released, over int64, next admission.State) {
	switch {
	case actual < r.estimate:
		released = r.estimate - actual
		return actual, released, 0, admission.Refund(p, st, r.spend(released), now)
	case actual > r.estimate:
		extra := min(actual-r.estimate, admission.Peek(p, st, now).Remaining, p.WithDefaults().MaxCost)
		if extra > 0 {
			if n, d := admission.Decide(p, st, extra, now); d.Allowed {
				st = n
			} else {
				extra = 0
			}
		}
		return r.estimate + extra, 0, actual - r.estimate - extra, st
	default:
		return actual, 0, 0, st
	}
}

// expireReservation gives back the units of a reservation that was never
// committed; the sweep calls it when the reservation expires.
func (d *dataState) expireReservation(_ string, r reservation, now int64) {
	pv, ok := d.policies.byName[r.policy]
	if !ok {
		return
	}
	key := BucketKey(r.policy, r.key)
	st, exists := d.buckets.Get(key)
	if !exists {
		return
	}
	st = admission.Refund(pv.Policy, st, r.spend(r.estimate), now)
	d.buckets.Put(key, st, admission.ExpiresAt(pv.Policy, st))
}

func reservationExpires(_ admission.Policy, r reservation) int64 { return r.expiresAt }

func reserveFingerprint(c *raftcmdv1.Reserve) [16]byte {
	return newFingerprint("reserve").check(c.GetPolicy(), c.GetKey(), c.GetEstimate()).num(c.GetTtlNanos()).sum()
}

func commitFingerprint(c *raftcmdv1.Commit) [16]byte {
	return newFingerprint("commit").str(c.GetReservationId()).num(c.GetActual()).sum()
}

func encodeReserveRecord(r *ReserveResult) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&raftcmdv1.ReserveRecord{
		Allowed: r.Allowed, ReservationId: r.ReservationID, Limit: r.Decision.Limit, Remaining: r.Decision.Remaining,
		RetryAfterNanos: int64(r.Decision.RetryAfter), ExpiresAtUnixNano: r.ExpiresAt, PolicyVersion: r.PolicyVersion,
		DecidedAtUnixNano: r.DecidedAt, Charged: r.Charged, Released: r.Released, Over: r.Over,
	})
	if err != nil {
		panic(fmt.Sprintf("fsm: encoding a reserve record: %v", err))
	}
	return b
}

func recordedReserve(e dedupe.Entry, fp [16]byte) interface{} {
	if e.Fingerprint != fp {
		return reusedRequestID(e)
	}
	var rec raftcmdv1.ReserveRecord
	if err := proto.Unmarshal(e.Result, &rec); err != nil {
		panic(fmt.Sprintf("fsm: recorded reserve result of %q/%q is corrupt: %v", e.Key.Caller, e.Key.RequestID, err))
	}
	return &ReserveResult{
		Allowed: rec.GetAllowed(), ReservationID: rec.GetReservationId(),
		Decision: admission.Decision{Allowed: rec.GetAllowed(), Limit: rec.GetLimit(), Remaining: rec.GetRemaining(),
			RetryAfter: time.Duration(rec.GetRetryAfterNanos())},
		ExpiresAt: rec.GetExpiresAtUnixNano(), PolicyVersion: rec.GetPolicyVersion(), DecidedAt: rec.GetDecidedAtUnixNano(),
		Charged: rec.GetCharged(), Released: rec.GetReleased(), Over: rec.GetOver(), Duplicate: true,
	}
}

func reservationToRecord(rec *raftcmdv1.ReservationRecord, r table.Record[reservation]) {
	v := r.State
	rec.Id, rec.Policy, rec.Key, rec.Estimate = r.Key, v.policy, v.key, v.estimate
	rec.ReservedAtUnixNano, rec.SpentUntilUnixNano, rec.ExpiresAtUnixNano = v.reservedAt, v.spentUntil, v.expiresAt
	rec.SpentShiftedNanos = v.spentShifted
	rec.Caller, rec.Secret = v.holder.Caller, append(rec.Secret[:0], v.holder.Secret[:]...)
}

// reservationFromRecord reverses reservationToRecord. A secret of the wrong
// size (a damaged record) leaves the zero secret, which holds nothing.
func reservationFromRecord(rec *raftcmdv1.ReservationRecord) table.Record[reservation] {
	holder, _ := holderOf(rec.GetCaller(), rec.GetSecret())
	return table.Record[reservation]{Key: rec.GetId(), ExpiresAt: rec.GetExpiresAtUnixNano(), State: reservation{
		policy: rec.GetPolicy(), key: rec.GetKey(), holder: holder, estimate: rec.GetEstimate(), reservedAt: rec.GetReservedAtUnixNano(),
		spentUntil: rec.GetSpentUntilUnixNano(), spentShifted: rec.GetSpentShiftedNanos(), expiresAt: rec.GetExpiresAtUnixNano()}}
}

// noPolicy makes the reservations' sweep delete every expired entry: their
// expiry never depends on a policy.
func noPolicy(string) (admission.Policy, bool) { return admission.Policy{}, false }
