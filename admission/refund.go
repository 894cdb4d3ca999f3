package admission

import "slices"

// Refund gives back cost units that a request decided at decidedAt (Unix
// ns, from the log) spent from state s under p, at now. It never raises
// what is available above the policy's capacity, and gives back nothing
// where the spend has already rolled out of the state:
//
//   - token_bucket: the theoretical arrival time moves back by cost × T,
//     but not before now (a full bucket stays full).
//   - fixed_window and quota: the window's count drops by cost if decidedAt
//     is in the state's current window.
//   - sliding_window: the current or previous window's count drops by cost,
//     whichever holds decidedAt.
//   - sliding_log: the request's own entry (At = decidedAt, same cost) is
//     removed if still in the log.
//
// A state written by another algorithm is returned as it is.
func Refund(p Policy, s State, cost, decidedAt, now int64) State {
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
		back := s.TAT - min(cost, p.Capacity())*t
		s.TAT = max(back, now)
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
