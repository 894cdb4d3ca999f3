package admission

import (
	"math"
	"time"
)

// Bucket is the GCRA state of one key: its theoretical arrival time (TAT),
// in Unix nanoseconds. The bucket is full at any now ≥ TAT, and before that
// holds max(0, floor((Burst×T − (TAT − now)) / T)) whole units (T is the
// policy's EmissionInterval). The zero value is a full bucket for every
// now ≥ 0, so an absent key is decided with Bucket{}.
type Bucket struct {
	TAT int64
}

// ExpiresAt returns the Unix-nano time from which b is full again, i.e.
// equivalent to absent state: b.TAT. A caller may delete the key's state
// once its logged now is ≥ ExpiresAt, without changing any later decision.
func (b Bucket) ExpiresAt() int64 { return b.TAT }

// Decision is the outcome of one admission decision.
type Decision struct {
	// Allowed reports whether the request may proceed; when false nothing
	// was spent.
	Allowed bool
	// Limit is the bucket's capacity: the policy's burst.
	Limit int64
	// Remaining is the number of whole units left after the decision,
	// 0..Limit.
	Remaining int64
	// ResetAfter is the time from now until the bucket is full again, after
	// the decision (≥ 0). It equals ExpiresAt of the returned bucket minus now.
	ResetAfter time.Duration
	// RetryAfter is zero when allowed. When denied, it is the exact time
	// until the same cost would be allowed if nothing else spends: at
	// now+RetryAfter−1 it is still denied, at now+RetryAfter it is allowed.
	// NeverRetry (math.MaxInt64) means it can never be allowed: the cost
	// exceeds the capacity, the policy is invalid, or the new state would
	// not fit in an int64.
	RetryAfter time.Duration
}

// NeverRetry is the RetryAfter of a request that can never be allowed.
const NeverRetry = time.Duration(math.MaxInt64)

// DecideTokenBucket decides a request of the given cost at time now (Unix
// nanoseconds, from the log) against the bucket b under policy p, using GCRA
// in integer nanoseconds with weighted cost. It returns the new bucket and
// the decision. p must be valid (Policy.Validate) and cost checked
// (Policy.CheckRequest).
//
// With T = p.EmissionInterval(), B = p.Capacity() and
// base = max(b.TAT, now), the request is allowed iff
// base + cost×T − now ≤ B×T; then the new TAT is base + cost×T. A denied
// request returns b unchanged: a denial never spends. Remaining is
// floor((B×T − (TAT − now)) / T) for the new (allowed) or current effective
// (denied) TAT, clamped to 0; on denial RetryAfter is
// base + cost×T − B×T − now, exact to the nanosecond.
//
// It is pure and total: it never panics and never overflows, for any p, b,
// cost and now. Results are exact for now ≥ 0 and
// now ≤ math.MaxInt64 − B×T (until about the year 2252). Outside the
// preconditions it fails closed: an invalid policy, or a cost below 1 or
// above the capacity, is denied with RetryAfter NeverRetry and b unchanged
// (an invalid policy also reports Limit and Remaining 0); a request whose new
// TAT would exceed math.MaxInt64 is denied the same way. A b.TAT far in the
// future (time went backwards, or the policy shrank) is simply denied with
// the exact wait, saturated at NeverRetry.
func DecideTokenBucket(p Policy, b Bucket, cost int64, now int64) (Bucket, Decision) {
	t, burst, ok := gcraParams(p)
	if !ok {
		return b, Decision{RetryAfter: NeverRetry}
	}
	// All spans are in uint64 nanoseconds: window = burst×t ≤ maxBurstWindow
	// (checked by gcraParams), and off, the current TAT's distance ahead of
	// now, is computed without wrapping for any int64 pair.
	window := uint64(burst) * uint64(t)
	off := uint64(0)
	if b.TAT > now {
		off = uint64(b.TAT) - uint64(now) // exact: the true difference is in (0, 2^64)
	}
	d := Decision{Limit: burst, RetryAfter: NeverRetry}
	if cost >= 1 && cost <= burst {
		need := uint64(cost) * uint64(t) // ≤ window
		if off <= window-need {
			newOff := off + need // ≤ window < 2^59
			if now <= math.MaxInt64-int64(newOff) {
				d.Allowed = true
				d.Remaining = int64((window - newOff) / uint64(t))
				d.ResetAfter = time.Duration(newOff)
				d.RetryAfter = 0
				return Bucket{TAT: now + int64(newOff)}, d
			}
			// The new TAT does not fit in an int64: fail closed, forever.
		} else {
			// Allowed once off has shrunk to window-need.
			d.RetryAfter = saturate(off - (window - need))
		}
	}
	if off < window {
		d.Remaining = int64((window - off) / uint64(t))
	}
	d.ResetAfter = saturate(off)
	return b, d
}

// gcraParams returns the emission interval and capacity of p, and whether p
// is numerically valid (so that capacity × interval ≤ maxBurstWindow).
func gcraParams(p Policy) (t, burst int64, ok bool) {
	p = p.WithDefaults()
	if checkNumbers(p) != nil {
		return 0, 0, false
	}
	return p.EmissionInterval(), p.Burst, true
}

// saturate converts a uint64 span to a Duration, capping at NeverRetry.
func saturate(ns uint64) time.Duration {
	if ns > math.MaxInt64 {
		return NeverRetry
	}
	return time.Duration(ns)
}
