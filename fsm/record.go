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

// recordScratch is the message an Admit's record is built in before it is
// encoded: one per data state, reused by every Admit it records, so that
// a record costs no allocation of its own.
type recordScratch struct {
	rec    raftcmdv1.AdmitRecord
	checks []*raftcmdv1.CheckRecord // rec.Checks' messages, kept between records
}

// encodeAdmitRecord appends the encoding of r's record to buf, building the
// message in sc.
func encodeAdmitRecord(r *AdmitResult, sc *recordScratch, buf []byte) []byte {
	d := r.Decision
	rec := &sc.rec
	proto.Reset(rec)
	rec.Allowed, rec.Limit, rec.Remaining = d.Allowed, d.Limit, d.Remaining
	rec.ResetAfterNanos, rec.RetryAfterNanos = int64(d.ResetAfter), int64(d.RetryAfter)
	rec.PolicyVersion, rec.DecidedAtUnixNano, rec.WaitNanos = r.PolicyVersion, r.DecidedAt, int64(r.Wait)
	rec.ShadowDenied, rec.DeniedCheck, rec.Multi = r.ShadowDenied, int32(r.DeniedCheck), r.Multi
	for len(sc.checks) < len(r.Checks) {
		sc.checks = append(sc.checks, new(raftcmdv1.CheckRecord))
	}
	rec.Checks = sc.checks[:len(r.Checks)]
	for i, c := range r.Checks {
		cd, cr := c.Decision, rec.Checks[i]
		proto.Reset(cr)
		cr.Policy, cr.Key, cr.Cost = c.Policy, c.Key, c.Cost
		cr.Allowed, cr.Limit, cr.Remaining = cd.Allowed, cd.Limit, cd.Remaining
		cr.ResetAfterNanos, cr.RetryAfterNanos = int64(cd.ResetAfter), int64(cd.RetryAfter)
		cr.PolicyVersion, cr.ShadowDenied, cr.Spent, cr.ShiftedNanos = c.PolicyVersion, c.ShadowDenied, c.Spent, c.Shifted
	}
	return marshalRecord(rec, buf)
}

// marshalRecord appends rec's encoding to buf.
func marshalRecord(rec *raftcmdv1.AdmitRecord, buf []byte) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(buf, rec)
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
