package admission_test

import (
	"math/big"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

// swModel is the seed's sliding counter computed independently of the
// algorithm: units admitted per fixed window in a map, the estimate in big
// integers, and the waits found by binary search over time.
type swModel struct {
	limit, period int64
	counts        map[int64]int64 // window index → units admitted in it
}

// scaled is (estimate at t) × period with extra units added to the current
// window: prev×(P−e) + (curr+extra)×P.
func (m *swModel) scaled(t, extra int64) *big.Int {
	k, e := t/m.period, t%m.period
	a := new(big.Int).Mul(big.NewInt(m.counts[k-1]), big.NewInt(m.period-e))
	return a.Add(a, new(big.Int).Mul(big.NewInt(m.counts[k]+extra), big.NewInt(m.period)))
}

func (m *swModel) allows(cost, t int64) bool {
	return m.scaled(t, cost).Cmp(new(big.Int).Mul(big.NewInt(m.limit), big.NewInt(m.period))) <= 0
}

// remaining is floor(limit − estimate) at t, clamped to 0..limit.
func (m *swModel) remaining(t int64) int64 {
	num := new(big.Int).Mul(big.NewInt(m.limit), big.NewInt(m.period))
	num.Sub(num, m.scaled(t, 0))
	if num.Sign() <= 0 {
		return 0
	}
	return min(num.Div(num, big.NewInt(m.period)).Int64(), m.limit)
}

// first is the smallest t in [lo, lo+2P] with ok(t), by binary search
// (the estimate never grows while nothing is spent).
func (m *swModel) first(tb testing.TB, lo int64, ok func(t int64) bool) int64 {
	tb.Helper()
	hi := lo + 2*m.period
	if !ok(hi) {
		tb.Fatalf("model: not satisfied even two periods later")
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func (m *swModel) emptyAt(tb testing.TB, now int64) int64 {
	return m.first(tb, now, func(t int64) bool { return m.scaled(t, 0).Sign() == 0 })
}

// peek is what the model says about cost 1 at now, without spending.
func (m *swModel) peek(tb testing.TB, now int64) admission.Decision {
	tb.Helper()
	d := admission.Decision{Limit: m.limit, Remaining: m.remaining(now), ResetAfter: time.Duration(m.emptyAt(tb, now) - now)}
	if d.Allowed = m.allows(1, now); !d.Allowed {
		d.RetryAfter = time.Duration(m.first(tb, now, func(t int64) bool { return m.allows(1, t) }) - now)
	}
	return d
}

func (m *swModel) decide(tb testing.TB, cost, now int64) admission.Decision {
	tb.Helper()
	d := admission.Decision{Limit: m.limit}
	if m.allows(cost, now) {
		m.counts[now/m.period] += cost
		d.Allowed = true
	} else {
		d.RetryAfter = time.Duration(m.first(tb, now+1, func(t int64) bool { return m.allows(cost, t) }) - now)
	}
	d.Remaining = m.remaining(now)
	d.ResetAfter = time.Duration(m.emptyAt(tb, now) - now)
	return d
}

// slModel is an exact rolling window: a plain list of every admitted
// request; the units of (t−P, t] are summed from scratch.
type slModel struct {
	limit, period int64
	log           []admitted
}

func (m *slModel) live(t int64) (sum, newest int64) {
	for _, a := range m.log {
		if a.at > t-m.period && a.at <= t {
			sum, newest = sum+a.cost, a.at
		}
	}
	return sum, newest
}

// status describes the model at now for a request of cost, without
// spending; RetryAfter is the first instant an entry leaves at which cost
// fits (nothing else changes between those instants).
func (m *slModel) status(cost, now int64) admission.Decision {
	sum, newest := m.live(now)
	d := admission.Decision{Limit: m.limit, Remaining: max(0, m.limit-sum), Allowed: sum+cost <= m.limit}
	if sum > 0 {
		d.ResetAfter = time.Duration(newest + m.period - now)
	}
	if !d.Allowed {
		for _, a := range m.log {
			if at := a.at + m.period; at > now {
				if s, _ := m.live(at); s+cost <= m.limit {
					d.RetryAfter = time.Duration(at - now)
					break
				}
			}
		}
	}
	return d
}

func (m *slModel) decide(cost, now int64) admission.Decision {
	d := m.status(cost, now)
	if d.Allowed {
		m.log = append(m.log, admitted{now, cost})
		d = m.status(0, now)
		d.Allowed = true
	}
	return d
}

// slidingPairs calls check(Δ, units) for every pair of admission times
// a ≤ b with Δ = b − a < period, where units is the total admitted in [a, b].
func slidingPairs(log []admitted, period int64, check func(dt, units int64)) {
	var times, prefix []int64 // distinct times; prefix[i] = units before times[i]
	var total int64
	for i, a := range log {
		if i == 0 || a.at != log[i-1].at {
			times, prefix = append(times, a.at), append(prefix, total)
		}
		total += a.cost
	}
	prefix = append(prefix, total)
	for i := range times {
		for j := i; j < len(times) && times[j]-times[i] < period; j++ {
			check(times[j]-times[i], prefix[j+1]-prefix[i])
		}
	}
}

// swBound is the documented bound on the units a sliding window admits in
// a span of dt < period: limit + floor(limit × (dt − 1)/period).
func swBound(limit, period, dt int64) int64 {
	if dt == 0 {
		return limit
	}
	hi, lo := bits.Mul64(uint64(limit), uint64(dt-1))
	q, _ := bits.Div64(hi, lo, uint64(period))
	return limit + int64(q)
}

// slidingGap picks the time to the next request: the same instant, short
// and long gaps, jumps to just around a window boundary or to when an
// admitted request leaves, and long idles.
func slidingGap(r *rand.Rand, p admission.Policy, now int64, log []admitted) int64 {
	P := int64(p.Period)
	switch r.IntN(12) {
	case 0, 1, 2:
		return 0
	case 3, 4:
		return r.Int64N(P/p.Limit + 2)
	case 5, 6:
		return r.Int64N(P/8 + 1)
	case 7:
		return r.Int64N(P + 1)
	case 8, 9: // around the next window boundary
		return max(0, now-now%P+P+r.Int64N(5)-2-now)
	case 10: // around when an admitted request leaves
		if len(log) > 0 {
			return max(0, log[r.IntN(len(log))].at+P+r.Int64N(3)-1-now)
		}
		return P - 2
	default:
		return 2*P + r.Int64N(2*P)
	}
}

// slidingCost picks a cost: mostly 1, small, any, max_cost, or what is
// left (an adversary filling every gap).
func slidingCost(r *rand.Rand, maxCost, left int64) int64 {
	switch r.IntN(8) {
	case 0, 1, 2:
		return 1
	case 3:
		return 1 + r.Int64N(min(maxCost, 3))
	case 4:
		return 1 + r.Int64N(maxCost)
	case 5:
		return maxCost
	default:
		return min(maxCost, max(1, left))
	}
}

// slidingHorizon (about the year 2220) is the latest time a sequence goes to.
const slidingHorizon = 7_900_000_000e9

func slidingStart(r *rand.Rand, P int64) int64 {
	switch r.IntN(4) {
	case 0: // a window's last nanosecond
		return t0 - t0%P + P - 1
	case 1: // the year 2200
		return 7258118400e9 - r.Int64N(int64(366*day))
	default:
		return t0 + r.Int64N(int64(366*day))
	}
}

func swRandomPolicy(r *rand.Rand) admission.Policy {
	scales := []int64{int64(time.Second), int64(time.Minute), int64(time.Hour), int64(day), int64(366 * day)}
	period := scales[r.IntN(len(scales))]
	switch r.IntN(3) {
	case 1:
		period += r.Int64N(period)
	case 2:
		period = int64(time.Second) + r.Int64N(period)
	}
	period = min(period, int64(366*day))
	period -= period % int64(ms)
	p := swPolicy(1+r.Int64N(pow10(r.IntN(10))), time.Duration(period))
	if r.IntN(2) == 0 {
		p.MaxCost = 1 + r.Int64N(p.Limit)
	}
	return p
}

func slRandomPolicy(r *rand.Rand) admission.Policy {
	scales := []int64{int64(ms), int64(10 * ms), int64(time.Second), int64(time.Minute), int64(time.Hour), int64(day), int64(366 * day)}
	period := scales[r.IntN(len(scales))]
	switch r.IntN(3) {
	case 1:
		period += r.Int64N(period)
	case 2:
		period = int64(ms) + r.Int64N(period)
	}
	p := slPolicy(1+r.Int64N(pow10(r.IntN(5))), time.Duration(min(period, int64(366*day))))
	if r.IntN(2) == 0 {
		p.MaxCost = 1 + r.Int64N(p.Limit)
	}
	return p
}

// TestSlidingWindowMatchesModel runs random policies and request sequences
// through admission.Decide and checks every decision, field for field,
// against swModel (RetryAfter and ResetAfter found by search), Peek against
// the model, the state and ExpiresAt; then the documented error bound on
// every pair of admissions, and that a denial never refuses what fits with
// everything admitted since the previous window's start.
func TestSlidingWindowMatchesModel(t *testing.T) {
	iterations := 300
	if testing.Short() {
		iterations = 50
	}
	var allows, denials, over int
	for iter := range iterations {
		r := rand.New(rand.NewPCG(uint64(iter), 0x5157))
		p := swRandomPolicy(r)
		P, L, maxCost := int64(p.Period), p.Limit, p.WithDefaults().MaxCost
		m := &swModel{limit: L, period: P, counts: map[int64]int64{}}
		var s admission.State
		var log []admitted
		now, left := slidingStart(r, P), L
		for step := range 50 + r.IntN(100) {
			if g := slidingGap(r, p, now, log); now+g <= slidingHorizon {
				now += g
			}
			cost := slidingCost(r, maxCost, left)
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("iteration %d, step %d, policy %+v, state %+v, cost %d, now %d: "+format,
					append([]any{iter, step, p, s, cost, now}, args...)...)
			}
			if got, want := admission.Peek(p, s, now), m.peek(t, now); got != want {
				fail("Peek %+v, model says %+v", got, want)
			}
			k := now / P
			before := m.counts[k-1] + m.counts[k]
			ns, d := slidingDecide(t, p, s, cost, now)
			if want := m.decide(t, cost, now); d != want {
				fail("decision %+v, model says %+v", d, want)
			}
			if d.Allowed {
				allows++
				log = append(log, admitted{now, cost})
				want := admission.State{Kind: admission.KindSlidingWindow, Start: k * P, Count: m.counts[k], Prev: m.counts[k-1]}
				if !slidingEqual(ns, want) || m.counts[k] > L {
					fail("new state %+v, want %+v (at most limit)", ns, want)
				}
				if got := admission.ExpiresAt(p, ns); got != now+int64(d.ResetAfter) {
					fail("ExpiresAt %d, want now+ResetAfter %d", got, now+int64(d.ResetAfter))
				}
			} else {
				denials++
				swRetryExact(t, p, s, cost, now, d)
				if before+cost <= L {
					fail("denied though %d units since the previous window's start leave room", before)
				}
			}
			s, left = ns, d.Remaining
		}
		exceeded := false
		slidingPairs(log, P, func(dt, units int64) {
			if units > swBound(L, P, dt) {
				t.Fatalf("iteration %d, policy %+v: %d units in %dns, above the bound %d", iter, p, units, dt, swBound(L, P, dt))
			}
			exceeded = exceeded || units > L
		})
		if exceeded {
			over++
		}
	}
	if total := allows + denials; allows < total/10 || denials < total/10 || over == 0 {
		t.Errorf("unbalanced workload: %d allowed, %d denied, %d sequences above the limit", allows, denials, over)
	}
	t.Logf("%d iterations: %d allowed, %d denied; %d sequences admitted more than limit in a rolling period, within the bound",
		iterations, allows, denials, over)
}

// TestSlidingLogMatchesModel runs random policies and request sequences
// through admission.Decide and checks every decision, field for field,
// against slModel, Peek, the state (exactly the live entries) and
// ExpiresAt, and that no interval shorter than the period ever holds more
// than limit units.
func TestSlidingLogMatchesModel(t *testing.T) {
	iterations := 500
	if testing.Short() {
		iterations = 100
	}
	var allows, denials int
	for iter := range iterations {
		r := rand.New(rand.NewPCG(uint64(iter), 0x5106))
		p := slRandomPolicy(r)
		P, L, maxCost := int64(p.Period), p.Limit, p.WithDefaults().MaxCost
		m := &slModel{limit: L, period: P}
		var s admission.State
		now, left := slidingStart(r, P), L
		for step := range 50 + r.IntN(150) {
			if g := slidingGap(r, p, now, m.log); now+g <= slidingHorizon {
				now += g
			}
			cost := slidingCost(r, maxCost, left)
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("iteration %d, step %d, policy %+v, log %v, cost %d, now %d: "+format,
					append([]any{iter, step, p, s.Log, cost, now}, args...)...)
			}
			if got, want := admission.Peek(p, s, now), m.status(1, now); got != want {
				fail("Peek %+v, model says %+v", got, want)
			}
			ns, d := slidingDecide(t, p, s, cost, now)
			if want := m.decide(cost, now); d != want {
				fail("decision %+v, model says %+v", d, want)
			}
			if d.Allowed {
				allows++
				var live []admission.LogEntry
				for _, a := range m.log {
					if a.at > now-P {
						live = append(live, admission.LogEntry{At: a.at, Cost: a.cost})
					}
				}
				if ns.Kind != admission.KindSlidingLog || !slices.Equal(ns.Log, live) || int64(len(ns.Log)) > L {
					fail("new state %+v, want the live entries %v (at most limit)", ns, live)
				}
				if got := admission.ExpiresAt(p, ns); got != now+int64(d.ResetAfter) {
					fail("ExpiresAt %d, want now+ResetAfter %d", got, now+int64(d.ResetAfter))
				}
			} else {
				denials++
				swRetryExact(t, p, s, cost, now, d)
			}
			s, left = ns, d.Remaining
		}
		slidingPairs(m.log, P, func(dt, units int64) {
			if units > L {
				t.Fatalf("iteration %d, policy %+v: %d units within %dns, above the limit", iter, p, units, dt)
			}
		})
	}
	if total := allows + denials; allows < total/10 || denials < total/10 {
		t.Errorf("unbalanced workload: %d allowed, %d denied", allows, denials)
	}
	t.Logf("%d iterations: %d allowed, %d denied", iterations, allows, denials)
}
