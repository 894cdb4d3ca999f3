package admission_test

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

// fwPolicy is a fixed window of limit per period, burst and max_cost unset.
func fwPolicy(limit int64, period time.Duration) admission.Policy {
	return admission.Policy{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: limit, Period: period}
}

// minuteOf is the start of the minute (a fixed window of 1m) holding at.
func minuteOf(at int64) int64 { return at - at%int64(time.Minute) }

// counterDecide calls admission.Decide after checking the policy and the
// cost, as callers must, and checks that a denial leaves the state as it was.
func counterDecide(t testing.TB, p admission.Policy, s admission.State, cost, now int64) (admission.State, admission.Decision) {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatalf("invalid test policy %+v: %v", p, err)
	}
	if err := p.CheckRequest("k", cost); err != nil {
		t.Fatalf("invalid test cost %d: %v", cost, err)
	}
	ns, d := admission.Decide(p, s, cost, now)
	if !d.Allowed && !reflect.DeepEqual(ns, s) {
		t.Fatalf("denial changed the state: %+v, was %+v", ns, s)
	}
	return ns, d
}

func wantState(t testing.TB, got admission.State, kind admission.Kind, start, count int64) {
	t.Helper()
	if want := (admission.State{Kind: kind, Start: start, Count: count}); !reflect.DeepEqual(got, want) {
		t.Fatalf("state = %+v, want %+v", got, want)
	}
}

func TestFixedWindowCountsPerWindow(t *testing.T) {
	p := fwPolicy(5, time.Minute)
	w := minuteOf(t0)
	now := w + int64(20*time.Second)
	s, d := counterDecide(t, p, admission.State{}, 1, now)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 40 * time.Second})
	wantState(t, s, admission.KindFixedWindow, w, 1)
	s, d = counterDecide(t, p, s, 3, now)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 1, ResetAfter: 40 * time.Second})
	// 2 do not fit in the 1 left: denied until the window ends.
	_, d = counterDecide(t, p, s, 2, now)
	wantDecision(t, d, admission.Decision{Limit: 5, Remaining: 1, ResetAfter: 40 * time.Second, RetryAfter: 40 * time.Second})
	// The last unit, in the window's last nanosecond.
	end := w + int64(time.Minute)
	s, d = counterDecide(t, p, s, 1, end-1)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 1})
	_, d = counterDecide(t, p, s, 1, end-1)
	wantDecision(t, d, admission.Decision{Limit: 5, Remaining: 0, ResetAfter: 1, RetryAfter: 1})
	if got := admission.ExpiresAt(p, s); got != end {
		t.Fatalf("ExpiresAt = %d, want the window's end %d", got, end)
	}
	// A new window starts empty, at its first nanosecond.
	s, d = counterDecide(t, p, s, 5, end)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: time.Minute})
	wantState(t, s, admission.KindFixedWindow, end, 5)
	// Long idle: still just one window's limit.
	_, d = counterDecide(t, p, s, 5, end+int64(400*day)+1)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: time.Minute - 1})
}

// TestFixedWindowBoundaryBurst documents the fixed window's known weakness:
// limit units in the last millisecond of a window and limit more in the
// first instant of the next are all admitted, 2 × limit within 1ms.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	const limit = 100
	p := fwPolicy(limit, time.Minute)
	end := minuteOf(t0) + int64(time.Minute)
	var s admission.State
	admittedUnits := 0
	for _, at := range []int64{end - int64(ms), end} {
		for range limit + 1 {
			var d admission.Decision
			s, d = counterDecide(t, p, s, 1, at)
			if d.Allowed {
				admittedUnits++
			}
		}
	}
	if admittedUnits != 2*limit {
		t.Fatalf("admitted %d units in [end-1ms, end], want exactly 2×limit = %d", admittedUnits, 2*limit)
	}
	// The same with one request of the whole limit on each side.
	s, d := counterDecide(t, p, admission.State{}, limit, end-int64(ms))
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: limit, Remaining: 0, ResetAfter: ms})
	_, d = counterDecide(t, p, s, limit, end)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: limit, Remaining: 0, ResetAfter: time.Minute})
}

func TestFixedWindowPolicyShrunk(t *testing.T) {
	// A count left by a larger limit (same window) is above the new limit:
	// denied until the window ends, Remaining stays 0.
	w := minuteOf(t0)
	s, _ := counterDecide(t, fwPolicy(10, time.Minute), admission.State{}, 10, w)
	_, d := counterDecide(t, fwPolicy(5, time.Minute), s, 1, w+int64(time.Second))
	wantDecision(t, d, admission.Decision{Limit: 5, Remaining: 0, ResetAfter: 59 * time.Second, RetryAfter: 59 * time.Second})
	// A longer period: the minute's state does not start the hour, so it
	// counts as empty (a policy change starts a key afresh).
	_, d = counterDecide(t, fwPolicy(10, time.Hour), s, 10, w+int64(time.Second))
	if !d.Allowed || d.Remaining != 0 {
		t.Fatalf("new period: %+v, want the hour to start empty", d)
	}
}

func TestFixedWindowTotalAndFailClosed(t *testing.T) {
	p := fwPolicy(5, time.Minute)
	w := minuteOf(t0)
	period := int64(time.Minute)
	lastStart := (math.MaxInt64/period - 1) * period // the last window whose end fits
	full := admission.State{Kind: admission.KindFixedWindow, Start: lastStart, Count: 5}
	never := admission.NeverRetry
	tests := []struct {
		name string
		p    admission.Policy
		s    admission.State
		cost int64
		now  int64
		want admission.Decision
	}{
		{"cost above limit", p, admission.State{}, 6, w, admission.Decision{Limit: 5, Remaining: 5, ResetAfter: time.Minute, RetryAfter: never}},
		{"cost 0", p, admission.State{}, 0, w, admission.Decision{Limit: 5, Remaining: 5, ResetAfter: time.Minute, RetryAfter: never}},
		{"cost MinInt64", p, admission.State{}, math.MinInt64, w, admission.Decision{Limit: 5, Remaining: 5, ResetAfter: time.Minute, RetryAfter: never}},
		{"invalid policy", fwPolicy(5, 1500*ms), admission.State{}, 1, w, admission.Decision{RetryAfter: never}},
		{"invalid policy with a burst", admission.Policy{Name: "x", Algorithm: "fixed_window", Limit: 5, Period: time.Minute, Burst: 2}, admission.State{}, 1, w, admission.Decision{RetryAfter: never}},
		{"window end past MaxInt64", p, admission.State{}, 1, math.MaxInt64, admission.Decision{Limit: 5, RetryAfter: never}},
		{"window start before MinInt64", p, admission.State{}, 1, math.MinInt64, admission.Decision{Limit: 5, RetryAfter: never}},
		{"last window that fits", p, admission.State{}, 1, lastStart, admission.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: time.Minute}},
		{"full last window: the next does not fit", p, full, 1, lastStart + period - 1, admission.Decision{Limit: 5, ResetAfter: 1, RetryAfter: never}},
		{"negative now", p, admission.State{}, 1, -1, admission.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 1}},
		{"negative count counts as 0", p, admission.State{Kind: admission.KindFixedWindow, Start: w, Count: -7}, 1, w, admission.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: time.Minute}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, d := admission.Decide(tc.p, tc.s, tc.cost, tc.now)
			wantDecision(t, d, tc.want)
			if !d.Allowed && !reflect.DeepEqual(s, tc.s) {
				t.Errorf("denial changed the state: %+v, was %+v", s, tc.s)
			}
			if admission.ExpiresAt(tc.p, s) < 0 {
				t.Errorf("negative ExpiresAt for %+v", s)
			}
		})
	}
}

func TestFixedWindowGenericDispatch(t *testing.T) {
	p := fwPolicy(5, time.Minute)
	w := minuteOf(t0)
	now := w + int64(45*time.Second)
	// Another algorithm's state counts as a new key, and expires at once.
	tb := admission.State{Kind: admission.KindTokenBucket, TAT: now + int64(time.Hour)}
	if got := admission.ExpiresAt(p, tb); got != 0 {
		t.Errorf("ExpiresAt of a token-bucket state = %d, want 0", got)
	}
	s, d := counterDecide(t, p, tb, 2, now)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 3, ResetAfter: 15 * time.Second})
	wantState(t, s, admission.KindFixedWindow, w, 2)

	peeks := []struct {
		name string
		s    admission.State
		now  int64
		want admission.Decision
	}{
		{"new key", admission.State{}, now, admission.Decision{Allowed: true, Limit: 5, Remaining: 5}},
		{"2 spent", s, now, admission.Decision{Allowed: true, Limit: 5, Remaining: 3, ResetAfter: 15 * time.Second}},
		{"4 spent", admission.State{Kind: admission.KindFixedWindow, Start: w, Count: 4}, now, admission.Decision{Allowed: true, Limit: 5, Remaining: 1, ResetAfter: 15 * time.Second}},
		{"all spent", admission.State{Kind: admission.KindFixedWindow, Start: w, Count: 5}, now,
			admission.Decision{Limit: 5, Remaining: 0, ResetAfter: 15 * time.Second, RetryAfter: 15 * time.Second}},
		{"above the limit", admission.State{Kind: admission.KindFixedWindow, Start: w, Count: 9}, now,
			admission.Decision{Limit: 5, Remaining: 0, ResetAfter: 15 * time.Second, RetryAfter: 15 * time.Second}},
		{"last window's state", s, w + int64(time.Minute), admission.Decision{Allowed: true, Limit: 5, Remaining: 5}},
		{"unaligned start", admission.State{Kind: admission.KindFixedWindow, Start: w + 1, Count: 5}, now, admission.Decision{Allowed: true, Limit: 5, Remaining: 5}},
	}
	for _, tc := range peeks {
		before := tc.s
		if got := admission.Peek(p, tc.s, tc.now); got != tc.want {
			t.Errorf("%s: Peek = %+v\n want %+v", tc.name, got, tc.want)
		}
		if !reflect.DeepEqual(tc.s, before) {
			t.Errorf("%s: Peek changed the state", tc.name)
		}
	}

	expiries := []struct {
		name string
		s    admission.State
		want int64
	}{
		{"current window", s, w + int64(time.Minute)},
		{"no units", admission.State{Kind: admission.KindFixedWindow, Start: w}, 0},
		{"unaligned start", admission.State{Kind: admission.KindFixedWindow, Start: w + 1, Count: 1}, 0},
		{"window ending past MaxInt64", admission.State{Kind: admission.KindFixedWindow, Start: math.MaxInt64 - math.MaxInt64%int64(time.Minute), Count: 1}, math.MaxInt64},
	}
	for _, tc := range expiries {
		if got := admission.ExpiresAt(p, tc.s); got != tc.want {
			t.Errorf("%s: ExpiresAt = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestFixedWindowValidate(t *testing.T) {
	ok := func(edit func(p *admission.Policy)) admission.Policy {
		p := fwPolicy(100, time.Minute)
		edit(&p)
		return p
	}
	for name, p := range map[string]admission.Policy{
		"defaults":                  ok(func(*admission.Policy) {}),
		"burst equal to limit":      ok(func(p *admission.Policy) { p.Burst = 100 }),
		"max_cost 1":                ok(func(p *admission.Policy) { p.MaxCost = 1 }),
		"max_cost equal to limit":   ok(func(p *admission.Policy) { p.MaxCost = 100 }),
		"period 1s":                 ok(func(p *admission.Policy) { p.Period = time.Second }),
		"period 366 days":           ok(func(p *admission.Policy) { p.Period = 366 * day }),
		"period 7 days":             ok(func(p *admission.Policy) { p.Period = 7 * day }),
		"period 90s":                ok(func(p *admission.Policy) { p.Period = 90 * time.Second }),
		"limit 1":                   ok(func(p *admission.Policy) { p.Limit, p.MaxCost = 1, 0 }),
		"limit 1e9 per second":      ok(func(p *admission.Policy) { p.Limit, p.Period = 1e9, time.Second }),
		"shadow and on_unavailable": ok(func(p *admission.Policy) { p.Shadow, p.OnUnavailable = true, admission.OnUnavailableAllow }),
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
		{"calendar set", ok(func(p *admission.Policy) { p.Calendar = admission.CalendarDay }), "calendar"},
		{"limit 0", ok(func(p *admission.Policy) { p.Limit = 0 }), "limit"},
		{"limit negative", ok(func(p *admission.Policy) { p.Limit = -1 }), "limit"},
		{"limit above 1e9", ok(func(p *admission.Policy) { p.Limit = 1e9 + 1 }), "limit"},
		{"period unset", ok(func(p *admission.Policy) { p.Period = 0 }), "period"},
		{"period negative", ok(func(p *admission.Policy) { p.Period = -time.Minute }), "period"},
		{"period below 1s", ok(func(p *admission.Policy) { p.Period = 999 * ms }), "period"},
		{"period of whole ms", ok(func(p *admission.Policy) { p.Period = 1500 * ms }), "period"},
		{"period 1ns over a second", ok(func(p *admission.Policy) { p.Period = time.Minute + 1 }), "period"},
		{"period above 366 days", ok(func(p *admission.Policy) { p.Period = 367 * day }), "period"},
		{"burst below limit", ok(func(p *admission.Policy) { p.Burst = 20 }), "burst"},
		{"burst above limit", ok(func(p *admission.Policy) { p.Burst = 101 }), "burst"},
		{"burst negative", ok(func(p *admission.Policy) { p.Burst = -1 }), "burst"},
		{"max_cost above limit", ok(func(p *admission.Policy) { p.MaxCost = 101 }), "max_cost"},
		{"max_cost negative", ok(func(p *admission.Policy) { p.MaxCost = -1 }), "max_cost"},
		{"first problem wins: calendar before limit", ok(func(p *admission.Policy) { p.Calendar, p.Limit = "month", 0 }), "calendar"},
		{"first problem wins: limit before period", ok(func(p *admission.Policy) { p.Limit, p.Period = 0, 0 }), "limit"},
		{"first problem wins: period before burst", ok(func(p *admission.Policy) { p.Period, p.Burst = 0, 5 }), "period"},
		{"first problem wins: burst before max_cost", ok(func(p *admission.Policy) { p.Burst, p.MaxCost = 5, 500 }), "burst"},
		{"first problem wins: max_cost before on_unavailable", ok(func(p *admission.Policy) { p.MaxCost, p.OnUnavailable = 500, "x" }), "max_cost"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			wantFieldError(t, err, tc.field, admission.ErrInvalidPolicy)
			t.Log(err)
		})
	}
}

// TestFixedWindowMatchesModel runs random fixed-window policies and request
// sequences through admission.Decide and checks them against counterModel
// (runCounterSequence), with window starts computed by floor division.
func TestFixedWindowMatchesModel(t *testing.T) {
	iterations := 1000
	if testing.Short() {
		iterations = 100
	}
	var allows, denials int
	for iter := range iterations {
		r := rand.New(rand.NewPCG(uint64(iter), 0xf1ed))
		p := randomFixedWindowPolicy(r)
		period := int64(p.Period)
		window := func(now int64) (int64, int64) {
			start := now / period * period
			return start, start + period
		}
		a, d := runCounterSequence(t, r, p, window, r.Int64N(horizon2200), iter)
		allows += a
		denials += d
	}
	if total := allows + denials; allows < total/10 || denials < total/10 {
		t.Errorf("unbalanced workload: %d allowed, %d denied", allows, denials)
	}
	t.Logf("%d iterations: %d allowed, %d denied", iterations, allows, denials)
}

// randomFixedWindowPolicy returns a valid fixed_window policy: periods of
// whole seconds from 1s to 366 days, limits over orders of magnitude,
// default and explicit burst and max_cost.
func randomFixedWindowPolicy(r *rand.Rand) admission.Policy {
	units := []int64{1, 60, 3600, 86400, 7 * 86400, 366 * 86400}
	sec := units[r.IntN(len(units))]
	switch r.IntN(3) {
	case 1:
		sec *= 1 + r.Int64N(10)
	case 2:
		sec = 1 + r.Int64N(sec)
	}
	p := fwPolicy(1+r.Int64N(pow10(r.IntN(10))), time.Duration(min(sec, 366*86400))*time.Second)
	p.Name = "prop-fw"
	setCounterCaps(r, &p)
	return p
}

func BenchmarkDecideFixedWindow(b *testing.B) {
	p := fwPolicy(100, time.Second)
	if err := p.Validate(); err != nil {
		b.Fatal(err)
	}
	var s admission.State
	now := t0
	allowed := 0
	for b.Loop() {
		var d admission.Decision
		s, d = admission.Decide(p, s, 1, now)
		if d.Allowed {
			allowed++
		}
		now += int64(5 * ms) // 200 requests per 1s window: half are denied
	}
	if b.N > 1000 && allowed == 0 {
		b.Fatal("nothing allowed")
	}
}
