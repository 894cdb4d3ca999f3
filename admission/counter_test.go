package admission_test

// Shared by the fixed_window and quota tests: a brute-force counter model,
// a random request-sequence runner that checks the algorithm against it,
// and the fuzz targets.

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

// horizon2200 is 2200-01-01T00:00:00Z in Unix ns: the tests' time range is
// [0, horizon2200].
const horizon2200 = int64(7_258_118_400) * int64(time.Second)

// counterModel is a brute-force window counter: an explicit map from window
// start to the units admitted in that window. Window boundaries come from
// window, which the tests compute independently of the algorithm.
type counterModel struct {
	limit  int64
	window func(now int64) (start, end int64)
	counts map[int64]int64
}

// decide admits cost if it fits in now's window; it returns the decision
// the algorithm must produce, field for field.
func (m *counterModel) decide(cost, now int64) admission.Decision {
	start, end := m.window(now)
	d := admission.Decision{Limit: m.limit, ResetAfter: time.Duration(end - now)}
	if m.counts[start]+cost <= m.limit {
		m.counts[start] += cost
		d.Allowed = true
	} else {
		d.RetryAfter = time.Duration(end - now) // the next window is empty
	}
	d.Remaining = m.limit - m.counts[start]
	return d
}

// setCounterCaps sets p's burst (unset or the limit) and max_cost (unset, 1
// to limit, or the limit) at random.
func setCounterCaps(r *rand.Rand, p *admission.Policy) {
	if r.IntN(2) == 0 {
		p.Burst = p.Limit
	}
	switch r.IntN(3) {
	case 1:
		p.MaxCost = 1 + r.Int64N(p.Limit)
	case 2:
		p.MaxCost = p.Limit
	}
}

func kindFor(p admission.Policy) admission.Kind {
	if p.Algorithm == admission.AlgorithmQuota {
		return admission.KindQuota
	}
	return admission.KindFixedWindow
}

// runCounterSequence decides 50..200 random requests of p from now on
// (non-decreasing times: equal times, small steps, exactly at, just before
// and just after window boundaries, long idles) through admission.Decide and
// checks each against counterModel: the same decision field for field, the
// state it must hold, exact RetryAfter, Peek, and ExpiresAt. A failure names
// the iteration, whose seed reproduces it.
func runCounterSequence(t testing.TB, r *rand.Rand, p admission.Policy, window func(int64) (int64, int64), now int64, iter int) (allows, denials int) {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatalf("iteration %d: generated invalid policy %+v: %v", iter, p, err)
	}
	kind, maxCost := kindFor(p), p.WithDefaults().MaxCost
	model := &counterModel{limit: p.Limit, window: window, counts: map[int64]int64{}}
	var s admission.State
	for step := range 50 + r.IntN(150) {
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
		start, end := window(now)
		length, toEnd := end-start, end-now
		var gap int64
		switch r.IntN(20) {
		case 0, 1, 2, 3, 4: // same instant
		case 5, 6:
			gap = 1 + r.Int64N(1000)
		case 7, 8, 9:
			gap = r.Int64N(toEnd + 1)
		case 10, 11, 12, 13: // at, just before, just after the boundary
			gap = toEnd + []int64{-1, 0, 1}[r.IntN(3)]
		case 14, 15, 16:
			gap = r.Int64N(3*length + 1)
		default: // long idle
			gap = length*(2+r.Int64N(50)) + r.Int64N(length)
		}
		if now+gap <= horizon2200 {
			now += gap
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("iteration %d, step %d, policy %+v, state %+v, cost %d, now %d (%v): "+format,
				append([]any{iter, step, p, s, cost, now, time.Unix(0, now).UTC()}, args...)...)
		}
		if err := p.CheckRequest("k", cost); err != nil {
			fail("generated invalid cost: %v", err)
		}

		ns, d := admission.Decide(p, s, cost, now)
		if want := model.decide(cost, now); d != want {
			fail("decision %+v, model says %+v", d, want)
		}
		start, end = window(now)
		count := model.counts[start]
		if d.Allowed {
			allows++
			if want := (admission.State{Kind: kind, Start: start, Count: count}); !reflect.DeepEqual(ns, want) {
				fail("new state %+v, want %+v", ns, want)
			}
		} else {
			denials++
			if !reflect.DeepEqual(ns, s) {
				fail("denial changed the state to %+v", ns)
			}
			at := now + int64(d.RetryAfter)
			if _, d2 := admission.Decide(p, s, cost, at-1); d2.Allowed {
				fail("allowed at now+RetryAfter-1 (RetryAfter %v)", d.RetryAfter)
			}
			if _, d2 := admission.Decide(p, s, cost, at); !d2.Allowed {
				fail("denied at now+RetryAfter (RetryAfter %v): %+v", d.RetryAfter, d2)
			}
		}
		// Peek describes the state as it is now, without spending.
		pk := admission.Peek(p, ns, now)
		if pk.Allowed != (count < p.Limit) || pk.Remaining != p.Limit-count || pk.Limit != p.Limit {
			fail("Peek = %+v with %d of %d spent", pk, count, p.Limit)
		}
		// The state ends with its window; from then on it is as good as none.
		if e := admission.ExpiresAt(p, ns); e != end {
			fail("ExpiresAt = %d, want the window's end %d", e, end)
		}
		s1, d1 := admission.Decide(p, ns, 1, end)
		s2, d2 := admission.Decide(p, admission.State{}, 1, end)
		if d1 != d2 || !reflect.DeepEqual(s1, s2) {
			fail("at ExpiresAt the state still counts: %+v %+v, new key %+v %+v", s1, d1, s2, d2)
		}
		s = ns
	}
	return allows, denials
}

// FuzzDecideFixedWindow checks decideFixedWindow's invariants on arbitrary
// inputs (see fuzzCounter). period is in seconds once folded.
func FuzzDecideFixedWindow(f *testing.F) {
	f.Add(int64(5), int64(60), int64(0), t0, []byte{0, 4, 2, 4, 0, 255, 12, 1})
	f.Add(int64(1), int64(1), int64(1), int64(0), []byte{1, 0, 2, 0, 3, 0, 4, 0})
	f.Add(int64(1e9), int64(366*86400), int64(1e9), horizon2200-1, []byte{0, 255, 0, 255, 14, 255})
	f.Add(int64(-1), int64(-1), int64(-1), int64(-1), []byte{})
	f.Add(int64(7), int64(7*86400), int64(3), int64(1<<62), []byte{5, 9, 13, 200, 6, 7, 77, 3})
	f.Fuzz(func(t *testing.T, limit, period, maxCost, start int64, ops []byte) {
		raw := admission.Policy{Name: "fuzz", Algorithm: admission.AlgorithmFixedWindow,
			Limit: limit, Period: time.Duration(period), MaxCost: maxCost}
		lim := 1 + fold(limit, 1e9)
		p := admission.Policy{Name: "fuzz", Algorithm: admission.AlgorithmFixedWindow, Limit: lim,
			Period: time.Duration(1+fold(period, 366*86400)) * time.Second, MaxCost: fold(maxCost, lim+1)}
		sec := int64(p.Period)
		fuzzCounter(t, raw, p, func(now int64) (int64, int64) { return now / sec * sec, now/sec*sec + sec }, start, ops)
	})
}

// FuzzDecideQuota checks decideQuota's invariants on arbitrary inputs (see
// fuzzCounter). calendar picks one of the four once folded.
func FuzzDecideQuota(f *testing.F) {
	f.Add(int64(5), int64(2), int64(0), t0, []byte{0, 4, 2, 4, 0, 255, 12, 1})
	f.Add(int64(1), int64(1), int64(1), int64(1_835_481_599_999_999_999), []byte{2, 0, 3, 0, 4, 0, 0, 0}) // 2028-02-29T23:59:59.999999999Z
	f.Add(int64(1e12), int64(3), int64(1e12), horizon2200-1, []byte{0, 255, 2, 255, 14, 255})
	f.Add(int64(-1), int64(-1), int64(-1), int64(-1), []byte{})
	f.Add(int64(3), int64(0), int64(2), int64(1<<62), []byte{5, 9, 13, 200, 6, 7, 77, 3})
	f.Fuzz(func(t *testing.T, limit, calendar, maxCost, start int64, ops []byte) {
		cals := []admission.Calendar{admission.CalendarDay, admission.CalendarWeek, admission.CalendarMonth, admission.CalendarYear}
		raw := admission.Policy{Name: "fuzz", Algorithm: admission.AlgorithmQuota, Limit: limit,
			Period: time.Duration(calendar), MaxCost: maxCost, Calendar: cals[fold(calendar, 4)]}
		lim := 1 + fold(limit, 1e12)
		p := admission.Policy{Name: "fuzz", Algorithm: admission.AlgorithmQuota, Limit: lim,
			Calendar: cals[fold(calendar, 4)], MaxCost: fold(maxCost, lim+1)}
		fuzzCounter(t, raw, p, func(now int64) (int64, int64) { return quotaPeriod(p.Calendar, now) }, start, ops)
	})
}

// fold maps v into [0, n).
func fold(v, n int64) int64 { return int64(uint64(v) % uint64(n)) }

// fuzzCounter first decides once with the raw values (any policy, cost and
// now: it must not panic, and must fail closed on an invalid policy), then
// runs a sequence under the folded valid policy p from now = start folded
// into [0, 2200), each step driven by two bytes of ops (gap kind, cost).
//
// Invariants: 0 ≤ Remaining ≤ Limit = limit; 1ns ≤ ResetAfter ≤ the window;
// a denial leaves the state unchanged and has RetryAfter = ResetAfter; an
// allow has RetryAfter 0 and a state of now's window; the same inputs give
// the same outputs; never more than limit units in one window (by window's
// independent boundaries); Peek of the new state reports its Remaining.
func fuzzCounter(t *testing.T, raw, p admission.Policy, window func(int64) (int64, int64), start int64, ops []byte) {
	rawCost := int64(len(ops)) - 1
	if _, d := admission.Decide(raw, admission.State{}, rawCost, start); raw.Validate() != nil && (d.Allowed || d.RetryAfter != admission.NeverRetry) {
		t.Fatalf("invalid policy %+v was not failed closed: %+v", raw, d)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("folded policy %+v is invalid: %v", p, err)
	}
	maxCost := p.WithDefaults().MaxCost
	now := fold(start, horizon2200)
	spent := map[int64]int64{}
	var s admission.State
	for i := 0; i+1 < len(ops) && i < 400; i += 2 {
		ws, we := window(now)
		switch g := int64(ops[i]); g % 8 {
		case 1:
			now++
		case 2:
			now = we
		case 3:
			now = we - 1
		case 4:
			now = we + 1
		case 5:
			now += (g >> 3) * (we - ws) / 32
		case 6:
			now += (g >> 3) * (we - ws)
		case 7:
			now += (g >> 3) * int64(time.Second)
		}
		now = min(now, horizon2200)
		cost := 1 + int64(ops[i+1])%maxCost
		if ops[i+1] == 255 {
			cost = maxCost
		}
		ns, d := admission.Decide(p, s, cost, now)
		if ns2, d2 := admission.Decide(p, s, cost, now); d2 != d || !reflect.DeepEqual(ns2, ns) {
			t.Fatalf("not deterministic: %+v %+v then %+v %+v", ns, d, ns2, d2)
		}
		fail := func(what string) {
			t.Helper()
			t.Fatalf("%s: policy %+v, state %+v, cost %d, now %d → state %+v, %+v", what, p, s, cost, now, ns, d)
		}
		ws, we = window(now)
		if d.Limit != p.Limit || d.Remaining < 0 || d.Remaining > d.Limit {
			fail("Limit is not the limit, or Remaining out of 0..Limit")
		}
		if d.ResetAfter < 1 || int64(d.ResetAfter) > we-ws {
			fail("ResetAfter outside 1ns..window")
		}
		if d.Allowed {
			if d.RetryAfter != 0 || ns.Start != ws || ns.Kind != kindFor(p) {
				fail("allowed with a RetryAfter, or a state of another window")
			}
			if spent[ws] += cost; spent[ws] > p.Limit {
				fail("more than limit admitted in one window")
			}
			if pk := admission.Peek(p, ns, now); pk.Remaining != d.Remaining {
				fail("Peek of the new state disagrees on Remaining")
			}
		} else if !reflect.DeepEqual(ns, s) || d.RetryAfter != d.ResetAfter {
			fail("denial changed the state, or RetryAfter is not the window's end")
		}
		s = ns
	}
}
