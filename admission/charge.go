package admission

import (
	"math"
	"math/bits"
)

// Caps of what Charge records, far beyond any admitted consumption, so that
// no later arithmetic on the state can overflow: a counter's count, and
// how far a token bucket's theoretical arrival time may run ahead of now.
const (
	maxChargedCount = int64(1) << 62
	maxChargedAhead = 2 * maxBurstWindow
)

// Charge records at now cost units of s under p that were already
// consumed (admitted locally and reported later), and returns the new
// state. Unlike Decide it never refuses: it spends even past the limit, so
// the key pays for them by denying later requests:
//
//   - token_bucket: the theoretical arrival time moves max(TAT, now) +
//     cost × T, past the burst if need be.
//   - fixed_window and quota: the current window's count grows by cost.
//   - sliding_window: the current window's count grows by cost (the
//     previous window's count rolls as Decide rolls it).
//
// Counts saturate at 2^62 and a token bucket's schedule at 2 × 3660 days
// ahead of now. A cost below 1, an invalid policy, a now outside the
// algorithm's range and the other algorithms return s unchanged. A state
// written by another algorithm counts as a new key.
func Charge(p Policy, s State, cost, now int64) State {
	if cost < 1 {
		return s
	}
	p = p.WithDefaults()
	k := kindOf(p.Algorithm)
	if s.Kind != k {
		s = State{}
	}
	switch p.Algorithm {
	case AlgorithmTokenBucket:
		t, _, ok := gcraParams(p)
		if !ok {
			return s
		}
		base, limit := max(s.TAT, now), int64(math.MaxInt64)
		if now <= math.MaxInt64-maxChargedAhead {
			limit = now + maxChargedAhead
		}
		hi, need := bits.Mul64(uint64(cost), uint64(t))
		if hi != 0 || need > uint64(math.MaxInt64) || base > limit-int64(need) {
			return s.withTAT(max(base, limit), now)
		}
		return s.withTAT(base+int64(need), now)
	case AlgorithmFixedWindow:
		if checkFixedWindow(p) != nil {
			return s
		}
		start, _, ok := fixedWindowAt(int64(p.Period), now)
		if !ok {
			return s
		}
		return chargeCounter(k, s, cost, start)
	case AlgorithmQuota:
		if checkQuota(p) != nil {
			return s
		}
		start, _, ok := calendarPeriod(p.Calendar, now)
		if !ok {
			return s
		}
		return chargeCounter(k, s, cost, start)
	case AlgorithmSlidingWindow:
		if checkSlidingWindow(p) != nil || now < 0 || now > slidingMaxNow {
			return s
		}
		v, ok := swViewAt(s, int64(p.Period), now)
		if !ok {
			return s
		}
		return State{Kind: k, Start: v.start, Count: addCapped(v.curr, cost), Prev: v.prev}
	}
	return s
}

// chargeCounter adds cost to the count of the window starting at start
// (0 when s is another window's).
func chargeCounter(k Kind, s State, cost, start int64) State {
	var count int64
	if s.Kind == k && s.Start == start && s.Count > 0 {
		count = s.Count
	}
	return State{Kind: k, Start: start, Count: addCapped(count, cost)}
}

// addCapped is a + b (both ≥ 0) saturated at maxChargedCount.
func addCapped(a, b int64) int64 {
	if b > maxChargedCount-a {
		return maxChargedCount
	}
	return a + b
}
