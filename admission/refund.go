package admission

import (
	"math"
	"slices"
)

// Spend is what one admitted request took from one key's state, as
// recorded when it was decided.
type Spend struct {
	// Cost is the units spent.
	Cost int64
	// At is the time (Unix ns, from the log) the request was decided at:
	// its slot, for a paced request.
	At int64
	// Until is ExpiresAt of the state right after the spend: for a token
	// bucket, the theoretical arrival time it left, which ended its share
	// of the schedule then.
	Until int64
	// Start and Refunded are, for a token bucket, the state's Start and
	// Refunded right after the spend: the incarnation it spent from, and
	// how far refunds had moved the schedule back by then.
	Start, Refunded int64
}

// Spent is the Spend of cost units decided at at that left the state s
// under p.
func Spent(p Policy, s State, cost, at int64) Spend {
	sp := Spend{Cost: cost, At: at, Until: ExpiresAt(p, s)}
	if s.Kind == KindTokenBucket {
		sp.Start, sp.Refunded = s.Start, s.Refunded
	}
	return sp
}

// Refund gives back, at now, what the spend sp still holds of state s under
// p. It never raises what is available above the policy's capacity, and
// gives back nothing of a spend that has already rolled out of the state —
// so it never frees what later requests spent:
//
//   - token_bucket: the spend occupies cost×T of the schedule ending at
//     shareEnd (its Until, moved back by every refund since it); the part
//     still ahead of now, min(cost×T, end − now), comes back (the
//     theoretical arrival time moves back by it, and Refunded grows by how
//     far it moved). A spend of another incarnation of the state (Start
//     differs: the bucket was full since, and swept or spent from anew)
//     gives nothing.
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
		end, live := shareEnd(s, sp)
		if !ok || !live || end <= now {
			return s
		}
		// At most the capacity comes back, so cost × t ≤ burst × t: no overflow.
		held := min(min(cost, p.Capacity())*t, end-now)
		tat := max(s.TAT-held, now)
		if tat >= s.TAT || s.Refunded > math.MaxInt64-(s.TAT-tat) {
			return s // nothing ahead to give back, or Refunded would overflow: give nothing
		}
		s.TAT, s.Refunded = tat, s.Refunded+(s.TAT-tat)
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

// shareEnd is where token bucket spend sp's share of the schedule of s
// ends at most: its Until moved back by every refund since the spend
// (s.Refunded − sp.Refunded), and never after the schedule's end, TAT.
// Refunds of earlier spends moved the share back by as much; refunds of
// later ones did not move it, so the end may lie earlier than the truth,
// which only gives back less. False when sp was spent from another
// incarnation of the state: its share ended before that one began (the
// bucket was full, so swept or as good as swept).
func shareEnd(s State, sp Spend) (int64, bool) {
	if sp.Start != s.Start || sp.Refunded > s.Refunded {
		return 0, false
	}
	return min(sp.Until-(s.Refunded-sp.Refunded), s.TAT), true
}

// Refundable is how many of spend sp's units a Refund of it from s at now
// still gives back whole, at most sp.Cost: for a token bucket, the whole
// emission intervals of its share [end − cost×T, end] still ahead of now
// (end as Refund corrects it; so a spend's later units come back first);
// for the other algorithms its cost, Refund deciding by the window that
// holds At. A later spend that stacks its own units on what this much of
// sp still holds can refund both as one spend ending at its Until
// (DESIGN.md of the fsm package, "Budget leases").
func Refundable(p Policy, s State, sp Spend, now int64) int64 {
	if sp.Cost < 1 {
		return 0
	}
	if p.Algorithm != AlgorithmTokenBucket {
		return sp.Cost
	}
	t, _, ok := gcraParams(p)
	end, live := shareEnd(s, sp)
	if !ok || s.Kind != KindTokenBucket || !live || end <= now {
		return 0
	}
	return min(sp.Cost, (end-now)/t)
}
