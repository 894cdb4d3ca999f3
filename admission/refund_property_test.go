package admission_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

// schedule is the token bucket as a stack of spends: each spend's share
// [end − cost×T, end] of the schedule, in spend order. Refunding a spend
// gives back the part of its share still ahead of now and moves the
// shares of every later spend back by as much. It is the reference the
// refunds of package admission must match.
type schedule struct {
	tat  int64
	ends map[int]int64 // live spends by number
	cost map[int]int64
	next int
}

func (r *schedule) spend(cost, t, now int64) int {
	r.tat = max(r.tat, now) + cost*t
	r.next++
	r.ends[r.next], r.cost[r.next] = r.tat, cost
	return r.next
}

func (r *schedule) refund(id int, t, now int64) {
	end := r.ends[id]
	delete(r.ends, id)
	if end <= now {
		return
	}
	held := min(r.cost[id]*t, end-now)
	for j := range r.ends {
		if j > id {
			r.ends[j] -= held
		}
	}
	r.tat = max(r.tat-held, now)
}

// Refunds in any order give back exactly what the reference schedule does
// while a bucket remembers every refund its spends may need, and never
// more once it has forgotten some: whatever the order, a spend gives back
// only what it still holds, where refunds of earlier spends have moved it.
// (A refund that trusted the end a spend recorded gave back the shift of
// every earlier refund again.)
func TestRefundsInAnyOrderMatchTheSchedule(t *testing.T) {
	p := admission.Policy{Name: "tb", Algorithm: admission.AlgorithmTokenBucket, Limit: 10, Period: time.Second, Burst: 40}
	interval := int64(p.Period) / p.Limit
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 7))
		ref := &schedule{ends: map[int]int64{}, cost: map[int]int64{}}
		var st admission.State
		spends := map[int]admission.Spend{}
		now, refunds := int64(1_000_000_000), 0
		bounded := seed%2 == 0 // few enough refunds that none is forgotten
		for step := range 120 {
			now += rng.Int64N(3 * interval)
			if rng.IntN(3) > 0 || len(spends) == 0 || (bounded && refunds >= admission.MaxRefundMarks) {
				cost := 1 + rng.Int64N(4)
				next, d := admission.Decide(p, st, cost, now)
				if !d.Allowed {
					continue
				}
				st = next
				spends[ref.spend(cost, interval, now)] = admission.SpendOf(p, st, cost, now)
			} else {
				ids := make([]int, 0, len(spends))
				for id := range spends {
					ids = append(ids, id)
				}
				slices.Sort(ids)
				id := ids[rng.IntN(len(ids))]
				st = admission.Refund(p, st, spends[id], now)
				delete(spends, id)
				ref.refund(id, interval, now)
				refunds++
			}
			gotTAT, wantTAT := max(st.TAT, now), max(ref.tat, now)
			switch {
			case gotTAT < wantTAT:
				t.Fatalf("seed %d step %d: TAT %d, the schedule's %d: refunds gave back %d ns more than their spends held", seed, step, gotTAT, wantTAT, wantTAT-gotTAT)
			case bounded && gotTAT != wantTAT:
				t.Fatalf("seed %d step %d: TAT %d, the schedule's %d: %d ns less given back with %d refunds", seed, step, gotTAT, wantTAT, gotTAT-wantTAT, refunds)
			}
			if len(st.Refunds) > admission.MaxRefundMarks {
				t.Fatalf("seed %d: %d refund marks kept, at most %d", seed, len(st.Refunds), admission.MaxRefundMarks)
			}
		}
	}
}

// The case the schedule test found first: three spends, the first refunded
// while it still holds part of its share, then the second; the second's
// share had moved back with the first refund, so it holds less than its
// recorded end says.
func TestRefundOfASpendMovedByAnEarlierRefund(t *testing.T) {
	p := admission.Policy{Name: "tb", Algorithm: admission.AlgorithmTokenBucket, Limit: 1, Period: time.Second, Burst: 20}
	s := int64(time.Second)
	var st admission.State
	var sp [3]admission.Spend
	for i := range sp {
		st = mustDecide(t, p, st, 5, 0)
		sp[i] = admission.SpendOf(p, st, 5, 0) // shares [0,5], [5,10], [10,15] s
	}
	st = admission.Refund(p, st, sp[0], 3*s) // 2 s of the first come back: the others now [3,8], [8,13]
	if st.TAT != 13*s {
		t.Fatalf("after the first refund TAT = %v, want 13s", time.Duration(st.TAT))
	}
	st = admission.Refund(p, st, sp[1], 6*s) // the second holds [6,8]: 2 s, not the 4 its recorded end says
	if st.TAT != 11*s {
		t.Fatalf("after the second refund TAT = %v, want 11s (the third's share [6,11])", time.Duration(st.TAT))
	}
	st = admission.Refund(p, st, sp[2], 6*s)
	if st.TAT != 6*s {
		t.Fatalf("after the third refund TAT = %v, want 6s (nothing held)", time.Duration(st.TAT))
	}
}
