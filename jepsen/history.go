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

// Op is one attempt of one Admit; retries share RequestID and get their own Op.
type Op struct {
	ID        int64     `json:"id"`
	Client    int       `json:"client"`
	RequestID string    `json:"request_id"`
	Caller    string    `json:"caller"`
	Key       string    `json:"key"`
	Node      string    `json:"node"`
	Attempt   int       `json:"attempt"` // 0 for the first send of a request ID
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Outcome   Outcome   `json:"outcome"`
	Remaining int64     `json:"remaining,omitempty"`
	DecidedAt int64     `json:"decided_at,omitempty"` // unix nanoseconds
	Duplicate bool      `json:"duplicate,omitempty"`
	Error     string    `json:"error,omitempty"`
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
