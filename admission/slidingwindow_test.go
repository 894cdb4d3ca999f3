package admission_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

// swMinute is the start of the one-minute window holding t0.
const swMinute = t0 - t0%int64(time.Minute)

func swPolicy(limit int64, period time.Duration) admission.Policy {
	return admission.Policy{Name: "sw", Algorithm: admission.AlgorithmSlidingWindow, Limit: limit, Period: period}
}

func slPolicy(limit int64, period time.Duration) admission.Policy {
	return admission.Policy{Name: "sl", Algorithm: admission.AlgorithmSlidingLog, Limit: limit, Period: period}
}

// slidingDecide calls admission.Decide after checking the policy and the
// cost, as callers must, and checks that the input state is not modified
// (not even the Log's backing array), that a denial returns it unchanged and
// that an allow returns a state of the policy's kind.
func slidingDecide(t testing.TB, p admission.Policy, s admission.State, cost, now int64) (admission.State, admission.Decision) {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatalf("invalid test policy %+v: %v", p, err)
	}
	if err := p.CheckRequest("k", cost); err != nil {
		t.Fatalf("invalid test cost %d: %v", cost, err)
	}
	before := slidingClone(s)
	ns, d := admission.Decide(p, s, cost, now)
	if !slidingEqual(s, before) {
		t.Fatalf("Decide modified its input state: %+v, was %+v", s, before)
	}
	if !d.Allowed && !slidingEqual(ns, s) {
		t.Fatalf("denial changed the state: %+v, was %+v", ns, s)
	}
	if d.Allowed {
		// The new Log must not share the input's backing array.
		for i := range ns.Log {
			ns.Log[i].At ^= 1
		}
		if !slidingEqual(s, before) {
			t.Fatalf("the new Log shares the input's backing array")
		}
		for i := range ns.Log {
			ns.Log[i].At ^= 1
		}
	}
	return ns, d
}

func slidingClone(s admission.State) admission.State {
	s.Log = slices.Clone(s.Log)
	return s
}

func slidingEqual(a, b admission.State) bool {
	return a.Kind == b.Kind && a.TAT == b.TAT && a.Start == b.Start && a.Count == b.Count &&
		a.Prev == b.Prev && slices.Equal(a.Log, b.Log)
}

func swWant(t testing.TB, got admission.State, start, count, prev int64) {
	t.Helper()
	want := admission.State{Kind: admission.KindSlidingWindow, Start: start, Count: count, Prev: prev}
	if !slidingEqual(got, want) {
		t.Fatalf("state = %+v, want %+v", got, want)
	}
}

// swRetryExact checks that a denied cost is still denied at
// now+RetryAfter−1 and allowed at now+RetryAfter, from the same state.
func swRetryExact(t testing.TB, p admission.Policy, s admission.State, cost, now int64, d admission.Decision) {
	t.Helper()
	at := now + int64(d.RetryAfter)
	if _, d2 := admission.Decide(p, s, cost, at-1); d2.Allowed {
		t.Fatalf("cost %d allowed at now+RetryAfter-1 (RetryAfter %v)", cost, d.RetryAfter)
	}
	if _, d2 := admission.Decide(p, s, cost, at); !d2.Allowed {
		t.Fatalf("cost %d denied at now+RetryAfter (RetryAfter %v): %+v", cost, d.RetryAfter, d2)
	}
}

// TestSlidingWindowSeedExample is the seed's example: 100/min, 80 in the
// previous minute, 25% into the current one.
func TestSlidingWindowSeedExample(t *testing.T) {
	p := swPolicy(100, time.Minute)
	w := swMinute
	s, _ := slidingDecide(t, p, admission.State{}, 80, w-int64(30*time.Second))
	now := w + int64(15*time.Second)
	s, d := slidingDecide(t, p, s, 20, now) // 80×0.75 + 20 = 80
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 100, Remaining: 20, ResetAfter: 105 * time.Second})
	swWant(t, s, w, 20, 80)
	s, d = slidingDecide(t, p, s, 20, now) // 80×0.75 + 40 = 100
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 100, Remaining: 0, ResetAfter: 105 * time.Second})
	// The next request is rejected until 80×(P−e)/P ≤ 59: e ≥ 15.75s.
	_, d = slidingDecide(t, p, s, 1, now)
	wantDecision(t, d, admission.Decision{Limit: 100, ResetAfter: 105 * time.Second, RetryAfter: 750 * ms})
	swRetryExact(t, p, s, 1, now, d)
	// Halfway: 80×0.5 + 40 = 80, so 20 fit.
	_, d = slidingDecide(t, p, s, 20, w+int64(30*time.Second))
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 100, Remaining: 0, ResetAfter: 90 * time.Second})
}

func TestSlidingWindowRollsForward(t *testing.T) {
	p := swPolicy(10, time.Minute)
	P := int64(time.Minute)
	w := swMinute
	s := admission.State{Kind: admission.KindSlidingWindow, Start: w, Count: 7, Prev: 3}
	// Exactly one window later: curr becomes prev, weighed fully at e = 0.
	ns, d := slidingDecide(t, p, s, 2, w+P)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 10, Remaining: 1, ResetAfter: 2 * time.Minute})
	swWant(t, ns, w+P, 2, 7)
	// The last nanosecond of the next window: 7 still weighs ceil(7/P) = 1.
	ns, d = slidingDecide(t, p, s, 9, w+2*P-1)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: time.Minute + 1})
	swWant(t, ns, w+P, 9, 7)
	// Two windows later (and much later) both counts are gone.
	for _, now := range []int64{w + 2*P, w + 2*P + 1, w + 50*P, w + int64(366*day)} {
		ns, d = slidingDecide(t, p, s, 10, now)
		wantDecision(t, d, admission.Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: time.Duration(2*P - now%P)})
		swWant(t, ns, now-now%P, 10, 0)
	}
	// ExpiresAt is the end of the window after the state's.
	if got := admission.ExpiresAt(p, s); got != w+2*P {
		t.Errorf("ExpiresAt = %d, want %d", got, w+2*P)
	}
}

// TestSlidingWindowBoundary shows the documented bound around a window
// boundary: limit units in a window's last nanosecond let through 1 more in
// the next second, and at most 2×limit−1 in a rolling minute (fixed
// windows would let 2×limit through at once).
func TestSlidingWindowBoundary(t *testing.T) {
	p := swPolicy(100, time.Minute)
	P := int64(time.Minute)
	w := swMinute
	s, d := slidingDecide(t, p, admission.State{}, 100, w-1)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 100, Remaining: 0, ResetAfter: time.Minute + 1})
	// At the boundary the previous minute weighs fully.
	_, d = slidingDecide(t, p, s, 1, w)
	wantDecision(t, d, admission.Decision{Limit: 100, ResetAfter: time.Minute, RetryAfter: 600 * ms})
	swRetryExact(t, p, s, 1, w, d)
	// In the second [w−1ns, w+1s−1ns]: 100 + floor(100×(1s−1ns)/1m) = 101.
	_, d = slidingDecide(t, p, s, 2, w+int64(time.Second)-1)
	if d.Allowed || d.Remaining != 1 {
		t.Fatalf("2 more within a second of the boundary: %+v, want denied with 1 remaining", d)
	}
	// 2ns before the minute ends: floor(100×(P−2)/P) = 99 more, so 199
	// units within [w−1, w+P−2], less than one period: 2×limit − 1.
	now := w + P - 2
	_, d = slidingDecide(t, p, s, 100, now)
	if d.Allowed || d.Remaining != 99 {
		t.Fatalf("cost 100 at %v into the next minute: %+v, want denied with 99 remaining", time.Duration(P-2), d)
	}
	s2, d := slidingDecide(t, p, s, 99, now)
	if !d.Allowed || d.Remaining != 0 {
		t.Fatalf("99 more: %+v", d)
	}
	// Never 2×limit in a rolling minute: the 200th unit is denied until
	// the next window (where the 100 have left), though at now+1 the exact
	// rolling minute already holds only 99: the estimate still weighs them.
	if _, d := slidingDecide(t, p, s2, 1, now+1); d.Allowed {
		t.Fatalf("a 200th unit within a rolling minute: %+v", d)
	}
	if _, d := slidingDecide(t, p, s2, 1, now+2); !d.Allowed {
		t.Fatalf("denied at the next window: %+v", d)
	}
}

func TestSlidingWindowRetryAfter(t *testing.T) {
	p := swPolicy(100, time.Minute)
	P := int64(time.Minute)
	w := swMinute
	tests := []struct {
		name string
		s    admission.State
		cost int64
		now  int64
		want time.Duration
	}{
		// 60 spent, no previous: 50 more fit when 60×(P−e)/P ≤ 50 in the next window.
		{"in the next window", admission.State{Start: w, Count: 60}, 50, w + 40*int64(time.Second), 20*time.Second + 10*time.Second},
		// The full limit waits until both counts have rolled out.
		{"two windows ahead", admission.State{Start: w, Count: 1}, 100, w, 2 * time.Minute},
		{"in this window", admission.State{Start: w, Count: 50, Prev: 100}, 1, w, 30*time.Second + 600*ms},
		{"curr full, previous empty", admission.State{Start: w, Count: 100}, 1, w + 1, time.Minute - 1 + 600*ms},
		{"uneven division", admission.State{Start: w, Count: 0, Prev: 7}, 100, w + 3, time.Minute - 3},
		// 7×(P−e) ≤ 4×P: e ≥ P − floor(4P/7), not a whole number of ns.
		{"rounding", admission.State{Start: w, Count: 0, Prev: 7}, 96, w, time.Duration(P - 4*P/7)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.Kind = admission.KindSlidingWindow
			_, d := slidingDecide(t, p, tc.s, tc.cost, tc.now)
			if d.Allowed || d.RetryAfter != tc.want {
				t.Fatalf("decision %+v, want denied with RetryAfter %v", d, tc.want)
			}
			swRetryExact(t, p, tc.s, tc.cost, tc.now, d)
		})
	}
}

func TestSlidingWindowGenericDispatch(t *testing.T) {
	p := swPolicy(10, time.Minute)
	P := int64(time.Minute)
	w := swMinute
	now := w + int64(45*time.Second)
	// Another algorithm's state counts as a new key and expires at once.
	tb := admission.State{Kind: admission.KindTokenBucket, TAT: now + int64(time.Hour)}
	if got := admission.ExpiresAt(p, tb); got != 0 {
		t.Errorf("ExpiresAt of a token-bucket state = %d, want 0", got)
	}
	s, d := slidingDecide(t, p, tb, 2, now)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 10, Remaining: 8, ResetAfter: 75 * time.Second})
	swWant(t, s, w, 2, 0)

	state := func(count, prev int64) admission.State {
		return admission.State{Kind: admission.KindSlidingWindow, Start: w, Count: count, Prev: prev}
	}
	peeks := []struct {
		name string
		s    admission.State
		now  int64
		want admission.Decision
	}{
		{"new key", admission.State{}, now, admission.Decision{Allowed: true, Limit: 10, Remaining: 10}},
		{"2 spent", s, now, admission.Decision{Allowed: true, Limit: 10, Remaining: 8, ResetAfter: 75 * time.Second}},
		// 7×15/60 + 1 = 2.75: floor(10 − 2.75) = 7.
		{"weighted previous", state(1, 7), now, admission.Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 75 * time.Second}},
		{"previous only", state(0, 4), now, admission.Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: 15 * time.Second}},
		// 8×15/60 + 9 = 11: denied; fits when 8×(P−e)/P ≤ 0, at the boundary.
		{"over the limit", state(9, 8), now, admission.Decision{Limit: 10, ResetAfter: 75 * time.Second, RetryAfter: 15 * time.Second}},
		{"rolled forward", state(6, 9), w + P + int64(30*time.Second),
			admission.Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 30 * time.Second}},
		{"expired", state(6, 9), w + 2*P, admission.Decision{Allowed: true, Limit: 10, Remaining: 10}},
	}
	for _, tc := range peeks {
		before := slidingClone(tc.s)
		got := admission.Peek(p, tc.s, tc.now)
		if got != tc.want {
			t.Errorf("%s: Peek = %+v\n want %+v", tc.name, got, tc.want)
		}
		if !slidingEqual(tc.s, before) {
			t.Errorf("%s: Peek changed the state", tc.name)
		}
		// Remaining is the largest cost Decide allows now.
		if got.Remaining > 0 {
			if _, d := admission.Decide(p, tc.s, got.Remaining, tc.now); !d.Allowed {
				t.Errorf("%s: Peek says %d remain but Decide denies them", tc.name, got.Remaining)
			}
		}
		if got.Remaining < p.Limit {
			if _, d := admission.Decide(p, tc.s, got.Remaining+1, tc.now); d.Allowed {
				t.Errorf("%s: Peek says %d remain but Decide allows one more", tc.name, got.Remaining)
			}
		}
	}

	expiries := []struct {
		name string
		s    admission.State
		want int64
	}{
		{"current window", s, w + 2*P},
		{"previous only", state(0, 4), w + P},
		{"no units", state(0, 0), 0},
		{"unaligned start", admission.State{Kind: admission.KindSlidingWindow, Start: w + 1, Count: 1}, w + 2*P},
		{"negative start", admission.State{Kind: admission.KindSlidingWindow, Start: -1, Count: 1}, P},
		{"far negative start", admission.State{Kind: admission.KindSlidingWindow, Start: math.MinInt64, Count: 1}, 0},
		{"window ending past MaxInt64", admission.State{Kind: admission.KindSlidingWindow, Start: math.MaxInt64, Count: 1}, math.MaxInt64},
	}
	for _, tc := range expiries {
		if got := admission.ExpiresAt(p, tc.s); got != tc.want {
			t.Errorf("%s: ExpiresAt = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestSlidingWindowTotalAndFailClosed(t *testing.T) {
	p := swPolicy(10, time.Minute)
	P := int64(time.Minute)
	w := swMinute
	fresh := admission.State{}
	never := admission.NeverRetry
	tests := []struct {
		name string
		p    admission.Policy
		s    admission.State
		cost int64
		now  int64
		want admission.Decision
	}{
		{"invalid policy", swPolicy(10, time.Millisecond), fresh, 1, t0, admission.Decision{RetryAfter: never}},
		{"cost 0", p, fresh, 0, t0, admission.Decision{Limit: 10, Remaining: 10, RetryAfter: never}},
		{"cost above limit", p, fresh, 11, t0, admission.Decision{Limit: 10, Remaining: 10, RetryAfter: never}},
		{"cost MinInt64", p, fresh, math.MinInt64, t0, admission.Decision{Limit: 10, Remaining: 10, RetryAfter: never}},
		{"negative now", p, fresh, 1, -1, admission.Decision{Limit: 10, RetryAfter: never}},
		{"now at the end of time", p, fresh, 1, math.MaxInt64, admission.Decision{Limit: 10, RetryAfter: never}},
		{"huge counts", p, admission.State{Kind: admission.KindSlidingWindow, Start: w, Count: math.MaxInt64, Prev: math.MaxInt64}, 1, w,
			admission.Decision{Limit: 10, ResetAfter: 2 * time.Minute, RetryAfter: 2 * time.Minute}},
		{"negative counts", p, admission.State{Kind: admission.KindSlidingWindow, Start: w, Count: -5, Prev: math.MinInt64}, 10, w,
			admission.Decision{Allowed: true, Limit: 10, ResetAfter: 2 * time.Minute}},
		// Time never runs backwards: a state from a later window is seen at its start.
		{"state from the future", p, admission.State{Kind: admission.KindSlidingWindow, Start: w + P, Count: 10}, 1, w,
			admission.Decision{Limit: 10, ResetAfter: 3 * time.Minute, RetryAfter: 2*time.Minute + 6*time.Second}},
		{"state beyond the end of time", p, admission.State{Kind: admission.KindSlidingWindow, Start: math.MaxInt64}, 1, w,
			admission.Decision{Limit: 10, RetryAfter: never}},
		{"year 2200", swPolicy(1e9, 366*day), admission.State{Kind: admission.KindSlidingWindow, Start: 7258118400e9, Count: 1, Prev: 1e9}, 1e9, 7258118400e9,
			admission.Decision{Limit: 1e9, Remaining: 0, ResetAfter: 2 * 366 * day, RetryAfter: 2 * 366 * day}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "year 2200" { // aligned to 366 days
				tc.s.Start -= tc.s.Start % int64(366*day)
				tc.now = tc.s.Start
			}
			before := slidingClone(tc.s)
			s, d := admission.Decide(tc.p, tc.s, tc.cost, tc.now)
			wantDecision(t, d, tc.want)
			if !d.Allowed && !slidingEqual(s, before) {
				t.Errorf("denial changed the state: %+v, was %+v", s, before)
			}
		})
	}
}

func TestSlidingWindowValidate(t *testing.T) {
	base := func(edit func(p *admission.Policy)) admission.Policy {
		p := swPolicy(100, time.Minute)
		edit(&p)
		return p
	}
	for name, p := range map[string]admission.Policy{
		"defaults":                swPolicy(100, time.Minute),
		"period 1s":               base(func(p *admission.Policy) { p.Period = time.Second }),
		"period 366 days":         base(func(p *admission.Policy) { p.Period = 366 * day }),
		"period of whole ms":      base(func(p *admission.Policy) { p.Period = 1001 * ms }),
		"limit 1e9 per second":    base(func(p *admission.Policy) { p.Limit, p.Period = 1e9, time.Second }),
		"limit 1":                 base(func(p *admission.Policy) { p.Limit = 1 }),
		"burst equal to limit":    base(func(p *admission.Policy) { p.Burst = 100 }),
		"max_cost 1":              base(func(p *admission.Policy) { p.MaxCost = 1 }),
		"max_cost equal to limit": base(func(p *admission.Policy) { p.MaxCost = 100 }),
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%s: Validate(%+v) = %v, want nil", name, p, err)
		}
	}
	tests := []struct {
		name  string
		p     admission.Policy
		field string
	}{
		{"limit 0", base(func(p *admission.Policy) { p.Limit = 0 }), "limit"},
		{"negative limit", base(func(p *admission.Policy) { p.Limit = -1 }), "limit"},
		{"limit above 1e9", base(func(p *admission.Policy) { p.Limit = 1e9 + 1 }), "limit"},
		{"period 0", base(func(p *admission.Policy) { p.Period = 0 }), "period"},
		{"period below 1s", base(func(p *admission.Policy) { p.Period = time.Second - ms }), "period"},
		{"period not whole ms", base(func(p *admission.Policy) { p.Period = time.Second + 1 }), "period"},
		{"period above 366 days", base(func(p *admission.Policy) { p.Period = 366*day + ms }), "period"},
		{"burst below limit", base(func(p *admission.Policy) { p.Burst = 99 }), "burst"},
		{"burst above limit", base(func(p *admission.Policy) { p.Burst = 101 }), "burst"},
		{"negative burst", base(func(p *admission.Policy) { p.Burst = -1 }), "burst"},
		{"calendar", base(func(p *admission.Policy) { p.Calendar = admission.CalendarDay }), "calendar"},
		{"negative max_cost", base(func(p *admission.Policy) { p.MaxCost = -1 }), "max_cost"},
		{"max_cost above limit", base(func(p *admission.Policy) { p.MaxCost = 101 }), "max_cost"},
		{"first problem wins: limit before period", base(func(p *admission.Policy) { p.Limit, p.Period = 0, 0 }), "limit"},
		{"first problem wins: period before burst", base(func(p *admission.Policy) { p.Period, p.Burst = 0, 1 }), "period"},
		{"first problem wins: calendar before limit", base(func(p *admission.Policy) { p.Limit, p.Calendar = 0, "day" }), "calendar"},
		{"first problem wins: burst before max_cost", base(func(p *admission.Policy) { p.Burst, p.MaxCost = 1, -1 }), "burst"},
		{"first problem wins: calendar before max_cost", base(func(p *admission.Policy) { p.Calendar, p.MaxCost = "day", -1 }), "calendar"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			wantFieldError(t, err, tc.field, admission.ErrInvalidPolicy)
			t.Log(err)
		})
	}
}

func BenchmarkDecideSlidingWindow(b *testing.B) {
	p := swPolicy(100, time.Minute)
	if err := p.Validate(); err != nil {
		b.Fatal(err)
	}
	var s admission.State
	now := swMinute
	allowed := 0
	for b.Loop() {
		var d admission.Decision
		s, d = admission.Decide(p, s, 1, now)
		if d.Allowed {
			allowed++
		}
		now += int64(300 * ms) // half the rate: a mix of allows and denials
	}
	if b.N > 1000 && allowed == 0 {
		b.Fatal("nothing allowed")
	}
}
