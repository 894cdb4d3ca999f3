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

// admitFingerprint identifies what an Admit asks: its policy, key and cost,
// each length-prefixed so no two payloads encode alike, hashed to 128 bits.
func admitFingerprint(c *raftcmdv1.Admit) [16]byte {
	buf := make([]byte, 0, 16+len(c.GetPolicy())+len(c.GetKey()))
	buf = append(buf, "admit"...)
	buf = binary.AppendUvarint(buf, uint64(len(c.GetPolicy())))
	buf = append(buf, c.GetPolicy()...)
	buf = binary.AppendUvarint(buf, uint64(len(c.GetKey())))
	buf = append(buf, c.GetKey()...)
	buf = binary.AppendVarint(buf, c.GetCost())
	sum := sha256.Sum256(buf)
	return [16]byte(sum[:16])
}

func encodeAdmitRecord(r *AdmitResult) []byte {
	d := r.Decision
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&raftcmdv1.AdmitRecord{
		Allowed:           d.Allowed,
		Limit:             d.Limit,
		Remaining:         d.Remaining,
		ResetAfterNanos:   int64(d.ResetAfter),
		RetryAfterNanos:   int64(d.RetryAfter),
		PolicyVersion:     r.PolicyVersion,
		DecidedAtUnixNano: r.DecidedAt,
	})
	if err != nil {
		panic(fmt.Sprintf("fsm: encoding an admit record: %v", err))
	}
	return b
}

// recordedAdmit answers a repeat of a recorded Admit: its first result,
// marked duplicate, or the reuse error when the repeat asks something else.
func recordedAdmit(e dedupe.Entry, fp [16]byte) interface{} {
	if e.Fingerprint != fp {
		return &admission.FieldError{
			Field:  "request_id",
			Reason: fmt.Sprintf("%q was already used by caller %q for another request (policy, key or cost differ); use a new request_id", e.Key.RequestID, e.Key.Caller),
			Err:    ErrRequestIDReused,
		}
	}
	var rec raftcmdv1.AdmitRecord
	if err := proto.Unmarshal(e.Result, &rec); err != nil {
		panic(fmt.Sprintf("fsm: recorded result of %q/%q is corrupt: %v", e.Key.Caller, e.Key.RequestID, err))
	}
	return &AdmitResult{
		Decision: admission.Decision{
			Allowed:    rec.GetAllowed(),
			Limit:      rec.GetLimit(),
			Remaining:  rec.GetRemaining(),
			ResetAfter: time.Duration(rec.GetResetAfterNanos()),
			RetryAfter: time.Duration(rec.GetRetryAfterNanos()),
		},
		PolicyVersion: rec.GetPolicyVersion(),
		DecidedAt:     rec.GetDecidedAtUnixNano(),
		Duplicate:     true,
	}
}
