package fsm_test

import (
	"fmt"
	randv1 "math/rand"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// spend is units taken at a decision time: a strict admit's, or a holder's
// local spends attributed to the top-up that granted them.
type spend struct{ at, cost int64 }

// topUp is a part of a grant not spent yet.
type topUp struct{ at, left int64 }

// simHolder is a client holding budget leases of one key: it spends at
// most its unspent units, and only while its grant lives.
type simHolder struct {
	name             string
	seq              uint64
	called           bool
	total, used, exp int64
	topUps           []topUp
	dead             bool
}

// spendLocal spends n units of h's grant, first granted first.
func (h *simHolder) spendLocal(n int64, out []spend) []spend {
	h.used += n
	for n > 0 {
		t := &h.topUps[0]
		k := min(n, t.left)
		out = append(out, spend{t.at, k})
		t.left -= k
		n -= k
		if t.left == 0 {
			h.topUps = h.topUps[1:]
		}
	}
	return out
}

// simulateLeases runs a random schedule of strict admits and leasing
// holders against one key of p and returns every unit spent.
func simulateLeases(tb testing.TB, p admission.Policy, seed uint64, steps int, maxStep int64) []spend {
	rng := rand.New(rand.NewPCG(seed, 21))
	a := newApplier(tb, fsm.Options{})
	now := t0 + rng.Int64N(int64(24*time.Hour))
	a.putPolicies(now, p)
	holders := make([]*simHolder, 4)
	for i := range holders {
		holders[i] = &simHolder{name: fmt.Sprint("h", i)}
	}
	var spent []spend
	call := func(h *simHolder, c gcall) fsm.GrantResult {
		r := a.grant(now, c)
		if rng.IntN(8) == 0 { // a retry gets the same answer
			again := a.grant(now, c)
			again.Duplicate = false
			if again != r && !c.release {
				tb.Fatalf("seed %d: retry of %+v = %+v, first %+v", seed, c, again, r)
			}
		}
		return r
	}
	for range steps {
		now += rng.Int64N(maxStep)
		if rng.IntN(4) == 0 {
			cost := 1 + rng.Int64N(5)
			if r := a.mustAdmit(now, p.Name, "k", cost); r.Decision.Allowed {
				spent = append(spent, spend{now, cost})
			}
			continue
		}
		h := holders[rng.IntN(len(holders))]
		if h.dead {
			continue
		}
		live := h.called && now < h.exp
		if !live {
			h.total, h.used, h.topUps = 0, 0, nil
		}
		switch x := rng.IntN(10); {
		case x < 4 && live && h.total > h.used:
			// The holder may spend anything it holds unspent; a dying
			// one may have spent some of it.
			spent = h.spendLocal(1+rng.Int64N(h.total-h.used), spent)
		case x < 8:
			if h.called {
				h.seq++
			}
			h.called = true
			r := call(h, gcall{policy: p.Name, key: "k", holder: h.name, seq: h.seq, want: 1 + rng.Int64N(60),
				used: h.used, demand: rng.Int64N(5000)})
			if !live {
				h.topUps, h.used = nil, 0
			}
			if r.Used != h.used || r.Total != h.total+r.Added && live {
				tb.Fatalf("seed %d: grant %+v for a holder at total %d, used %d", seed, r, h.total, h.used)
			}
			h.total, h.exp = r.Total, r.ExpiresAt
			if r.Added > 0 {
				h.topUps = append(h.topUps, topUp{now, r.Added})
			}
		case x < 9 && live:
			h.seq++
			call(h, gcall{policy: p.Name, key: "k", holder: h.name, seq: h.seq, used: h.used, release: true})
			h.total, h.used, h.topUps, h.exp = 0, 0, nil, 0
		case x == 9 && rng.IntN(4) == 0:
			h.dead = true // it never calls again; what it holds is waste
		}
	}
	slices.SortStableFunc(spent, func(x, y spend) int { return int(min(max(x.at-y.at, -1), 1)) })
	return spent
}

// checkWindows checks that no window (by windowOf) admits more than limit.
func checkWindows(spent []spend, limit int64, windowOf func(int64) int64) error {
	sums := map[int64]int64{}
	for _, s := range spent {
		w := windowOf(s.at)
		if sums[w] += s.cost; sums[w] > limit {
			return fmt.Errorf("window %d admits %d > %d", w, sums[w], limit)
		}
	}
	return nil
}

// checkSliding checks the sliding window's rule at every decision: units of
// the current window so far plus the previous window's, weighed by how
// much of it the rolling period covers (rounded up), at most limit.
func checkSliding(spent []spend, limit, period int64) error {
	sums := map[int64]int64{}
	for _, s := range spent {
		sums[s.at/period] += s.cost
	}
	cur := map[int64]int64{}
	for _, s := range spent {
		k := s.at / period
		cur[k] += s.cost
		elapsed := s.at - k*period
		w := (sums[k-1]*(period-elapsed) + period - 1) / period
		if cur[k]+w > limit {
			return fmt.Errorf("at %d: %d in the window + %d weighed from the previous > %d", s.at, cur[k], w, limit)
		}
	}
	return nil
}

// checkGCRA checks that the units, at their decision times, conform to the
// token bucket: burst at once, then one per emission interval.
func checkGCRA(spent []spend, p admission.Policy) error {
	t, burst := p.EmissionInterval(), p.WithDefaults().Burst
	if len(spent) == 0 {
		return nil
	}
	tat, first, total := spent[0].at, spent[0].at, int64(0)
	for _, s := range spent {
		tat = max(tat, s.at) + s.cost*t
		if tat-s.at > burst*t {
			return fmt.Errorf("at %d: the schedule runs %v ahead, more than burst %d × %v", s.at, time.Duration(tat-s.at), burst, time.Duration(t))
		}
		if total += s.cost; total > burst+(s.at-first)/t {
			return fmt.Errorf("at %d: %d admitted since %d, more than burst + rate × elapsed", s.at, total, first)
		}
	}
	return nil
}

// exactnessCase is one leased policy of TestGrantExactness, the largest
// step between its simulated calls, the check of what was spent, and the
// seeds that once found a limit exceeded, run every time.
type exactnessCase struct {
	p       admission.Policy
	maxStep int64
	check   func(admission.Policy, []spend) error
	seeds   []uint64
}

func exactnessCases() []exactnessCase {
	minute, day := int64(time.Minute), int64(24*time.Hour)
	return []exactnessCase{
		// 1818, 4839, 6199, 6802, 7837: a release gave back units of
		// several top-ups as the last one's, though the earlier ones had
		// partly rolled out of the schedule. 5982, 10381, 11167, 18055: a
		// release gave back as much as its top-up's recorded end said,
		// though a refund of an earlier spend had moved it back since.
		{leased(tokenBucket("tb", 100, time.Second, 50, 5), 20, 200*time.Millisecond), int64(20 * time.Millisecond),
			func(p admission.Policy, s []spend) error { return checkGCRA(s, p) },
			[]uint64{1818, 4839, 6199, 6802, 7837, 5982, 10381, 11167, 18055}},
		{leased(admission.Policy{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 100, Period: time.Minute, MaxCost: 5}, 20, 5*time.Second),
			int64(500 * time.Millisecond), func(p admission.Policy, s []spend) error {
				return checkWindows(s, p.Limit, func(at int64) int64 { return at / minute })
			}, nil},
		{leased(admission.Policy{Name: "sw", Algorithm: admission.AlgorithmSlidingWindow, Limit: 100, Period: time.Minute, MaxCost: 5}, 20, 5*time.Second),
			int64(500 * time.Millisecond), func(p admission.Policy, s []spend) error {
				if err := checkWindows(s, p.Limit, func(at int64) int64 { return at / minute }); err != nil {
					return err
				}
				return checkSliding(s, p.Limit, minute)
			}, nil},
		{leased(admission.Policy{Name: "qu", Algorithm: admission.AlgorithmQuota, Limit: 500, MaxCost: 5, Calendar: admission.CalendarDay}, 30, time.Hour),
			int64(5 * time.Minute), func(p admission.Policy, s []spend) error {
				return checkWindows(s, p.Limit, func(at int64) int64 { return at / day })
			}, nil},
	}
}

// Strict decisions and units spent locally from budget leases never exceed
// the policy, per key and window, however holders renew, release or die:
// for the seeds that once found a limit exceeded, and for random ones.
func TestGrantExactness(t *testing.T) {
	for _, tc := range exactnessCases() {
		t.Run(tc.p.Name, func(t *testing.T) {
			prop := func(seed uint64) bool {
				spent := simulateLeases(t, tc.p, seed, 600, tc.maxStep)
				if err := tc.check(tc.p, spent); err != nil {
					t.Errorf("seed %d: %v", seed, err)
					return false
				}
				return true
			}
			for _, seed := range tc.seeds {
				prop(seed)
			}
			// Drawn from a fixed source, so that every run checks the same
			// seeds: a run must not pass or fail by chance.
			if err := quick.Check(prop, &quick.Config{MaxCount: 40, Rand: randv1.New(randv1.NewSource(29))}); err != nil {
				t.Error(err)
			}
		})
	}
}

// Two FSMs applying the same random log of admits and grant calls (new,
// renewed, released, retried, stale, expired) decide alike and end with
// identical snapshots; so does one restored from a snapshot midway.
func TestGrantDeterminism(t *testing.T) {
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 99))
		now := t0
		envs := []*raftcmdv1.Envelope{putPoliciesEnv(now, grantPolicies()...)}
		policies := []string{"tb", "fw", "sw", "qu"}
		for range 1500 {
			now += rng.Int64N(int64(400 * time.Millisecond))
			p, k := policies[rng.IntN(len(policies))], fmt.Sprint("k", rng.IntN(3))
			switch x := rng.IntN(10); {
			case x < 3:
				envs = append(envs, admitEnv(now, p, k, 1+rng.Int64N(5)))
			case x == 3:
				envs = append(envs, expireEnv(now))
			default:
				envs = append(envs, gcall{policy: p, key: k, holder: fmt.Sprint("h", rng.IntN(4)), seq: uint64(rng.IntN(6)),
					want: rng.Int64N(50), used: rng.Int64N(40), demand: rng.Int64N(3000), release: x == 9}.env(now))
			}
		}
		a, _ := applyTwiceAndRestored(t, seed, envs)
		if live, _, _ := a.f.GrantStats(); live == 0 {
			t.Logf("seed %d: no grant live at the end", seed)
		}
	}
}
