package admission_test

import (
	"math"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

// FuzzDecideTokenBucket checks DecideTokenBucket's invariants on arbitrary
// inputs: first on the raw values (which may make an invalid policy or cost:
// it must still not panic and must fail closed), then with the same values
// folded into a valid policy and cost, deciding twice, gap nanoseconds apart.
//
// Invariants: 0 ≤ Remaining ≤ Limit; ResetAfter ≥ 0; a denial leaves the
// bucket unchanged and has RetryAfter > 0; an allow has RetryAfter 0 and a
// new TAT above now (now + ResetAfter), never below the old TAT; the same
// inputs give the same outputs.
func FuzzDecideTokenBucket(f *testing.F) {
	f.Add(int64(60), int64(time.Minute), int64(20), int64(10), int64(0), t0, int64(1), int64(0))
	f.Add(int64(20), int64(time.Second), int64(1), int64(0), t0, t0, int64(1), int64(50*ms)-1)
	f.Add(int64(3), int64(10*ms+1), int64(3), int64(3), t0+int64(time.Second), t0, int64(3), int64(1))
	f.Add(int64(1e9), int64(time.Second), int64(1e9), int64(1e9), int64(0), t0, int64(1e9), int64(1))
	f.Add(int64(1), int64(366*day), int64(10), int64(0), t0, t0, int64(10), int64(3660*day))
	f.Add(int64(0), int64(0), int64(0), int64(0), int64(math.MaxInt64), int64(math.MinInt64), int64(math.MinInt64), int64(math.MaxInt64))
	f.Add(int64(10), int64(time.Second), int64(5), int64(0), int64(0), int64(math.MaxInt64)-int64(100*ms), int64(1), int64(1))
	f.Add(int64(-1), int64(-1), int64(-1), int64(-1), int64(-1), int64(-1), int64(-1), int64(-1))

	f.Fuzz(func(t *testing.T, limit, period, burst, maxCost, tat, now, cost, gap int64) {
		raw := admission.Policy{Name: "fuzz", Algorithm: admission.AlgorithmTokenBucket,
			Limit: limit, Period: time.Duration(period), Burst: burst, MaxCost: maxCost}
		valid := raw.Validate() == nil
		_, d := checkInvariants(t, raw, admission.Bucket{TAT: tat}, cost, now)
		if !valid && (d.Allowed || d.RetryAfter != admission.NeverRetry) {
			t.Fatalf("invalid policy %+v was not failed closed: %+v", raw, d)
		}

		p := foldPolicy(limit, period, burst, maxCost)
		if err := p.Validate(); err != nil {
			t.Fatalf("folded policy %+v is invalid: %v", p, err)
		}
		c := 1 + int64(uint64(cost)%uint64(p.WithDefaults().MaxCost))
		if err := p.CheckRequest("k", c); err != nil {
			t.Fatalf("folded cost %d is invalid: %v", c, err)
		}
		b, d := checkInvariants(t, p, admission.Bucket{TAT: tat}, c, now)
		// In the exact domain (now ≥ 0, the new TAT representable, a state
		// reachable under this policy), a checked cost is never refused forever.
		window := p.Capacity() * p.EmissionInterval()
		exact := now >= 0 && now <= math.MaxInt64-2*window && tat <= now+window
		if exact && d.RetryAfter == admission.NeverRetry {
			t.Fatalf("checked cost %d refused forever at now %d, TAT %d, policy %+v", c, now, tat, p)
		}
		if exact && !d.Allowed {
			if _, d2 := admission.DecideTokenBucket(p, b, c, now+int64(d.RetryAfter)); !d2.Allowed {
				t.Fatalf("denied at now+RetryAfter: %+v then %+v", d, d2)
			}
		}
		// A second decision later (gap ≥ 0), from the returned state.
		if g := int64(uint64(gap) % uint64(2*window+1)); now <= math.MaxInt64-g {
			checkInvariants(t, p, b, c, now+g)
		}
	})
}

// foldPolicy maps arbitrary integers into a valid token-bucket policy.
func foldPolicy(limit, period, burst, maxCost int64) admission.Policy {
	const minP, maxP = int64(time.Millisecond), int64(366 * day)
	per := minP + int64(uint64(period)%uint64(maxP-minP+1))
	lim := 1 + int64(uint64(limit)%uint64(min(per, 1e9)))
	t := (per + lim - 1) / lim
	bur := int64(uint64(burst) % uint64(min(1e9, maxRefill/t)+1)) // 0 = default
	eff := bur
	if eff == 0 {
		eff = lim
	}
	mc := int64(uint64(maxCost) % uint64(eff+1)) // 0 = default
	return admission.Policy{Name: "fuzz", Algorithm: admission.AlgorithmTokenBucket,
		Limit: lim, Period: time.Duration(per), Burst: bur, MaxCost: mc}
}

func checkInvariants(t testing.TB, p admission.Policy, b admission.Bucket, cost, now int64) (admission.Bucket, admission.Decision) {
	t.Helper()
	nb, d := admission.DecideTokenBucket(p, b, cost, now)
	if nb2, d2 := admission.DecideTokenBucket(p, b, cost, now); nb2 != nb || d2 != d {
		t.Fatalf("not deterministic: %+v %+v then %+v %+v", nb, d, nb2, d2)
	}
	fail := func(what string) {
		t.Helper()
		t.Fatalf("%s: policy %+v, bucket %+v, cost %d, now %d → bucket %+v, %+v", what, p, b, cost, now, nb, d)
	}
	if d.Remaining < 0 || d.Remaining > d.Limit {
		fail("Remaining out of 0..Limit")
	}
	if d.ResetAfter < 0 || d.RetryAfter < 0 {
		fail("negative duration")
	}
	if p.Validate() == nil && d.Limit != p.Capacity() {
		fail("Limit is not the capacity")
	}
	if d.Allowed {
		if d.RetryAfter != 0 {
			fail("allowed with a RetryAfter")
		}
		if nb.TAT <= now || nb.TAT < b.TAT || nb.TAT-now != int64(d.ResetAfter) {
			fail("allowed, but the new TAT is not now+ResetAfter above now and the old TAT")
		}
	} else {
		if nb != b {
			fail("denial changed the bucket")
		}
		if d.RetryAfter <= 0 {
			fail("denied without a positive RetryAfter")
		}
	}
	return nb, d
}
