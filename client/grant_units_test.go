package client

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestUnitsExact: goroutines spend from striped units while the loop's
// operations (additions of either sign, drains) run between them; at the
// end the units spent, the units drained and the units left add up to the
// units added (none spent twice, none past what was added), and no stripe
// but 0 ever holds a debt, and then alone.
func TestUnitsExact(t *testing.T) {
	for _, n := range []int{1, 2, 8} {
		u := newUnits(n)
		var spent atomic.Int64
		var stop atomic.Bool
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 1))
				for !stop.Load() {
					cost := int64(1 + r.IntN(3))
					if _, _, _, ok := u.take(w, cost); ok {
						spent.Add(cost)
					}
				}
			})
		}
		r := rand.New(rand.NewPCG(9, uint64(n)))
		var added, drained int64
		for range 20_000 {
			switch r.IntN(6) {
			case 0:
				drained += u.drain()
			case 5:
				u.rebalance()
			case 1:
				d := -int64(r.IntN(50))
				u.add(d)
				added += d
			default:
				d := int64(r.IntN(100))
				u.add(d)
				added += d
			}
			for i := 1; i < n; i++ {
				if v := u.stripes[i].n.Load(); v < 0 {
					t.Fatalf("%d stripes: stripe %d holds %d", n, i, v)
				}
			}
			if s0 := u.stripes[0].n.Load(); s0 < 0 {
				for i := 1; i < n; i++ {
					if v := u.stripes[i].n.Load(); v != 0 {
						t.Fatalf("%d stripes: a debt of %d on stripe 0 and %d units on stripe %d", n, -s0, v, i)
					}
				}
			}
		}
		stop.Store(true)
		wg.Wait()
		if left := u.sum(); spent.Load()+drained+left != added {
			t.Fatalf("%d stripes: spent %d + drained %d + left %d != added %d", n, spent.Load(), drained, left, added)
		}
	}
}

// TestUnitsDebt: a debt blocks spending until an addition pays it, and
// only what is past the debt is spent.
func TestUnitsDebt(t *testing.T) {
	u := newUnits(4)
	u.add(8) // 2 per stripe
	u.add(-11)
	if s := u.sum(); s != -3 {
		t.Fatalf("sum %d, want -3", s)
	}
	for i := range 4 {
		if _, _, _, ok := u.take(i, 1); ok {
			t.Fatalf("spent from stripe %d under a debt", i)
		}
	}
	u.add(5) // pays 3, spreads 2
	n := 0
	for i := range 8 {
		if _, _, _, ok := u.take(i, 1); ok {
			n++
		}
	}
	if n != 2 || u.sum() != 0 {
		t.Fatalf("spent %d after paying the debt, sum %d; want 2 and 0", n, u.sum())
	}
}

// TestUnitsRebalance: units gathered on one stripe are evened out, none
// lost or made.
func TestUnitsRebalance(t *testing.T) {
	u := newUnits(4)
	u.stripes[2].n.Store(103)
	u.rebalance()
	for i := range 4 {
		if v := u.stripes[i].n.Load(); v < 25 || v > 26 {
			t.Fatalf("stripe %d holds %d of 103 over 4", i, v)
		}
	}
	if s := u.sum(); s != 103 {
		t.Fatalf("sum %d after rebalancing 103", s)
	}
}

// TestUnitsTakeFallsBack: a spend whose stripe is short takes from another;
// left is what that stripe holds after.
func TestUnitsTakeFallsBack(t *testing.T) {
	u := newUnits(2)
	u.add(6) // 3 and 3
	if left, _, _, ok := u.take(0, 3); !ok || left != 0 {
		t.Fatalf("left %d, %v", left, ok)
	}
	if left, _, _, ok := u.take(0, 2); !ok || left != 1 {
		t.Fatalf("from the other stripe: left %d, %v", left, ok)
	}
	if _, _, _, ok := u.take(0, 2); ok {
		t.Fatal("spent 2 of 1")
	}
}

// TestStripeHints: as many stripes as processors, rounded up to a power of
// two; a hint never allocates, even when the pool drops its objects; and
// goroutines that get and move hints at once share nothing they write
// (New deals slots again, so two may hold one: under the race detector,
// which drops a quarter of the objects put back, this would show a write).

func TestStripeHints(t *testing.T) {
	for procs, want := range map[int]int{1: 1, 2: 2, 3: 4, 8: 8, 9: 16, 17: 16, 1000: 16} {
		if n := stripesFor(procs); n != want {
			t.Errorf("%d stripes for %d processors, want %d", n, procs, want)
		}
	}
	h := newStripeHints()
	runtime.GC()
	runtime.GC() // the pool's objects are gone: New hands out slots
	if a := testing.AllocsPerRun(1000, func() { h.put(h.get(), true) }); a != 0 {
		t.Fatalf("%v allocations per hint", a)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for n := range 20_000 {
				s := h.get()
				if s.i < 0 || s.i >= len(h.slots) {
					t.Errorf("slot %d of %d", s.i, len(h.slots))
					return
				}
				h.put(s, (n+w)%3 == 0)
			}
		})
	}
	wg.Wait()
}
