package admission_test

import (
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

// creditModel is a brute-force token bucket, independent of GCRA: it counts
// credits in exact integer nanoseconds. It holds at most burst×T credits,
// gains one credit per nanosecond, and a request of cost c needs c×T
// credits. It starts full. T = ceil(period/limit) is computed here again.
type creditModel struct {
	t, capacity, credits, last int64
}

func newCreditModel(p admission.Policy, now int64) *creditModel {
	burst := p.Burst
	if burst == 0 {
		burst = p.Limit
	}
	t := (int64(p.Period) + p.Limit - 1) / p.Limit
	return &creditModel{t: t, capacity: burst * t, credits: burst * t, last: now}
}

// advance refills the credits up to now, one per nanosecond.
func (m *creditModel) advance(tb testing.TB, now int64) {
	tb.Helper()
	if now < m.last {
		tb.Fatalf("model: time went backwards: %d < %d", now, m.last)
	}
	if now-m.last >= m.capacity-m.credits {
		m.credits = m.capacity
	} else {
		m.credits += now - m.last
	}
	m.last = now
}

// decide spends cost if the credits cover it. It returns the decision the
// algorithm must produce.
func (m *creditModel) decide(tb testing.TB, cost, now int64) admission.Decision {
	tb.Helper()
	m.advance(tb, now)
	need := cost * m.t
	d := admission.Decision{Limit: m.capacity / m.t}
	if m.credits >= need {
		m.credits -= need
		d.Allowed = true
	} else {
		d.RetryAfter = time.Duration(need - m.credits)
	}
	d.Remaining = m.credits / m.t
	d.ResetAfter = time.Duration(m.capacity - m.credits)
	return d
}

// fullAt reports whether the model is full at time at, without changing it.
func (m creditModel) fullAt(tb testing.TB, at int64) bool {
	tb.Helper()
	m.advance(tb, at)
	return m.credits == m.capacity
}

const maxRefill = int64(3660 * day) // Validate's bound on burst × T

// randomPolicy returns a valid token-bucket policy: periods from 1ms to 366
// days, often not divisible by the limit; limits and bursts spread over
// orders of magnitude; default and explicit burst and max_cost.
func randomPolicy(r *rand.Rand) admission.Policy {
	scales := []int64{int64(ms), int64(10 * ms), int64(time.Second), int64(time.Minute),
		int64(time.Hour), int64(day), int64(366 * day)}
	period := scales[r.IntN(len(scales))]
	switch r.IntN(3) {
	case 1:
		period += r.Int64N(period) // uneven
	case 2:
		period = int64(ms) + r.Int64N(period)
	}
	period = min(period, int64(366*day))
	limit := 1 + r.Int64N(min(period, 1e9, pow10(r.IntN(10))))
	t := (period + limit - 1) / limit
	maxBurst := min(1e9, maxRefill/t)
	var burst int64
	switch r.IntN(5) {
	case 0: // default: the limit
	case 1:
		burst = 1
	case 2:
		burst = 1 + r.Int64N(limit)
	case 3:
		burst = limit + r.Int64N(10*limit)
	case 4:
		burst = 1 + r.Int64N(pow10(r.IntN(10)))
	}
	burst = min(burst, maxBurst)
	eff := burst
	if eff == 0 {
		eff = limit
	}
	var maxCost int64
	if r.IntN(2) == 0 {
		maxCost = 1 + r.Int64N(eff)
	}
	return admission.Policy{Name: "prop", Algorithm: admission.AlgorithmTokenBucket,
		Limit: limit, Period: time.Duration(period), Burst: burst, MaxCost: maxCost}
}

func pow10(n int) int64 {
	v := int64(1)
	for range n {
		v *= 10
	}
	return v
}

type admitted struct{ at, cost int64 }

// TestTokenBucketMatchesModel runs random policies and random request
// sequences (costs, equal and increasing times, big gaps) through
// DecideTokenBucket and checks it against the credit model and GCRA's
// guarantees. A failure names the iteration: its seed reproduces it.
func TestTokenBucketMatchesModel(t *testing.T) {
	iterations := 1000
	if testing.Short() {
		iterations = 100
	}
	var allows, denials int
	for iter := range iterations {
		r := rand.New(rand.NewPCG(uint64(iter), 0x9e3779b97f4a7c15))
		p := randomPolicy(r)
		if err := p.Validate(); err != nil {
			t.Fatalf("iteration %d: generated invalid policy %+v: %v", iter, p, err)
		}
		a, d := runSequence(t, r, p, iter)
		allows += a
		denials += d
	}
	// Guard against a generator that never exercises one side.
	if total := allows + denials; allows < total/10 || denials < total/10 {
		t.Errorf("unbalanced workload: %d allowed, %d denied", allows, denials)
	}
	t.Logf("%d iterations: %d allowed, %d denied", iterations, allows, denials)
}

func runSequence(t testing.TB, r *rand.Rand, p admission.Policy, iter int) (allows, denials int) {
	t.Helper()
	T := p.EmissionInterval()
	burst := p.Capacity()
	maxCost := p.WithDefaults().MaxCost
	window := burst * T
	now := t0 + r.Int64N(int64(366*day))
	model := newCreditModel(p, now)
	var b admission.Bucket
	var log []admitted
	n := 50 + r.IntN(150)
	for step := range n {
		var cost int64
		switch r.IntN(10) {
		case 0, 1, 2, 3, 4:
			cost = 1
		case 5, 6:
			cost = 1 + r.Int64N(min(maxCost, 3))
		case 7, 8:
			cost = 1 + r.Int64N(maxCost)
		default:
			cost = maxCost
		}
		var gap int64
		switch r.IntN(20) {
		case 0, 1, 2, 3, 4: // same instant
		case 5, 6, 7, 8, 9:
			gap = r.Int64N(T + 1)
		case 10, 11, 12, 13:
			gap = r.Int64N(2*cost*T + 1)
		case 14, 15, 16:
			gap = r.Int64N(window + 1)
		case 17, 18:
			gap = []int64{1, T - 1, T, T + 1}[r.IntN(4)]
		default: // long idle
			gap = window + r.Int64N(2*window+1)
		}
		if now+gap < 8e18 { // stay far from the end of int64 time
			now += gap
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("iteration %d, step %d, policy %+v (T=%d), bucket %+v, cost %d, now %d: "+format,
				append([]any{iter, step, p, T, b, cost, now}, args...)...)
		}
		if err := p.CheckRequest("k", cost); err != nil {
			fail("generated invalid cost: %v", err)
		}

		nb, d := admission.DecideTokenBucket(p, b, cost, now)

		// (a) Same decision as the credit model, field for field.
		if want := model.decide(t, cost, now); d != want {
			fail("decision %+v, model says %+v", d, want)
		}
		if d.Remaining < 0 || d.Remaining > d.Limit || d.ResetAfter < 0 {
			fail("decision out of range: %+v", d)
		}
		if d.Allowed {
			allows++
			log = append(log, admitted{now, cost})
			if nb.TAT != now+int64(d.ResetAfter) {
				fail("new TAT %d, want now+ResetAfter %d", nb.TAT, now+int64(d.ResetAfter))
			}
		} else {
			denials++
			if nb != b {
				fail("denial changed the bucket to %+v", nb)
			}
			// (c) RetryAfter is exact on the same state.
			at := now + int64(d.RetryAfter)
			if _, d2 := admission.DecideTokenBucket(p, b, cost, at-1); d2.Allowed {
				fail("allowed at now+RetryAfter-1 (RetryAfter %v)", d.RetryAfter)
			}
			if _, d2 := admission.DecideTokenBucket(p, b, cost, at); !d2.Allowed {
				fail("denied at now+RetryAfter (RetryAfter %v): %+v", d.RetryAfter, d2)
			}
		}

		// (d) ResetAfter: full again exactly then, not a nanosecond before.
		full := now + int64(d.ResetAfter)
		if max(nb.ExpiresAt(), now) != full {
			fail("ExpiresAt %d, want now+ResetAfter %d", nb.ExpiresAt(), full)
		}
		if !model.fullAt(t, full) || (d.ResetAfter > 0 && model.fullAt(t, full-1)) {
			fail("model disagrees that the bucket is full again after ResetAfter %v", d.ResetAfter)
		}
		if _, d2 := admission.DecideTokenBucket(p, nb, 1, full); !d2.Allowed || d2.Remaining != burst-1 || d2.ResetAfter != time.Duration(T) {
			fail("at now+ResetAfter the bucket is not full: cost 1 gives %+v", d2)
		}
		b = nb
	}
	checkWindows(t, p, log, iter)
	return allows, denials
}

// checkWindows checks (b): for admitted requests i ≤ j, the admitted cost
// with arrival in [t_i, t_j] is at most burst + floor((t_j-t_i)/T), and at
// most burst + (t_j-t_i)×limit/period (exact 128-bit cross-multiplication).
func checkWindows(t testing.TB, p admission.Policy, log []admitted, iter int) {
	t.Helper()
	T := p.EmissionInterval()
	burst := p.Capacity()
	// prefix[k] = cost of log[:k]; first[i] = first index with log[i].at.
	prefix := make([]int64, len(log)+1)
	first := make([]int, len(log))
	for k, a := range log {
		prefix[k+1] = prefix[k] + a.cost
		first[k] = k
		if k > 0 && log[k-1].at == a.at {
			first[k] = first[k-1]
		}
	}
	last := len(log) - 1
	for j := len(log) - 1; j >= 0; j-- {
		if j < len(log)-1 && log[j+1].at != log[j].at {
			last = j
		}
		for i := 0; i <= j; i++ {
			if i > 0 && log[i-1].at == log[i].at {
				continue // same window as i-1
			}
			dt := log[j].at - log[i].at
			sum := prefix[last+1] - prefix[first[i]]
			if sum > burst+dt/T {
				t.Fatalf("iteration %d, policy %+v: %d units admitted in [%d, %d] (%dns), more than burst %d + %dns/T(%d)",
					iter, p, sum, log[i].at, log[j].at, dt, burst, dt, T)
			}
			// (sum - burst) × period ≤ dt × limit
			if excess := sum - burst; excess > 0 {
				lh, ll := bits.Mul64(uint64(excess), uint64(p.Period))
				rh, rl := bits.Mul64(uint64(dt), uint64(p.Limit))
				if lh > rh || lh == rh && ll > rl {
					t.Fatalf("iteration %d, policy %+v: %d units admitted in %dns exceed burst + %d per %v",
						iter, p, sum, dt, p.Limit, p.Period)
				}
			}
		}
	}
}
