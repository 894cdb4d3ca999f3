package jepsen

import (
	"fmt"
	"sort"
	"time"
)

// Verdict is one checker's result.
type Verdict struct {
	Checker    string   `json:"checker"`
	OK         bool     `json:"ok"`
	Summary    string   `json:"summary"`
	Violations []string `json:"violations,omitempty"`
}

func (v *Verdict) violate(format string, args ...any) {
	v.OK = false
	v.Violations = append(v.Violations, fmt.Sprintf(format, args...))
}

type reqKey struct{ caller, id string }

// keyStats summarises, per key, the request IDs by what is known of them.
type keyStats struct {
	allowed  map[reqKey]bool // at least one acknowledged allowed answer
	answered map[reqKey]bool
	sent     map[reqKey]bool
}

func statsByKey(ops []Op) map[string]*keyStats {
	m := map[string]*keyStats{}
	for _, op := range ops {
		s := m[op.Key]
		if s == nil {
			s = &keyStats{allowed: map[reqKey]bool{}, answered: map[reqKey]bool{}, sent: map[reqKey]bool{}}
			m[op.Key] = s
		}
		k := reqKey{op.Caller, op.RequestID}
		s.sent[k] = true
		if op.Outcome.OK() {
			s.answered[k] = true
		}
		if op.Outcome == OutcomeAllowed {
			s.allowed[k] = true
		}
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// CheckOverAdmission checks that, per key, the distinct request IDs with an
// acknowledged allowed answer do not exceed capacity (cost 1, refill negligible).
func CheckOverAdmission(ops []Op, capacity int64) Verdict {
	v := Verdict{Checker: "no-over-admission", OK: true}
	stats := statsByKey(ops)
	total := 0
	for _, key := range sortedKeys(stats) {
		n := len(stats[key].allowed)
		total += n
		if int64(n) > capacity {
			v.violate("key %q: %d distinct request IDs acknowledged allowed > capacity %d", key, n, capacity)
		}
	}
	v.Summary = fmt.Sprintf("%d keys, %d acknowledged admits, capacity %d per key", len(stats), total, capacity)
	return v
}

// CheckAtMostOnce checks that every answer for one (caller, request ID) agrees
// with the first answer (allowed, remaining, decided_at; for leases also the
// lease, token, expiry and staleness) and that every answer after the first
// is marked duplicate. Calls without a request ID (CheckFence) are skipped.
func CheckAtMostOnce(ops []Op) Verdict {
	v := Verdict{Checker: "at-most-once", OK: true}
	sorted := append([]Op(nil), ops...)
	sortByEnd(sorted)
	first := map[reqKey]Op{}
	repeats := 0
	for _, op := range sorted {
		if !op.Outcome.OK() || op.RequestID == "" {
			continue
		}
		k := reqKey{op.Caller, op.RequestID}
		f, seen := first[k]
		if !seen {
			first[k] = op
			continue
		}
		repeats++
		if op.Outcome != f.Outcome || op.Remaining != f.Remaining || op.DecidedAt != f.DecidedAt ||
			op.LeaseID != f.LeaseID || op.Token != f.Token || op.ExpiresAt != f.ExpiresAt || op.Stale != f.Stale {
			v.violate("request %s/%s: op %d answered %s, but first answer (op %d) was %s", op.Caller, op.RequestID,
				op.ID, describeAnswer(op), f.ID, describeAnswer(f))
		}
		// A stale refusal is an error answer: it carries no duplicate flag.
		if !op.Duplicate && !op.Stale {
			v.violate("request %s/%s: op %d is a repeat answer (first was op %d) but not marked duplicate", op.Caller, op.RequestID, op.ID, f.ID)
		}
	}
	v.Summary = fmt.Sprintf("%d answered request IDs, %d repeat answers", len(first), repeats)
	return v
}

func describeAnswer(op Op) string {
	s := fmt.Sprintf("%s decided_at=%s", op.Outcome, fmtNanos(op.DecidedAt))
	if op.Kind == KindAdmit || op.Kind == "" {
		return s + fmt.Sprintf(" remaining=%d", op.Remaining)
	}
	return s + fmt.Sprintf(" token=%d lease=%s expires_at=%s stale=%v", op.Token, op.LeaseID, fmtNanos(op.ExpiresAt), op.Stale)
}

func fmtNanos(n int64) string { return time.Unix(0, n).UTC().Format(time.RFC3339Nano) }

// CheckDurability checks final per-key spent units (capacity − remaining from
// a Peek after healing) against [acked allowed, acked allowed + unknown], where
// unknown counts request IDs that never got an answer.
func CheckDurability(ops []Op, capacity int64, finalRemaining map[string]int64) Verdict {
	v := Verdict{Checker: "durability", OK: true}
	stats := statsByKey(ops)
	for _, key := range sortedKeys(stats) {
		s := stats[key]
		acked := int64(len(s.allowed))
		unknown := int64(0)
		for k := range s.sent {
			if !s.answered[k] {
				unknown++
			}
		}
		rem, ok := finalRemaining[key]
		if !ok {
			v.violate("key %q: no final Peek", key)
			continue
		}
		spent := capacity - rem
		if spent < acked || spent > acked+unknown {
			v.violate("key %q: spent %d (remaining %d) outside [acked %d, acked+unknown %d]", key, spent, rem, acked, acked+unknown)
		}
	}
	v.Summary = fmt.Sprintf("%d keys peeked after heal", len(finalRemaining))
	return v
}
