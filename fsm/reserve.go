package fsm

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// DefaultReservationTTL is how long a reservation holds its units when the
// request gives no ttl.
const DefaultReservationTTL = 10 * time.Minute

// ErrNoReservation is returned by Commit for a reservation that is unknown,
// already committed or expired (an expired one has given its units back).
var ErrNoReservation = errors.New("fsm: no such outstanding reservation")

// reservation is estimate units of (policy, key) held until a Commit or
// until expiresAt.
type reservation struct {
	policy, key string
	estimate    int64
	reservedAt  int64
	spentUntil  int64 // ExpiresAt of the key's state right after the spend
	expiresAt   int64
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

// ReservationID names a reservation: its policy, key and the log index of
// the Reserve, so that it is unique and routes to the key's group.
func ReservationID(policy, key string, index uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(policy + "\x00" + key + "\x00" + strconv.FormatUint(index, 10)))
}

// applyReserve holds estimate units of a rate or quota policy's key: an
// Admit of that cost that is remembered until Commit or expiry.
func (f *FSM) applyReserve(c *raftcmdv1.Reserve, index uint64, now int64) interface{} {
	dk, fp, recorded := dedupe.Key{Caller: c.GetCaller(), RequestID: c.GetRequestId()}, reserveFingerprint(c), c.GetRequestId() != ""
	if recorded {
		if e, ok := f.dedupe.Get(dk, now); ok {
			return recordedReserve(e, fp)
		}
	}
	pv, ok := f.policies[c.GetPolicy()]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownPolicy, c.GetPolicy())
	}
	p := pv.Policy
	if p.Algorithm == admission.AlgorithmConcurrency {
		return &admission.FieldError{Field: "policy", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("%q is a concurrency policy: reservations hold units of rate and quota policies", c.GetPolicy())}
	}
	if err := p.CheckRequest(c.GetKey(), c.GetEstimate()); err != nil {
		if fe, ok := err.(*admission.FieldError); ok && fe.Field == "cost" {
			err = &admission.FieldError{Field: "estimate", Reason: fe.Reason, Err: fe.Err}
		}
		return err
	}
	ttl := time.Duration(c.GetTtlNanos())
	if ttl == 0 {
		ttl = DefaultReservationTTL
	}
	key := BucketKey(c.GetPolicy(), c.GetKey())
	st, _ := f.buckets.get(key)
	next, d := admission.Decide(p, st, c.GetEstimate(), now)
	res := &ReserveResult{Allowed: d.Allowed, Decision: d, PolicyVersion: pv.Version, DecidedAt: now}
	var r reservation
	if d.Allowed {
		if err := f.makeRoom(map[string]admission.State{key: next}, now); err != nil {
			return err
		}
		res.ReservationID = ReservationID(c.GetPolicy(), c.GetKey(), index)
		r = reservation{policy: c.GetPolicy(), key: c.GetKey(), estimate: c.GetEstimate(), reservedAt: now,
			spentUntil: admission.ExpiresAt(p, next), expiresAt: addSaturating(now, int64(ttl))}
		res.ExpiresAt = r.expiresAt
	}
	if recorded {
		if err := f.dedupe.Put(dedupe.Entry{Key: dk, Kind: recordReserve, Fingerprint: fp, Result: encodeReserveRecord(res),
			ExpiresAt: addSaturating(now, int64(p.WithDefaults().DedupeRetention))}, now); err != nil {
			return fmt.Errorf("%w: %v", ErrDedupeFull, err)
		}
	}
	if d.Allowed {
		f.buckets.put(key, next, r.spentUntil)
		f.reservations.put(res.ReservationID, r, r.expiresAt)
	}
	return res
}

// applyCommit settles a reservation at its actual cost.
func (f *FSM) applyCommit(c *raftcmdv1.Commit, now int64) interface{} {
	dk, fp, recorded := dedupe.Key{Caller: c.GetCaller(), RequestID: c.GetRequestId()}, commitFingerprint(c), c.GetRequestId() != ""
	if recorded {
		if e, ok := f.dedupe.Get(dk, now); ok {
			return recordedReserve(e, fp)
		}
	}
	if c.GetActual() < 0 {
		return &admission.FieldError{Field: "actual", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("must be at least 0 (got %d)", c.GetActual())}
	}
	r, ok := f.reservations.get(c.GetReservationId())
	if !ok || r.expiresAt <= now {
		return fmt.Errorf("%w (%s)", ErrNoReservation, c.GetReservationId())
	}
	pv, ok := f.policies[r.policy]
	if !ok {
		f.reservations.remove(c.GetReservationId())
		return fmt.Errorf("%w %q", ErrUnknownPolicy, r.policy)
	}
	p := pv.Policy
	key := BucketKey(r.policy, r.key)
	st, _ := f.buckets.get(key)
	res := &ReserveResult{Allowed: true, ReservationID: c.GetReservationId(), PolicyVersion: pv.Version, DecidedAt: now}
	actual := c.GetActual()
	switch {
	case actual < r.estimate:
		res.Charged, res.Released = actual, r.estimate-actual
		st = admission.Refund(p, st, admission.Spend{Cost: res.Released, At: r.reservedAt, Until: r.spentUntil}, now)
	case actual > r.estimate:
		// Charge the excess only as far as the limit allows.
		extra := min(actual-r.estimate, admission.Peek(p, st, now).Remaining, p.WithDefaults().MaxCost)
		if extra > 0 {
			if next, d := admission.Decide(p, st, extra, now); d.Allowed {
				st = next
			} else {
				extra = 0
			}
		}
		res.Charged, res.Over = r.estimate+extra, actual-r.estimate-extra
	default:
		res.Charged = actual
	}
	if recorded {
		if err := f.dedupe.Put(dedupe.Entry{Key: dk, Kind: recordCommit, Fingerprint: fp, Result: encodeReserveRecord(res),
			ExpiresAt: addSaturating(now, int64(p.WithDefaults().DedupeRetention))}, now); err != nil {
			return fmt.Errorf("%w: %v", ErrDedupeFull, err)
		}
	}
	if st.Kind != admission.KindNone {
		f.buckets.put(key, st, admission.ExpiresAt(p, st))
	}
	f.reservations.remove(c.GetReservationId())
	return res
}

// expireReservation gives back the units of a reservation that was never
// committed; the sweep calls it when the reservation expires.
func (f *FSM) expireReservation(_ string, r reservation, now int64) {
	pv, ok := f.policies[r.policy]
	if !ok {
		return
	}
	key := BucketKey(r.policy, r.key)
	st, exists := f.buckets.get(key)
	if !exists {
		return
	}
	st = admission.Refund(pv.Policy, st, admission.Spend{Cost: r.estimate, At: r.reservedAt, Until: r.spentUntil}, now)
	f.buckets.put(key, st, admission.ExpiresAt(pv.Policy, st))
}

func reservationExpires(_ admission.Policy, r reservation) int64 { return r.expiresAt }

func reserveFingerprint(c *raftcmdv1.Reserve) [16]byte {
	buf := []byte("reserve")
	buf = binary.AppendUvarint(buf, uint64(len(c.GetPolicy())))
	buf = append(buf, c.GetPolicy()...)
	buf = binary.AppendUvarint(buf, uint64(len(c.GetKey())))
	buf = append(buf, c.GetKey()...)
	buf = binary.AppendVarint(buf, c.GetEstimate())
	buf = binary.AppendVarint(buf, c.GetTtlNanos())
	sum := sha256.Sum256(buf)
	return [16]byte(sum[:16])
}

func commitFingerprint(c *raftcmdv1.Commit) [16]byte {
	buf := []byte("commit")
	buf = binary.AppendUvarint(buf, uint64(len(c.GetReservationId())))
	buf = append(buf, c.GetReservationId()...)
	buf = binary.AppendVarint(buf, c.GetActual())
	sum := sha256.Sum256(buf)
	return [16]byte(sum[:16])
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

func reservationToRecord(rec *raftcmdv1.ReservationRecord, r stateRecord[reservation]) {
	v := r.state
	rec.Id, rec.Policy, rec.Key, rec.Estimate = r.key, v.policy, v.key, v.estimate
	rec.ReservedAtUnixNano, rec.SpentUntilUnixNano, rec.ExpiresAtUnixNano = v.reservedAt, v.spentUntil, v.expiresAt
}

func reservationFromRecord(rec *raftcmdv1.ReservationRecord) stateRecord[reservation] {
	return stateRecord[reservation]{key: rec.GetId(), expiresAt: rec.GetExpiresAtUnixNano(), state: reservation{
		policy: rec.GetPolicy(), key: rec.GetKey(), estimate: rec.GetEstimate(), reservedAt: rec.GetReservedAtUnixNano(),
		spentUntil: rec.GetSpentUntilUnixNano(), expiresAt: rec.GetExpiresAtUnixNano()}}
}

// noPolicy makes the reservations' sweep delete every expired entry: their
// expiry never depends on a policy.
func noPolicy(string) (admission.Policy, bool) { return admission.Policy{}, false }
