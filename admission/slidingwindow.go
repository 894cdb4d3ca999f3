package admission

import (
	"math"
	"math/bits"
	"time"
)

// sliding_window: the sliding counter. Fixed windows of one period aligned
// to the Unix epoch (window k is [k×P, (k+1)×P)); the rolling period ending
// at now, elapsed e into window k, is estimated as
//
//	prev × (P − e)/P + curr
//
// where curr is the count of window k and prev that of window k−1: the
// previous window is assumed to have been spread evenly. A request of cost c
// is allowed iff estimate + c ≤ limit, evaluated exactly in integers:
//
//	prev × (P − e) + (curr + c) × P ≤ limit × P   (128-bit products)
//
// or equivalently c ≤ limit − curr − ceil(prev × (P − e)/P), which is the
// Remaining reported before the decision: Remaining is always the largest
// cost that would be allowed now (max_cost aside), floor(limit − estimate).
//
// # Error bound (compared with an exact rolling window)
//
// The estimate is exact only if the previous window's units were spread
// evenly. Over-admission: for admitted requests at times a ≤ b with
// Δ = b − a < P, the units admitted in [a, b] are at most
//
//	limit + floor(limit × (Δ − 1ns)/P)   (and at most limit when Δ = 0)
//
// so any rolling period (any interval of length P) holds at most
// limit + floor(limit × (P − 2ns)/P) ≤ 2×limit − 1 units: fewer than the
// 2×limit of fixed windows, but not by much. Proof: let b be e into window
// k. If a is in window k, the units are at most curr_k ≤ limit. Otherwise a
// is in window k−1 (Δ < P), the units are at most prev + curr_k(b), and the
// last admission in window k, at e' ≤ e, ensured prev×(P−e')/P + curr_k(b) ≤
// limit; so the units are at most limit + prev×e/P ≤ limit + limit×e/P, with
// e ≤ Δ − 1ns because a < k×P. The bound is attained: limit units in the last
// nanosecond of a window (after an empty one), then floor(limit×(P−2)/P)
// units 2ns before the next window ends; for 2×limit ≤ P (every limit when
// P ≥ 2s) that is exactly 2×limit − 1 in a rolling period. Short spans are
// where it beats fixed windows: 100/min admits at most 101 units in any
// second (fixed windows: 200).
//
// Under-admission: a request is always allowed when it fits with everything
// admitted since the start of the previous window (the estimate is at most
// prev + curr), but it may be refused while the exact rolling period is
// empty, because units from early in the previous window, which have left
// the rolling period, still weigh ceil(prev × (P − e)/P).
//
// State: Start (window k's start), Count (curr), Prev (the count of window
// k−1). A state whose window is older is rolled forward: one window later
// its Count becomes prev and curr is 0; two or more, both are 0. After a
// policy's period changes, a state is read in the window of the new period
// that holds its Start, so its counts stay in force (strict) until they
// roll out.

// slidingMaxNow is the latest now (Unix ns, about the year 2259) at which
// the sliding algorithms decide; beyond it, and before 0, they fail closed.
// Every time they compute, now plus at most 3 periods, fits in an int64.
const slidingMaxNow = math.MaxInt64 - 3*int64(maxPeriod)

// checkSlidingWindow validates a sliding_window policy (defaults applied),
// first problem first: calendar unset; limit 1..1e9; period a whole number
// of milliseconds from 1s to 366 days; burst unset or equal to limit;
// max_cost 1..limit.
func checkSlidingWindow(p Policy) *FieldError {
	p = p.WithDefaults()
	if p.Calendar != "" {
		return policyError("calendar", "is only for algorithm quota")
	}
	if p.Limit < 1 || p.Limit > maxLimit {
		return policyError("limit", "must be between 1 and %d (got %d)", maxLimit, p.Limit)
	}
	if p.Period < time.Second || p.Period > maxPeriod || p.Period%time.Millisecond != 0 {
		return policyError("period", "must be a whole number of milliseconds between 1s and 366 days for sliding_window (got %v)", p.Period)
	}
	return checkSlidingFields(p)
}

// checkSlidingFields checks burst and max_cost of a sliding policy with
// defaults applied, in that order.
func checkSlidingFields(p Policy) *FieldError {
	if p.Burst != p.Limit {
		return policyError("burst", "must be unset or equal to limit %d for %s, which has no separate burst (got %d)", p.Limit, p.Algorithm, p.Burst)
	}
	if p.MaxCost < 1 || p.MaxCost > p.Limit {
		return policyError("max_cost", "must be between 1 and limit %d (got %d)", p.Limit, p.MaxCost)
	}
	return nil
}

// swView is a sliding-window state as seen at one instant: the current
// window's start and how far into it the instant is, and the counts of the
// current and the previous window.
type swView struct {
	start, elapsed int64
	curr, prev     int64
}

// swViewAt rolls s forward to now (0 ≤ now ≤ slidingMaxNow). A state whose
// window is after now's (impossible when time comes from the log) is seen
// at the start of its own window, as if now were then, so that time never
// runs backwards; ok is false if that window is beyond slidingMaxNow.
func swViewAt(s State, period, now int64) (v swView, ok bool) {
	k, ks := now/period, swFloorDiv(s.Start, period)
	v = swView{start: k * period, elapsed: now % period}
	switch {
	case ks > k:
		if s.Start > slidingMaxNow {
			return v, false
		}
		v = swView{start: ks * period, curr: s.Count, prev: s.Prev}
	case ks == k:
		v.curr, v.prev = s.Count, s.Prev
	case ks == k-1:
		v.prev = s.Count
	}
	v.curr, v.prev = max(v.curr, 0), max(v.prev, 0)
	return v, true
}

// remaining is floor(limit − estimate) clamped to 0: the largest cost that
// fits now.
func (v swView) remaining(limit, period int64) int64 {
	r := limit - v.curr
	if r <= 0 {
		return 0
	}
	return max(0, r-swWeight(v.prev, period-v.elapsed, period))
}

// emptyAt is when v's counts have both rolled out (now if they are 0).
func (v swView) emptyAt(now, period int64) int64 {
	switch {
	case v.curr > 0:
		return v.start + 2*period
	case v.prev > 0:
		return v.start + period
	default:
		return now
	}
}

// retryAt is the first instant at which cost (1..limit) fits, if nothing
// else is spent, for a request denied now. The estimate never increases
// while nothing is spent (it is continuous at window boundaries: prev×P/P +
// 0 = curr), so the first instant is found by solving the inequality in the
// current window, else in the next one (where prev is curr and curr 0), else
// at the start of the one after (where both are 0).
func (v swView) retryAt(limit, period, cost int64) int64 {
	if room := limit - v.curr - cost; room >= 0 {
		if e := swFirstFit(v.prev, room, period); e < period {
			return v.start + e
		}
	}
	next := v.start + period
	if e := swFirstFit(v.curr, limit-cost, period); e < period {
		return next + e
	}
	return next + period
}

// swFirstFit returns the smallest elapsed e in [0, period] with
// prev × (period − e) ≤ room × period (prev, room ≥ 0).
func swFirstFit(prev, room, period int64) int64 {
	if room >= prev {
		return 0
	}
	// room < prev, so room × period / prev < period fits in 64 bits.
	hi, lo := bits.Mul64(uint64(room), uint64(period))
	q, _ := bits.Div64(hi, lo, uint64(prev))
	return period - int64(q)
}

// swWeight returns ceil(prev × w / period) for 0 ≤ prev, 0 ≤ w ≤ period:
// the previous window's weight in whole units, rounded up.
func swWeight(prev, w, period int64) int64 {
	hi, lo := bits.Mul64(uint64(prev), uint64(w))
	q, r := bits.Div64(hi, lo, uint64(period)) // q ≤ prev: no overflow
	if r != 0 {
		q++
	}
	return int64(q)
}

// swFloorDiv is floor(t / period) for period > 0 and any t.
func swFloorDiv(t, period int64) int64 {
	q := t / period
	if t%period < 0 {
		q--
	}
	return q
}

// decideSlidingWindow decides a request of cost at now under a
// sliding_window policy; see the comment at the top of this file. p must be
// valid and cost checked. On allow the new state is the current window's
// start, curr + cost and prev; Remaining is floor(limit − estimate) after
// the decision; ResetAfter is the time until the state is empty (the end of
// the window after the current one, once curr > 0). On denial the state is
// returned unchanged and RetryAfter is the exact wait until the same cost
// fits if nothing else is spent: denied at now+RetryAfter−1, allowed at
// now+RetryAfter.
//
// It is total and fails closed: an invalid policy, a cost outside
// 1..limit, or a now outside [0, slidingMaxNow] is denied with RetryAfter
// NeverRetry and s unchanged (an invalid policy also reports Limit 0).
func decideSlidingWindow(p Policy, s State, cost, now int64) (State, Decision) {
	p = p.WithDefaults()
	if checkSlidingWindow(p) != nil {
		return s, Decision{RetryAfter: NeverRetry}
	}
	limit, period := p.Limit, int64(p.Period)
	d := Decision{Limit: limit, RetryAfter: NeverRetry}
	if now < 0 || now > slidingMaxNow {
		return s, d
	}
	v, ok := swViewAt(s, period, now)
	if !ok {
		return s, d
	}
	room := v.remaining(limit, period)
	if cost >= 1 && cost <= room { // room ≤ limit − curr, so curr + cost ≤ limit
		d.Allowed, d.Remaining, d.RetryAfter = true, room-cost, 0
		d.ResetAfter = time.Duration(v.start + 2*period - now)
		return State{Kind: KindSlidingWindow, Start: v.start, Count: v.curr + cost, Prev: v.prev}, d
	}
	d.Remaining = room
	d.ResetAfter = time.Duration(v.emptyAt(now, period) - now)
	if cost >= 1 && cost <= limit {
		d.RetryAfter = time.Duration(v.retryAt(limit, period, cost) - now)
	}
	return s, d
}

// expiresSlidingWindow is when s is equivalent to the zero State: the end
// of the window after s's window once Count > 0 (both counts rolled out),
// the end of s's window if only Prev > 0, 0 if both are 0. Times before 0
// are reported as 0 and times beyond int64 as math.MaxInt64.
func expiresSlidingWindow(p Policy, s State) int64 {
	period := int64(p.Period)
	if period <= 0 || (s.Count <= 0 && s.Prev <= 0) {
		return 0
	}
	n := int64(1)
	if s.Count > 0 {
		n = 2
	}
	k := swFloorDiv(s.Start, period)
	switch {
	case k < -n:
		return 0
	case k > math.MaxInt64/period-n:
		return math.MaxInt64
	}
	return (k + n) * period
}
