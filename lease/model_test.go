package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/quorate/quorate/lease"
)

// t0 is an arbitrary log time, Unix nanoseconds.
const t0 = int64(1_700_000_000_000_000_000)

// modelLease is one lease ever issued, with its current expiry.
type modelLease struct {
	lease.Lease
	released bool
}

// model is a brute-force semaphore: every lease ever issued to a key, in
// issue order, with its live interval [AcquiredAt, ExpiresAt) cut short by a
// release. It never forgets, so it also remembers across reclaims.
type model struct {
	issued []modelLease
}

func (m *model) live(l modelLease, at int64) bool { return !l.released && at < l.ExpiresAt }

// liveAt returns the leases live at at, in issue order.
func (m *model) liveAt(at int64) []lease.Lease {
	var out []lease.Lease
	for _, l := range m.issued {
		if m.live(l, at) {
			out = append(out, l.Lease)
		}
	}
	return out
}

// liveCount returns the number of leases live at at.
func (m *model) liveCount(at int64) int64 {
	var n int64
	for _, l := range m.issued {
		if m.live(l, at) {
			n++
		}
	}
	return n
}

// find returns the index in issued of the live lease with this token, or -1.
func (m *model) find(token, at int64) int {
	for i := len(m.issued) - 1; i >= 0; i-- {
		if l := m.issued[i]; l.Token == token && m.live(l, at) {
			return i
		}
	}
	return -1
}

func (m *model) lastToken() int64 {
	if len(m.issued) == 0 {
		return 0
	}
	return m.issued[len(m.issued)-1].Token
}

// retryAfter is the first time after now at which fewer than limit leases
// are live, found by trying every expiry of a live lease.
func (m *model) retryAfter(tb testing.TB, limit, now int64) time.Duration {
	tb.Helper()
	var cands []int64
	for _, l := range m.liveAt(now) {
		cands = append(cands, l.ExpiresAt)
	}
	slices.Sort(cands)
	for _, c := range cands {
		if m.liveCount(c) < limit {
			return time.Duration(c - now)
		}
	}
	tb.Fatalf("model: no time frees a slot (limit %d)", limit)
	return 0
}
