package jepsen

import (
	"encoding/json"
	"os"
	"sort"
	"sync"
	"time"
)

// Outcome of one attempt.
type Outcome string

const (
	OutcomeAllowed Outcome = "allowed" // ok, allowed
	OutcomeDenied  Outcome = "denied"  // ok, denied
	OutcomeFail    Outcome = "fail"    // error that proves the request was never sent (checkers still treat it as unknown)
	OutcomeUnknown Outcome = "unknown" // error after which the request may or may not have been applied
)

// OK reports whether the attempt got an answer.
func (o Outcome) OK() bool { return o == OutcomeAllowed || o == OutcomeDenied }

// OpKind names the API call of an Op.
type OpKind string

const (
	KindAdmit   OpKind = "admit"   // AdmissionService.Admit
	KindAcquire OpKind = "acquire" // LeaseService.AcquireLease
	KindRenew   OpKind = "renew"   // LeaseService.RenewLease
	KindRelease OpKind = "release" // LeaseService.ReleaseLease
	KindCheck   OpKind = "check"   // LeaseService.CheckFence
)

// Op is one call through package client, its retries included; a request
// sent again with the same RequestID in a later call (a dedupe probe, or an
// unknown acquire sent again to learn its outcome) is another Op.
//
// Outcome for lease calls: allowed = acquired, renewed, released, or
// CheckFence answered held; denied = acquire refused at the limit, a
// renew/release/check refused because the token is no longer live (Stale,
// FailedPrecondition), or CheckFence answered not held.
type Op struct {
	ID        int64     `json:"id"`
	Kind      OpKind    `json:"kind"`
	Policy    string    `json:"policy"`
	Client    int       `json:"client"`
	RequestID string    `json:"request_id"`
	Caller    string    `json:"caller"`
	Key       string    `json:"key"`
	Node      string    `json:"node"`          // the node of the last attempt: the one that answered, when answered
	Via       string    `json:"via,omitempty"` // a call through package client: every node its attempts went to, in order
	Attempt   int       `json:"attempt"`       // 0 for the first send of a request ID
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Outcome   Outcome   `json:"outcome"`
	Remaining int64     `json:"remaining,omitempty"`
	DecidedAt int64     `json:"decided_at,omitempty"` // unix nanoseconds
	Duplicate bool      `json:"duplicate,omitempty"`
	Error     string    `json:"error,omitempty"`
	// Local: an admit decided in memory from a grant (client.LocalGrant);
	// DecidedAt is then the log time its units were granted.
	Local bool `json:"local,omitempty"`

	// Lease calls only.
	LeaseID   string `json:"lease_id,omitempty"`
	Token     int64  `json:"token,omitempty"`      // fencing token: received from acquire, sent with renew/release/check
	ExpiresAt int64  `json:"expires_at,omitempty"` // unix nanoseconds: the lease's expiry in the answer (acquire, renew, check)
	Stale     bool   `json:"stale,omitempty"`      // refused with FailedPrecondition: the token is no longer live
}

// History is a concurrency-safe, append-only list of ops.
type History struct {
	mu  sync.Mutex
	ops []Op
}

// Add appends op, assigning its ID.
func (h *History) Add(op Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.ID = int64(len(h.ops))
	h.ops = append(h.ops, op)
}

// Ops returns a copy of the ops sorted by end time.
func (h *History) Ops() []Op {
	h.mu.Lock()
	ops := append([]Op(nil), h.ops...)
	h.mu.Unlock()
	sortByEnd(ops)
	return ops
}

func sortByEnd(ops []Op) {
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].End.Before(ops[j].End) })
}

// WriteJSONL writes one op per line.
func WriteJSONL(path string, ops []Op) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for i := range ops {
		if err := enc.Encode(&ops[i]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
