package admission

import (
	"math"
	"slices"
)

// Spend is what one admitted request took from one key's state, as
// recorded when it was decided (SpendOf).
type Spend struct {
	// Cost is the units spent.
	Cost int64
	// At is the time (Unix ns, from the log) the request was decided at:
	// its slot, for a paced request.
	At int64
	// Until is, for a token bucket, the theoretical arrival time the spend
	// left, which ends its share of the schedule (SpentUntil of the state
	// right after it); for the other algorithms the state's ExpiresAt.
	Until int64
	// Shifted is the token bucket's State.Shifted right after the spend:
	// which of its refunds came after it.
	Shifted int64
}

// SpendOf is the Spend of cost units decided at at that left state s.
func SpendOf(p Policy, s State, cost, at int64) Spend {
	return Spend{Cost: cost, At: at, Until: SpentUntil(p, s), Shifted: s.Shifted}
}

// SpentUntil is where the last spend that left s ends: a token bucket's
// theoretical arrival time; for the other algorithms ExpiresAt.
func SpentUntil(p Policy, s State) int64 {
	if p.Algorithm == AlgorithmTokenBucket && s.Kind == KindTokenBucket {
		return s.TAT
	}
	return ExpiresAt(p, s)
}

// RefundMark is one refund a token bucket remembers. A refund moves the
// schedule back, and with it the share of every spend made after the
// refunded one; a spend refunded later must end that much earlier than it
// recorded, or it would give back what it no longer holds. So the bucket
// keeps, per refund, where the refunded spend ended in the schedule as if
// nothing had been refunded (its Until plus its Shifted: spends made later
// end later there), how far the refund moved the schedule, and the TAT
// before it (every spend made before the refund has ended by then; after
// that the mark is forgotten). A spend's own end is its Until less the
// shifts of the refunds made after it of spends made before it (spendEnd).
// At most MaxRefundMarks are kept: past them the oldest is forgotten and
// counted as if it had refunded an earlier spend, so a spend gives back
// less than it holds, never more.
type RefundMark struct {
	End   int64 // the refunded spend's end in the unrefunded schedule
	Shift int64 // how far the refund moved the schedule back (ns)
	Until int64 // the bucket's TAT before the refund
}

// MaxRefundMarks bounds State.Refunds.
const MaxRefundMarks = 16

// withTAT is s as a token bucket with theoretical arrival time tat at now:
// its refunds kept, the marks no spend can need any more forgotten.
func (s State) withTAT(tat, now int64) State {
	next := State{Kind: KindTokenBucket, TAT: tat, Shifted: s.Shifted, Refunds: pruneMarks(s.Refunds, now)}
	if s.Forgotten > now {
		next.Forgotten = s.Forgotten
	}
	return next
}

// pruneMarks drops the oldest marks every spend made before has ended by
// now (only from the front: a mark's place counts, see spendEnd).
func pruneMarks(marks []RefundMark, now int64) []RefundMark {
	i := 0
	for i < len(marks) && marks[i].Until <= now {
		i++
	}
	if i == len(marks) {
		return nil
	}
	return marks[i:len(marks):len(marks)]
}

// bucketExpiresAt is when a token bucket's state is equivalent to none: it
// is full (TAT) and no spend it may still be asked to refund can need its
// marks: every spend made before a refund ends by the TAT before it
// (Until, Forgotten), so once the state is gone every spend made on it has
// ended, and a new state never meets one that has not.
func (s State) bucketExpiresAt() int64 {
	at := max(s.TAT, s.Forgotten)
	for _, m := range s.Refunds {
		at = max(at, m.Until)
	}
	return at
}

// spendEnd is where sp's share of the token bucket's schedule s ends now:
// sp.Until less the shifts of the refunds made after sp of spends made
// before it. Refunds are ordered by Shifted (each adds its shift), spends by
// their end in the unrefunded schedule (Until + Shifted); the refunds the
// marks no longer name (forgotten, or pruned) are counted in full when they
// came after sp, as if all refunded earlier spends.
func (s State) spendEnd(sp Spend) int64 {
	end := addSat(sp.Until, sp.Shifted)
	before := s.Shifted // Shifted before the first mark's refund
	for _, m := range s.Refunds {
		before = subSat(before, m.Shift)
	}
	corr := max(0, subSat(before, sp.Shifted))
	for _, m := range s.Refunds {
		if before >= sp.Shifted && m.End < end {
			corr = addSat(corr, m.Shift)
		}
		before = addSat(before, m.Shift)
	}
	return subSat(sp.Until, corr)
}

func addSat(a, b int64) int64 {
	if c := a + b; (c > a) == (b > 0) {
		return c
	}
	if b > 0 {
		return math.MaxInt64
	}
	return math.MinInt64
}

func subSat(a, b int64) int64 {
	if b == math.MinInt64 {
		return addSat(addSat(a, math.MaxInt64), 1)
	}
	return addSat(a, -b)
}

// Refund gives back, at now, what the spend sp still holds of state s under
// p. It never raises what is available above the policy's capacity, and
// gives back nothing of a spend that has already rolled out of the state —
// so it never frees what later requests spent:
//
//   - token_bucket: the spend occupies [end − cost×T, end] of the
//     schedule, where end is its Until less what refunds of earlier spends
//     made since moved it back (spendEnd); the part still ahead of now,
//     min(cost×T, end − now), comes back: the theoretical arrival time
//     moves back by it, and the bucket marks the refund (RefundMark).
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
		end := s.spendEnd(sp)
		if sp.Until <= now || end <= now {
			return s
		}
		held := min(min(cost, p.Capacity())*t, end-now)
		marks := append(slices.Clone(pruneMarks(s.Refunds, now)), RefundMark{End: addSat(sp.Until, sp.Shifted), Shift: held, Until: s.TAT})
		for len(marks) > MaxRefundMarks {
			s.Forgotten = max(s.Forgotten, marks[0].Until)
			marks = marks[1:]
		}
		s.Refunds, s.Shifted = marks, addSat(s.Shifted, held)
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

// Refundable is how many of spend sp's units a Refund of it from state s at
// now still gives back whole, at most sp.Cost: for a token bucket, the whole
// emission intervals of its span [end − cost×T, end] still ahead of now (so a
// spend's later units, whose span ends at Until, come back first); for the
// other algorithms its cost, Refund deciding by the window that holds At.
// A later spend that stacks its own units on what this much of sp still
// holds can refund both as one spend ending at its Until (DESIGN.md of the
// fsm package, "Budget leases").
func Refundable(p Policy, s State, sp Spend, now int64) int64 {
	if sp.Cost < 1 {
		return 0
	}
	if p.Algorithm != AlgorithmTokenBucket {
		return sp.Cost
	}
	t, _, ok := gcraParams(p)
	if !ok || sp.Until <= now || s.Kind != KindTokenBucket {
		return 0
	}
	end := s.spendEnd(sp)
	if end <= now {
		return 0
	}
	return min(sp.Cost, (end-now)/t)
}
