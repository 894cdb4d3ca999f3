package admission

import "slices"

// Spend is what one admitted request took from one key's state, as
// recorded when it was decided.
type Spend struct {
	// Cost is the units spent.
	Cost int64
	// At is the time (Unix ns, from the log) the request was decided at:
	// its slot, for a paced request.
	At int64
	// Until is ExpiresAt of the state right after the spend: for a token
	// bucket, the theoretical arrival time it left, which ends its share of
	// the schedule.
	Until int64
}

// Refund gives back, at now, what the spend sp still holds of state s under
// p. It never raises what is available above the policy's capacity, and
// gives back nothing of a spend that has already rolled out of the state —
// so it never frees what later requests spent:
//
//   - token_bucket: the spend occupies [Until − cost×T, Until] of the
//     schedule; the part still ahead of now, min(cost×T, Until − now), comes
//     back (the theoretical arrival time moves back by it).
//   - fixed_window and quota: the window's count drops by cost if At is in
//     the state's current window.
//   - sliding_window: the current or previous window's count drops by cost,
//     whichever holds At.
//   - sliding_log: the request's own entry (At, same cost) is removed if it
//     is still in the log.
//
// A state written by another algorithm is returned as it is.
func Refund(p Policy, s State, sp Spend, now int64) State {
	cost, decidedAt := sp.Cost, sp.At
	if s.Kind != kindOf(p.Algorithm) || cost < 1 {
		return s
	}
	switch p.Algorithm {
	case AlgorithmTokenBucket:
		t, _, ok := gcraParams(p)
		if !ok {
			return s
		}
		// At most the capacity comes back, so cost × t ≤ burst × t: no overflow.
		held := min(cost, p.Capacity()) * t
		if sp.Until <= now {
			return s
		}
		held = min(held, sp.Until-now)
		s.TAT = max(s.TAT-held, now)
	case AlgorithmFixedWindow, AlgorithmQuota:
		if decidedAt >= s.Start && decidedAt < ExpiresAt(p, s) {
			s.Count = max(0, s.Count-cost)
		}
	case AlgorithmSlidingWindow:
		switch period := int64(p.Period); {
		case decidedAt >= s.Start:
			s.Count = max(0, s.Count-cost)
		case decidedAt >= s.Start-period:
			s.Prev = max(0, s.Prev-cost)
		}
	case AlgorithmSlidingLog:
		if i := slices.IndexFunc(s.Log, func(e LogEntry) bool { return e.At == decidedAt && e.Cost == cost }); i >= 0 {
			s.Log = slices.Delete(slices.Clone(s.Log), i, i+1)
		}
	}
	return s
}

// Refundable is how many of spend sp's units a Refund at now still gives
// back whole, at most sp.Cost: for a token bucket, the whole emission
// intervals of its span [Until − cost×T, Until] still ahead of now (so a
// spend's later units, whose span ends at Until, come back first); for the
// other algorithms its cost, Refund deciding by the window that holds At.
// A later spend that stacks its own units on what this much of sp still
// holds can refund both as one spend ending at its Until (DESIGN.md of the
// fsm package, "Budget leases").
func Refundable(p Policy, sp Spend, now int64) int64 {
	if sp.Cost < 1 {
		return 0
	}
	if p.Algorithm != AlgorithmTokenBucket {
		return sp.Cost
	}
	t, _, ok := gcraParams(p)
	if !ok || sp.Until <= now {
		return 0
	}
	return min(sp.Cost, (sp.Until-now)/t)
}
