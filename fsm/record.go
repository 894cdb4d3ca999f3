package fsm

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// The kinds of request-ID records (dedupe.Entry.Kind).
const (
	recordAdmit uint8 = iota + 1
	recordLease
	recordReserve
	recordCommit
)

// record remembers the answer of o under its request ID, with o's slot, for
// retention (ns of log time) from o.now. Callers record before changing any
// state: a full table refuses with ErrDedupeFull and the operation changes
// nothing.
func (d *dataState) record(o op, k dedupe.Key, kind uint8, fp [16]byte, result []byte, retention int64) error {
	k.Caller = d.callers.intern(k.Caller)
	err := d.dedupe.Put(dedupe.Entry{Key: k, Kind: kind, Slot: o.slot, Fingerprint: fp, Result: result,
		ExpiresAt: addSaturating(o.now, retention)}, o.now)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrDedupeFull, err)
	}
	return nil
}

// maxCallerNames bounds the caller names a callerNames shares.
const maxCallerNames = 4096

// callerNames shares one copy of each caller's name among the request-ID
// entries that carry it — entries come from a few callers, and each
// decoded command brings its own copy (16 bytes or more per entry). It
// keeps the first maxCallerNames names it sees (at most 128 bytes each) for
// the FSM's life; later ones are not shared. It changes no result: only
// which copy of equal strings an entry holds.
type callerNames map[string]string

// intern returns the shared copy of name, making name the shared copy if
// there is none and room for it.
func (c callerNames) intern(name string) string {
	if shared, ok := c[name]; ok {
		return shared
	}
	if len(c) < maxCallerNames {
		c[name] = name
	}
	return name
}

// fingerprint builds the 128-bit identity of what a request asks: a kind
// prefix, then fields — strings length-prefixed so that no two payloads
// encode alike — hashed with SHA-256.
type fingerprint []byte

func newFingerprint(kind string) fingerprint { return append(make(fingerprint, 0, 96), kind...) }

func (b fingerprint) str(s string) fingerprint {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func (b fingerprint) num(v int64) fingerprint { return binary.AppendVarint(b, v) }
func (b fingerprint) count(n int) fingerprint { return binary.AppendUvarint(b, uint64(n)) }
func (b fingerprint) sum() [16]byte           { s := sha256.Sum256(b); return [16]byte(s[:16]) }
func (b fingerprint) check(policy, key string, cost int64) fingerprint {
	return b.str(policy).str(key).num(cost)
}

// admitFingerprint identifies what an Admit asks: every check's policy, key
// and cost, and its pacing wait.
func admitFingerprint(c *raftcmdv1.Admit) [16]byte {
	fp := newFingerprint("admit").check(c.GetPolicy(), c.GetKey(), c.GetCost())
	if len(c.GetAlso()) > 0 || c.GetMaxWaitNanos() != 0 {
		fp = fp.count(len(c.GetAlso()))
		for _, ch := range c.GetAlso() {
			fp = fp.check(ch.GetPolicy(), ch.GetKey(), ch.GetCost())
		}
		fp = fp.num(c.GetMaxWaitNanos())
	}
	return fp.sum()
}

func encodeAdmitRecord(r *AdmitResult) []byte {
	d := r.Decision
	rec := &raftcmdv1.AdmitRecord{
		Allowed:           d.Allowed,
		Limit:             d.Limit,
		Remaining:         d.Remaining,
		ResetAfterNanos:   int64(d.ResetAfter),
		RetryAfterNanos:   int64(d.RetryAfter),
		PolicyVersion:     r.PolicyVersion,
		DecidedAtUnixNano: r.DecidedAt,
		WaitNanos:         int64(r.Wait),
		ShadowDenied:      r.ShadowDenied,
		DeniedCheck:       int32(r.DeniedCheck),
		Multi:             r.Multi,
	}
	for _, c := range r.Checks {
		cd := c.Decision
		rec.Checks = append(rec.Checks, &raftcmdv1.CheckRecord{
			Policy: c.Policy, Key: c.Key, Cost: c.Cost,
			Allowed: cd.Allowed, Limit: cd.Limit, Remaining: cd.Remaining,
			ResetAfterNanos: int64(cd.ResetAfter), RetryAfterNanos: int64(cd.RetryAfter),
			PolicyVersion: c.PolicyVersion, ShadowDenied: c.ShadowDenied, Spent: c.Spent, ShiftedNanos: c.Shifted,
		})
	}
	return marshalRecord(rec)
}

func marshalRecord(rec *raftcmdv1.AdmitRecord) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		panic(fmt.Sprintf("fsm: encoding an admit record: %v", err))
	}
	return b
}

func decodeAdmitRecord(e dedupe.Entry) *raftcmdv1.AdmitRecord {
	var rec raftcmdv1.AdmitRecord
	if err := proto.Unmarshal(e.Result, &rec); err != nil {
		panic(fmt.Sprintf("fsm: recorded result of %q/%q is corrupt: %v", e.Key.Caller, e.Key.RequestID, err))
	}
	return &rec
}

// recordedAdmit answers a repeat of a recorded Admit: its first result,
// marked duplicate, or the reuse error when the repeat asks something else.
func recordedAdmit(e dedupe.Entry, fp [16]byte) interface{} {
	if e.Fingerprint != fp {
		return reusedRequestID(e)
	}
	rec := decodeAdmitRecord(e)
	res := &AdmitResult{
		Decision: admission.Decision{
			Allowed:    rec.GetAllowed(),
			Limit:      rec.GetLimit(),
			Remaining:  rec.GetRemaining(),
			ResetAfter: time.Duration(rec.GetResetAfterNanos()),
			RetryAfter: time.Duration(rec.GetRetryAfterNanos()),
		},
		PolicyVersion: rec.GetPolicyVersion(),
		ShadowDenied:  rec.GetShadowDenied(),
		DecidedAt:     rec.GetDecidedAtUnixNano(),
		Wait:          time.Duration(rec.GetWaitNanos()),
		Duplicate:     true,
		Multi:         rec.GetMulti(),
		DeniedCheck:   int(rec.GetDeniedCheck()),
	}
	for _, c := range rec.GetChecks() {
		res.Checks = append(res.Checks, CheckResult{
			Policy: c.GetPolicy(), Key: c.GetKey(), Cost: c.GetCost(),
			Decision: admission.Decision{
				Allowed: c.GetAllowed(), Limit: c.GetLimit(), Remaining: c.GetRemaining(),
				ResetAfter: time.Duration(c.GetResetAfterNanos()), RetryAfter: time.Duration(c.GetRetryAfterNanos()),
			},
			PolicyVersion: c.GetPolicyVersion(), ShadowDenied: c.GetShadowDenied(), Spent: c.GetSpent(), Shifted: c.GetShiftedNanos(),
		})
	}
	return res
}

// reusedRequestID is the error for a request ID that an earlier, different
// request of the same caller still holds.
func reusedRequestID(e dedupe.Entry) error {
	return &admission.FieldError{
		Field:  "request_id",
		Reason: fmt.Sprintf("%s was already used by caller %s for another request (operation, policy, key or cost differ); use a new request_id", admission.Quote(dedupe.SentRequestID(e.Key.RequestID)), admission.Quote(e.Key.Caller)),
		Err:    ErrRequestIDReused,
	}
}
