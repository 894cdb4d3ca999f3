package fsm_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
)

// stack is a token bucket as a stack of spends, each its share of the
// schedule: refunding the latest k units of a spend gives back the part of
// them still ahead of now and moves every later spend back by as much.
type stack struct {
	t     int64
	tat   int64
	spent []stackSpend
}

type stackSpend struct{ cost, end int64 }

func (s *stack) spend(cost, now int64) int {
	s.tat = max(s.tat, now) + cost*s.t
	s.spent = append(s.spent, stackSpend{cost, s.tat})
	return len(s.spent) - 1
}

func (s *stack) refund(id int, k, now int64) {
	sp := &s.spent[id]
	held := min(k*s.t, max(0, sp.end-now))
	sp.cost -= k
	sp.end -= held
	for j := id + 1; j < len(s.spent); j++ {
		s.spent[j].end -= held
	}
	s.tat = max(s.tat-held, now)
}

// A release of a budget lease never gives back more of a token bucket's
// schedule than its unspent units hold, wherever refunds of other spends
// have moved them since they were granted: after every call of a random
// mix of strict admits and holders that top up, spend locally, release and
// die, the key's schedule runs at least as far ahead as on a stack of the
// same spends where each release takes back its own latest units. (A
// release once gave back what its top-up's recorded end said, though an
// earlier refund had moved the top-up back, and carried units of earlier
// top-ups as if they lay where the last one did.)
func TestGrantReleasesGiveBackNoMoreThanTheyHold(t *testing.T) {
	p := tokenBucket("tb", 100, time.Second, 50, 5)
	p = leased(p, 20, 200*time.Millisecond)
	step := int64(20 * time.Millisecond)
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 21))
		a := newApplier(t, fsm.Options{})
		now := t0 + rng.Int64N(int64(24*time.Hour))
		a.putPolicies(now, p)
		ref := &stack{t: int64(p.EmissionInterval())}
		type part struct {
			id   int
			left int64
		}
		holders := make([]*simHolder, 4)
		parts := make([][]part, len(holders)) // each holder's top-ups on ref, oldest first
		for i := range holders {
			holders[i] = &simHolder{name: fmt.Sprint("h", i)}
		}
		var log []string
		for n := range 600 {
			now += rng.Int64N(step)
			i := rng.IntN(len(holders) + 1)
			if i == len(holders) {
				cost := 1 + rng.Int64N(5)
				if r := a.mustAdmit(now, p.Name, "k", cost); r.Decision.Allowed {
					ref.spend(cost, now)
					log = append(log, fmt.Sprintf("%d admit %d", n, cost))
				}
			} else if h := holders[i]; !h.dead {
				if !h.called || now >= h.exp {
					h.total, h.used, h.topUps, parts[i] = 0, 0, nil, nil
				}
				switch x := rng.IntN(10); {
				case x < 4 && h.total > h.used:
					k := 1 + rng.Int64N(h.total-h.used)
					h.spendLocal(k, nil)
					for j := 0; k > 0; j++ { // first granted, first spent
						d := min(k, parts[i][j].left)
						parts[i][j].left -= d
						k -= d
					}
					log = append(log, fmt.Sprintf("%d %s spends", n, h.name))
				case x < 8:
					if h.called {
						h.seq++
					}
					h.called = true
					r := a.grant(now, gcall{policy: p.Name, key: "k", holder: h.name, seq: h.seq, want: 1 + rng.Int64N(60), used: h.used, demand: rng.Int64N(5000)})
					h.total, h.exp = r.Total, r.ExpiresAt
					if r.Added > 0 {
						h.topUps = append(h.topUps, topUp{now, r.Added})
						parts[i] = append(parts[i], part{ref.spend(r.Added, now), r.Added})
					}
					log = append(log, fmt.Sprintf("%d %s +%d", n, h.name, r.Added))
				case x < 9 && h.called && now < h.exp:
					h.seq++
					a.grant(now, gcall{policy: p.Name, key: "k", holder: h.name, seq: h.seq, used: h.used, release: true})
					for j := len(parts[i]) - 1; j >= 0; j-- { // the latest units come back
						ref.refund(parts[i][j].id, parts[i][j].left, now)
					}
					log = append(log, fmt.Sprintf("%d %s releases %d", n, h.name, h.total-h.used))
					h.total, h.used, h.topUps, h.exp, parts[i] = 0, 0, nil, 0, nil
				case x == 9 && rng.IntN(4) == 0:
					h.dead = true // what it holds is waste
				}
			}
			st := a.f.State(p.Name, "k")
			if got, want := max(st.TAT, now), max(ref.tat, now); got < want {
				t.Fatalf("seed %d, call %d: the schedule runs %v ahead, %v on the stack: %v given back that no unit held (last calls %q)",
					seed, n, time.Duration(got-now), time.Duration(want-now), time.Duration(want-got), log[max(0, len(log)-8):])
			}
		}
	}
}
