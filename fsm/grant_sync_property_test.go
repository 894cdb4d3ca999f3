package fsm_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// syncHolder is a client of a sync policy: it admits locally at most its
// allowance since its last report, only while the allowance lives, and
// reports what it admitted: its running total while its record lives,
// what it admitted since its last report once the record is gone.
type syncHolder struct {
	name       string
	seq        uint64
	called     bool
	allowance  int64
	since, cum int64 // admitted since the last report; reported running total
	exp        int64
	dead       bool
}

// simulateSync runs a random schedule of strict admits and sync holders
// (admitting, reporting, releasing, dying) against one key of p, checks
// after every call that the key's live allowances add up to at most
// p.SyncBound(), and returns every unit admitted.
func simulateSync(tb testing.TB, p admission.Policy, seed uint64, steps int, maxStep int64) ([]spend, error) {
	rng := rand.New(rand.NewPCG(seed, 7))
	a := newApplier(tb, fsm.Options{})
	now := t0 + rng.Int64N(int64(24*time.Hour))
	a.putPolicies(now, p)
	bound := p.WithDefaults().SyncBound()
	holders := make([]*syncHolder, 5)
	for i := range holders {
		holders[i] = &syncHolder{name: fmt.Sprint("h", i)}
	}
	var spent []spend
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
		switch x := rng.IntN(10); {
		case x < 5 && live && h.allowance > h.since:
			n := 1 + rng.Int64N(h.allowance-h.since)
			h.since += n
			spent = append(spent, spend{now, n})
		case x < 9:
			used := h.since
			if live {
				used += h.cum
			}
			if h.called {
				h.seq++
			}
			h.called = true
			c := gcall{policy: p.Name, key: "k", holder: h.name, seq: h.seq, want: 1 + rng.Int64N(3*bound),
				used: used, demand: rng.Int64N(5000), release: x == 8 && live}
			r := a.grant(now, c)
			if rng.IntN(8) == 0 && !c.release {
				again := a.grant(now, c)
				again.Duplicate = false
				if again != r {
					return nil, fmt.Errorf("retry of %+v = %+v, first %+v", c, again, r)
				}
			}
			h.since, h.cum, h.allowance, h.exp = 0, used, r.Total, r.ExpiresAt
			if c.release || r.StartedAt == 0 {
				h.cum, h.allowance, h.exp = 0, 0, 0
			}
			sum := int64(0)
			for _, g := range a.f.GrantsOf(p.Name, "k") {
				if g.Sync {
					sum += g.Total
				}
			}
			if sum > bound {
				return nil, fmt.Errorf("at %d: live allowances add up to %d > bound %d", now, sum, bound)
			}
		case x == 9 && rng.IntN(4) == 0:
			h.dead = true // it never reports what it admitted
		}
	}
	slices.SortStableFunc(spent, func(x, y spend) int { return int(min(max(x.at-y.at, -1), 1)) })
	return spent, nil
}

// checkGCRAOver checks that the units admitted since the first are at most
// burst + rate × elapsed + over.
func checkGCRAOver(spent []spend, p admission.Policy, over int64) error {
	t, burst := p.EmissionInterval(), p.WithDefaults().Burst
	if len(spent) == 0 {
		return nil
	}
	first, total := spent[0].at, int64(0)
	for _, s := range spent {
		if total += s.cost; total > burst+(s.at-first)/t+over {
			return fmt.Errorf("at %d: %d admitted since %d, more than burst + rate × elapsed + %d", s.at, total, first, over)
		}
	}
	return nil
}

// Strict decisions and local admits of sync holders exceed the policy by
// at most its SyncBound, per key and window, however holders report,
// release or die; the key's live allowances never add up to more.
func TestSyncOvershootBound(t *testing.T) {
	minute, day := int64(time.Minute), int64(24*time.Hour)
	for _, tc := range []struct {
		p       admission.Policy
		maxStep int64
		check   func(admission.Policy, []spend) error
	}{
		{synced(tokenBucket("tb", 100, time.Second, 50, 5), 100*time.Millisecond), int64(20 * time.Millisecond),
			func(p admission.Policy, s []spend) error { return checkGCRAOver(s, p, p.SyncBound()) }},
		{synced(tokenBucket("tb-slow", 100, time.Second, 20, 5), 300*time.Millisecond), int64(5 * time.Millisecond),
			func(p admission.Policy, s []spend) error { return checkGCRAOver(s, p, p.SyncBound()) }},
		{synced(admission.Policy{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 100, Period: time.Minute, MaxCost: 5}, 6*time.Second),
			int64(500 * time.Millisecond), func(p admission.Policy, s []spend) error {
				return checkWindows(s, p.Limit+p.SyncBound(), func(at int64) int64 { return at / minute })
			}},
		{synced(admission.Policy{Name: "sw", Algorithm: admission.AlgorithmSlidingWindow, Limit: 100, Period: time.Minute, MaxCost: 5}, 6*time.Second),
			int64(500 * time.Millisecond), func(p admission.Policy, s []spend) error {
				return checkWindows(s, p.Limit+p.SyncBound(), func(at int64) int64 { return at / minute })
			}},
		{synced(admission.Policy{Name: "qu", Algorithm: admission.AlgorithmQuota, Limit: 500, MaxCost: 5, Calendar: admission.CalendarDay}, time.Minute),
			int64(5 * time.Minute), func(p admission.Policy, s []spend) error {
				return checkWindows(s, p.Limit+p.SyncBound(), func(at int64) int64 { return at / day })
			}},
	} {
		t.Run(tc.p.Name, func(t *testing.T) {
			p := tc.p.WithDefaults()
			prop := func(seed uint64) bool {
				spent, err := simulateSync(t, p, seed, 600, tc.maxStep)
				if err == nil {
					err = tc.check(p, spent)
				}
				if err != nil {
					t.Errorf("seed %d (bound %d): %v", seed, p.SyncBound(), err)
					return false
				}
				return true
			}
			if err := quick.Check(prop, &quick.Config{MaxCount: 40}); err != nil {
				t.Error(err)
			}
		})
	}
}

// syncPolicies has a sync policy of each algorithm that allows it, and
// "mx", which the determinism test switches between reserve and sync.
func syncPolicies(mxSync bool) []admission.Policy {
	mx := leased(tokenBucket("mx", 100, time.Second, 100, 10), 40, 5*time.Second)
	if mxSync {
		mx = synced(tokenBucket("mx", 100, time.Second, 100, 10), 300*time.Millisecond)
	}
	return []admission.Policy{
		synced(tokenBucket("ts", 100, time.Second, 100, 10), 200*time.Millisecond),
		synced(admission.Policy{Name: "fs", Algorithm: admission.AlgorithmFixedWindow, Limit: 100, Period: time.Minute, MaxCost: 10}, 5*time.Second),
		synced(admission.Policy{Name: "ss", Algorithm: admission.AlgorithmSlidingWindow, Limit: 100, Period: time.Minute, MaxCost: 10}, 5*time.Second),
		synced(admission.Policy{Name: "qs", Algorithm: admission.AlgorithmQuota, Limit: 1000, MaxCost: 10, Calendar: admission.CalendarDay}, time.Minute),
		mx,
	}
}

// TestSyncDeterminism is TestGrantDeterminism with sync allowances, and a
// policy that changes mode under its holders.
func TestSyncDeterminism(t *testing.T) {
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 98))
		now := t0
		envs := []*raftcmdv1.Envelope{putPoliciesEnv(now, append(grantPolicies(), syncPolicies(false)...)...)}
		policies := []string{"tb", "ts", "fs", "ss", "qs", "mx", "mx"}
		mxSync := false
		for range 1500 {
			now += rng.Int64N(int64(150 * time.Millisecond))
			p, k := policies[rng.IntN(len(policies))], fmt.Sprint("k", rng.IntN(3))
			switch x := rng.IntN(20); {
			case x < 5:
				envs = append(envs, admitEnv(now, p, k, 1+rng.Int64N(5)))
			case x == 5:
				envs = append(envs, expireEnv(now))
			case x == 6 && rng.IntN(4) == 0:
				mxSync = !mxSync
				envs = append(envs, putPoliciesEnv(now, syncPolicies(mxSync)[4]))
			default:
				envs = append(envs, gcall{policy: p, key: k, holder: fmt.Sprint("h", rng.IntN(4)), seq: uint64(rng.IntN(6)),
					want: rng.Int64N(50), used: rng.Int64N(40), demand: rng.Int64N(3000), release: x == 19}.env(now))
			}
		}
		a, b := applyTwiceAndRestored(t, seed, envs)
		if a.f.SyncStats() != b.f.SyncStats() {
			t.Errorf("seed %d: overshoot counts differ", seed)
		}
	}
}
