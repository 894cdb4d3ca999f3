package admission

import (
	"math"
	"time"
)

// fixed_window: windows of one period aligned to the Unix epoch (the window
// containing now starts at now − now mod period), up to limit units each.
// The state is State.Start, the window's start, and State.Count, the units
// admitted in it; a state of any other window counts as empty.
//
// Its known weakness is the window boundary: up to 2 × limit units can be
// admitted within a moment, limit just before a window ends and limit just
// after. Use token_bucket or sliding_log where that matters.

// minFixedWindowPeriod is the shortest fixed window; periods are whole
// seconds ("N × unit", any unit from second to day).
const minFixedWindowPeriod = time.Second

// checkFixedWindow checks a fixed_window policy with defaults applied, in
// the order calendar, limit, period, burst, max_cost:
//
//   - calendar: unset (it is for quota).
//   - limit: 1..1e9.
//   - period: a whole number of seconds, 1s..366 days.
//   - burst: unset or equal to limit (checkCounterCaps).
//   - max_cost: 1..limit (checkCounterCaps).
func checkFixedWindow(p Policy) *FieldError {
	if p.Calendar != "" {
		return policyError("calendar", "is only for algorithm quota")
	}
	if p.Limit < 1 || p.Limit > maxLimit {
		return policyError("limit", "must be between 1 and %d (got %d)", maxLimit, p.Limit)
	}
	if p.Period < minFixedWindowPeriod || p.Period > maxPeriod || p.Period%time.Second != 0 {
		return policyError("period", "must be a whole number of seconds between 1s and 366 days for fixed_window (got %v)", p.Period)
	}
	return checkCounterCaps(p)
}

// checkCounterCaps checks burst and max_cost of a counting algorithm
// (fixed_window, quota), with defaults applied and limit already checked.
// Such a counter admits up to limit units per window at any pace, so it has
// no burst separate from its limit: burst must be unset (0, which defaults
// to limit) or equal to limit. max_cost must be 1..limit (0 means limit).
func checkCounterCaps(p Policy) *FieldError {
	if p.Burst != p.Limit {
		return policyError("burst", "must be unset or equal to limit %d for %s (got %d): it admits up to limit units per window at any pace, so it has no burst separate from its limit",
			p.Limit, p.Algorithm, p.Burst)
	}
	if p.MaxCost < 1 || p.MaxCost > p.Limit {
		return policyError("max_cost", "must be between 1 and limit %d (got %d)", p.Limit, p.MaxCost)
	}
	return nil
}

// decideFixedWindow decides a request of cost at now under a fixed_window
// policy: allowed iff the units already admitted in now's window plus cost
// are at most limit. See decideCounter for the decision's fields.
//
// It is total: it never panics or overflows for any p, s, cost and now, and
// fails closed (denied, state unchanged, RetryAfter NeverRetry) for an
// invalid policy, a cost outside 1..limit, or a now whose window does not
// fit in an int64 (start below math.MinInt64 or end above math.MaxInt64).
// It is exact for every other now, which includes every now from
// math.MinInt64 + period to math.MaxInt64 − period (1677-09-21 to
// 2262-04-11, less at most 366 days at each end; [0, year 2200] is far
// inside), except that a denial's RetryAfter is NeverRetry when the next
// window would not fit either. Arithmetic: now − now mod period and
// start + period are checked before they are computed; counts stay at most
// limit ≤ 1e9 (decideCounter).
func decideFixedWindow(p Policy, s State, cost, now int64) (State, Decision) {
	p = p.WithDefaults()
	if checkFixedWindow(p) != nil {
		return s, Decision{RetryAfter: NeverRetry}
	}
	period := int64(p.Period)
	start, end, ok := fixedWindowAt(period, now)
	if !ok {
		return s, Decision{Limit: p.Limit, RetryAfter: NeverRetry}
	}
	next, d := decideCounter(p.Limit, KindFixedWindow, s, cost, now, start, end)
	if !d.Allowed && d.RetryAfter != NeverRetry && end > math.MaxInt64-period {
		d.RetryAfter = NeverRetry // the next window does not fit in an int64
	}
	return next, d
}

// expiresFixedWindow is the end of s's window: from then on s counts as
// empty. A state that cannot be the current window of any now (no units,
// a start not aligned to the period, or an invalid policy, under which
// every decision fails closed) is equivalent to none already: 0.
func expiresFixedWindow(p Policy, s State) int64 {
	period := int64(p.Period)
	if checkFixedWindow(p.WithDefaults()) != nil || s.Count <= 0 || s.Start%period != 0 {
		return 0
	}
	if s.Start > math.MaxInt64-period {
		return math.MaxInt64
	}
	return s.Start + period
}

// fixedWindowAt returns the window [start, end) of length period (≥ 1)
// containing now, aligned to the Unix epoch (floor division, also for a
// negative now), and whether both ends fit in an int64.
func fixedWindowAt(period, now int64) (start, end int64, ok bool) {
	r := now % period // in (−period, period)
	if r < 0 {
		r += period
	}
	if now < math.MinInt64+r { // now − r would wrap
		return 0, 0, false
	}
	start = now - r
	if start > math.MaxInt64-period {
		return 0, 0, false
	}
	return start, start + period, true
}

// decideCounter decides cost (valid when 1..limit) at now against a counter
// of limit units for the window [start, end), which contains now. s counts
// only if it is a state of kind for this very window; otherwise the window
// is empty (a negative Count, which no decision writes, counts as 0).
//
// Allowed iff count + cost ≤ limit; then the new state is {kind, start,
// count + cost}. Limit is limit; Remaining is limit − count after the
// decision, 0..limit (0 when a shrunken policy left count above limit);
// ResetAfter is end − now, 1ns..period, for allows and denials alike.
// RetryAfter is 0 when allowed; when denied it is end − now, exact since the
// next window starts empty and cost ≤ limit, or NeverRetry for a cost
// outside 1..limit. A denial returns s itself, unchanged.
//
// No overflow: count is only added to once count ≤ limit − cost, so the sum
// is at most limit.
func decideCounter(limit int64, kind Kind, s State, cost, now, start, end int64) (State, Decision) {
	var count int64
	if s.Kind == kind && s.Start == start && s.Count > 0 {
		count = s.Count
	}
	d := Decision{Limit: limit, ResetAfter: time.Duration(end - now), RetryAfter: NeverRetry}
	if cost >= 1 && cost <= limit {
		if count <= limit-cost {
			count += cost
			d.Allowed, d.Remaining, d.RetryAfter = true, limit-count, 0
			return State{Kind: kind, Start: start, Count: count}, d
		}
		d.RetryAfter = d.ResetAfter
	}
	d.Remaining = max(0, limit-count)
	return s, d
}
