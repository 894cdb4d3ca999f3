package admission

import (
	"math"
	"time"
)

// sliding_log: an exact rolling window. The state keeps every admitted
// request of the last period as a LogEntry{At, Cost}, oldest first; an entry
// is live at now iff At > now − period (it leaves at At + period). A request
// of cost c is allowed iff the live costs plus c are at most limit, so no
// interval of length period ever holds more than limit units, whatever the
// fixed-window boundaries.
//
// Each admitted request has its own entry, even when several share one
// nanosecond (a Raft batch shares one now), so that Refund can remove it.
// Since costs are at least 1 and the live sum at most limit, a log holds at
// most limit entries (after the limit of a policy is lowered, at most the
// old limit until they leave); hence the cap on limit: this algorithm is for
// small limits such as login attempts.

// maxSlidingLogLimit caps a sliding_log's limit, and so its entries per key.
const maxSlidingLogLimit = 10_000

// checkSlidingLog validates a sliding_log policy (defaults applied), first
// problem first: calendar unset; limit 1..10000; period 1ms..366 days; burst
// unset or equal to limit; max_cost 1..limit.
func checkSlidingLog(p Policy) *FieldError {
	p = p.WithDefaults()
	if p.Calendar != "" {
		return policyError("calendar", "is only for algorithm quota")
	}
	if p.Limit < 1 || p.Limit > maxSlidingLogLimit {
		return policyError("limit", "must be between 1 and %d for sliding_log, which stores one entry per admitted request; use sliding_window for larger limits (got %d)", maxSlidingLogLimit, p.Limit)
	}
	if p.Period < minPeriod || p.Period > maxPeriod {
		return policyError("period", "must be between %v and 366 days (got %v)", minPeriod, p.Period)
	}
	return checkSlidingFields(p)
}

// decideSlidingLog decides a request of cost at now under a sliding_log
// policy. p must be valid and cost checked; s.Log should be oldest first,
// as this function writes it (otherwise the decision is still exact but
// RetryAfter may not be).
//
// On allow the new state holds only the live entries, copied, plus the new
// request; Remaining is limit minus the live costs after the decision, and
// ResetAfter is the time until the newest live entry leaves (the period).
// On denial s is returned unchanged, Remaining is limit minus the live costs
// (at least 0), ResetAfter the time until the newest live entry leaves, and
// RetryAfter the exact time until enough of the oldest entries have left for
// cost to fit: denied at now+RetryAfter−1, allowed at now+RetryAfter.
//
// It is total and fails closed: an invalid policy, a cost outside 1..limit
// or a now outside [0, slidingMaxNow] is denied with RetryAfter NeverRetry
// and s unchanged (an invalid policy also reports Limit 0). A log whose
// newest entry is after now (impossible when time comes from the log) is
// denied until that instant, and then decided as then.
func decideSlidingLog(p Policy, s State, cost, now int64) (State, Decision) {
	p = p.WithDefaults()
	if checkSlidingLog(p) != nil {
		return s, Decision{RetryAfter: NeverRetry}
	}
	limit, period := p.Limit, int64(p.Period)
	d := Decision{Limit: limit, RetryAfter: NeverRetry}
	if now < 0 || now > slidingMaxNow {
		return s, d
	}
	// The instant decided: now, or the newest entry's At if that is later.
	newest := int64(math.MinInt64)
	for _, e := range s.Log {
		newest = max(newest, e.At)
	}
	at := now
	if newest > now {
		if newest > slidingMaxNow {
			return s, d
		}
		at = newest
	}

	// Live entries: At > at − period. The newest is live if any is.
	cut := at - period
	var sum int64
	n := 0
	for _, e := range s.Log {
		if e.At > cut {
			sum, n = slAdd(sum, e.Cost), n+1
		}
	}

	if at == now && cost >= 1 && cost <= limit && sum <= limit-cost {
		next := make([]LogEntry, 0, n+1)
		for _, e := range s.Log {
			if e.At > cut {
				next = append(next, e)
			}
		}
		next = append(next, LogEntry{At: now, Cost: cost})
		d.Allowed, d.Remaining, d.RetryAfter = true, limit-sum-cost, 0
		d.ResetAfter = time.Duration(period)
		return State{Kind: KindSlidingLog, Log: next}, d
	}

	d.Remaining = max(0, limit-sum)
	if n > 0 {
		d.ResetAfter = time.Duration(newest + period - now)
	}
	if cost < 1 || cost > limit {
		return s, d
	}
	if sum <= limit-cost { // fits at the future instant at
		d.RetryAfter = time.Duration(at - now)
		return s, d
	}
	// Drop the oldest live entries until cost fits: the last one dropped
	// leaves at its At + period, together with any older ones.
	need, dropped := sum-(limit-cost), int64(0)
	for _, e := range s.Log {
		if e.At <= cut {
			continue
		}
		dropped = slAdd(dropped, e.Cost)
		if dropped >= need {
			d.RetryAfter = time.Duration(e.At + period - now)
			break
		}
	}
	return s, d
}

// expiresSlidingLog is when s is equivalent to the zero State: when its
// newest entry leaves, At + period (0 for an empty log).
func expiresSlidingLog(p Policy, s State) int64 {
	if len(s.Log) == 0 {
		return 0
	}
	newest := int64(math.MinInt64)
	for _, e := range s.Log {
		newest = max(newest, e.At)
	}
	return slAdd(newest, int64(p.Period))
}

// slAdd returns a + max(b, 0), saturating at math.MaxInt64; costs of a
// crafted log below 0 count as 0.
func slAdd(a, b int64) int64 {
	if b <= 0 {
		return a
	}
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
