package client

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// A grant's unspent units are split into stripes, one cache line pair each,
// so that goroutines on different cores spend from the same key without
// moving one counter's cache line between them on every decision (which
// costs a few hundred nanoseconds at the tail). A spend takes from the
// stripe of the processor it runs on, and from the others only when that
// one is short; only the grant's loop adds units or takes them back, and
// only the holder of the grant's mutex (the loop, or a spender evening the
// stripes out) moves them, so between two changes every stripe only
// decreases.
// That keeps the sum exact for the loop: a sum read while decisions are
// made lies between the sums before and after, as a single counter's load
// would.

// stripeBytes is a stripe's size: two 64-byte lines, so that neither the
// adjacent-line prefetch nor a neighbour's writes touch it.
const stripeBytes = 128

// unitStripe is one stripe of a grant's unspent units.
type unitStripe struct {
	n atomic.Int64
	_ [stripeBytes - 8]byte
}

// units are a grant's unspent units. Their sum may be negative in sync mode
// (more admitted since a report than the next allowance allows); the debt
// is then held by stripe 0 alone, every other stripe being 0, so nothing
// is spent until an addition pays it.
type units struct {
	stripes []unitStripe
}

func newUnits(n int) units { return units{stripes: make([]unitStripe, n)} }

// take spends cost units, from stripe i if it has them, else from the first
// other stripe that has them. left is what that stripe holds after: a lower
// bound of the units unspent. ok is false when no stripe alone holds cost
// (a spend of more than 1 may fail while the stripes hold cost between
// them: it then goes to the cluster, as when the grant is short). contended says a CAS on
// stripe i lost to another spend: another processor spends from it too;
// stole that stripe i was short and the units came from another.
func (u *units) take(i int, cost int64) (left int64, contended, stole, ok bool) {
	s := u.stripes
	i &= len(s) - 1
	for k := range len(s) {
		st := &s[i].n
		for {
			a := st.Load()
			if a < cost {
				break
			}
			if st.CompareAndSwap(a, a-cost) {
				return a - cost, contended, k != 0, true
			}
			contended = contended || k == 0
		}
		i = (i + 1) & (len(s) - 1)
	}
	return 0, contended, false, false
}

// sum is the units unspent.
func (u *units) sum() int64 {
	var t int64
	for i := range u.stripes {
		t += u.stripes[i].n.Load()
	}
	return t
}

// add adds delta units (the loop's, under the grant's mutex): a positive
// delta first pays stripe 0's debt, then is spread evenly; a negative one
// is taken from the stripes, and what they do not hold becomes stripe 0's
// debt.
func (u *units) add(delta int64) {
	s := u.stripes
	if delta < 0 {
		need := -delta
		for i := range s {
			st := &s[i].n
			for need > 0 {
				a := st.Load()
				if a <= 0 {
					break
				}
				t := min(a, need)
				if st.CompareAndSwap(a, a-t) {
					need -= t
				}
			}
		}
		if need > 0 {
			s[0].n.Add(-need)
		}
		return
	}
	if debt := -s[0].n.Load(); debt > 0 {
		pay := min(debt, delta)
		s[0].n.Add(pay)
		delta -= pay
	}
	u.spread(delta)
	u.rebalance()
}

// spread adds delta ≥ 0 over the stripes, evenly.
func (u *units) spread(delta int64) {
	s := u.stripes
	n := int64(len(s))
	share, rest := delta/n, delta%n
	for i := range s {
		d := share
		if int64(i) < rest {
			d++
		}
		if d != 0 {
			s[i].n.Add(d)
		}
	}
}

// rebalance evens the stripes out (the loop's, or a spender's holding the
// grant's mutex): a stripe emptied by a busy processor would otherwise
// send it to spend from the others', where it contends with their
// own. Units in transit (taken from a stripe, not yet added to another)
// are a few at a time and only ever short a spend, never lend it any.
func (u *units) rebalance() {
	s := u.stripes
	n := int64(len(s))
	total := u.sum()
	if n == 1 || total < 2*n {
		return // nothing to even out (or a debt: every other stripe is 0)
	}
	target := total / n
	var moving int64
	for i := range s {
		for {
			a := s[i].n.Load()
			if a <= target+1 {
				break
			}
			if s[i].n.CompareAndSwap(a, target) {
				moving += a - target
				break
			}
		}
	}
	for i := range s {
		if moving == 0 {
			return
		}
		if a := s[i].n.Load(); a < target {
			d := min(target-a, moving)
			s[i].n.Add(d)
			moving -= d
		}
	}
	u.spread(moving)
}

// drain takes every unit unspent (the loop's, under the grant's mutex):
// nothing is spent after it until an addition. It returns what it took,
// negative when stripe 0 held a debt.
func (u *units) drain() int64 {
	var t int64
	for i := range u.stripes {
		t += u.stripes[i].n.Swap(0)
	}
	return t
}

// stripesFor is how many stripes a grant made now gets: the processors
// (GOMAXPROCS), rounded up to a power of two, at most maxStripes. A grant
// keeps its stripes for its life: one made before GOMAXPROCS grew spends
// from fewer (correctly, with more contention).
func stripesFor(procs int) int {
	return min(1<<bits.Len(uint(procs-1)), maxStripes)
}

// maxStripes bounds the stripes of a grant: they take stripeBytes each,
// for every key the client holds grant state for (up to maxGrantStates),
// so 2 KiB a key at most. Past 16 processors some share a stripe.
const maxStripes = 16

// stripeHints give each processor its own stripe: a sync.Pool keeps one
// object per processor (P), so a Get on a goroutine returns, almost
// always, the object the last goroutine on the same processor put back.
// The objects are the elements of a fixed array, so that New allocates
// nothing (a pool may drop objects: at a GC, or at random under the race
// detector), and each holds a stripe index, dealt round-robin (a grant
// takes it modulo its stripes). The objects are never written: New may
// deal one that a goroutine holds, so two may hold it at once. Two
// processors that end up on one stripe (a pool's objects are dealt again
// after GCs) part at once: a spend that loses a CAS on its stripe puts back
// the next slot in place of its own, moving its processor to the next
// stripe.
type stripeHints struct {
	pool  sync.Pool
	slots []stripeSlot
	next  atomic.Uint32
}

// stripeSlot is a pool object: slots[i] holds i.
type stripeSlot struct{ i int }

func newStripeHints() *stripeHints {
	h := &stripeHints{slots: make([]stripeSlot, 2*maxStripes)}
	for i := range h.slots {
		h.slots[i].i = i
	}
	h.pool.New = func() any { return &h.slots[int(h.next.Add(1))%len(h.slots)] }
	return h
}

// get is the hint of the calling goroutine's processor; its i is the
// stripe to spend from (any index is correct; this one keeps each
// processor on its own stripe). Give it back with put.
func (h *stripeHints) get() *stripeSlot { return h.pool.Get().(*stripeSlot) }

// put gives s back, or the next slot when a spend from s's stripe was
// contended.
func (h *stripeHints) put(s *stripeSlot, contended bool) {
	if contended {
		s = &h.slots[(s.i+1)%len(h.slots)]
	}
	h.pool.Put(s)
}
