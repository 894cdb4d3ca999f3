package admission_test

import (
	"math"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

// slLog builds a sliding-log state from (At, Cost) pairs.
func slLog(pairs ...int64) admission.State {
	s := admission.State{Kind: admission.KindSlidingLog}
	for i := 0; i+1 < len(pairs); i += 2 {
		s.Log = append(s.Log, admission.LogEntry{At: pairs[i], Cost: pairs[i+1]})
	}
	return s
}

func slWant(t testing.TB, got admission.State, pairs ...int64) {
	t.Helper()
	if want := slLog(pairs...); !slidingEqual(got, want) {
		t.Fatalf("state = %+v, want %+v", got, want)
	}
}

// TestSlidingLogLoginFailures is the design's login-failures policy: 5 per
// 15 minutes, exact.
func TestSlidingLogLoginFailures(t *testing.T) {
	p := slPolicy(5, 15*time.Minute)
	m := int64(time.Minute)
	var s admission.State
	var d admission.Decision
	for i := int64(0); i < 5; i++ {
		s, d = slidingDecide(t, p, s, 1, t0+i*m)
		wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 4 - i, ResetAfter: 15 * time.Minute})
	}
	// The 6th waits until the 1st leaves, 15 minutes after it.
	_, d = slidingDecide(t, p, s, 1, t0+5*m)
	wantDecision(t, d, admission.Decision{Limit: 5, ResetAfter: 14 * time.Minute, RetryAfter: 10 * time.Minute})
	swRetryExact(t, p, s, 1, t0+5*m, d)
	// Then it is allowed, and the state keeps only live entries.
	s, d = slidingDecide(t, p, s, 1, t0+15*m)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 15 * time.Minute})
	slWant(t, s, t0+m, 1, t0+2*m, 1, t0+3*m, 1, t0+4*m, 1, t0+15*m, 1)
	if got, want := admission.ExpiresAt(p, s), t0+30*m; got != want {
		t.Errorf("ExpiresAt = %d, want %d", got, want)
	}
	// Long after, everything has left: a fresh log.
	s, d = slidingDecide(t, p, s, 5, t0+31*m)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 15 * time.Minute})
	slWant(t, s, t0+31*m, 5)
}

// TestSlidingLogNoBoundaryBurst: the fixed-window boundary burst (limit at
// the end of one window, limit again at the start of the next) cannot
// happen: nothing more until a full period after the first burst.
func TestSlidingLogNoBoundaryBurst(t *testing.T) {
	p := slPolicy(100, time.Minute)
	P := int64(time.Minute)
	w := swMinute
	s, _ := slidingDecide(t, p, admission.State{}, 100, w-1)
	for _, now := range []int64{w, w + 1, w + int64(time.Second), w + P - 2} {
		_, d := slidingDecide(t, p, s, 1, now)
		if d.Allowed || d.RetryAfter != time.Duration(w-1+P-now) {
			t.Fatalf("at %d after the boundary: %+v, want denied until w-1+P", now-w, d)
		}
	}
	_, d := slidingDecide(t, p, s, 1, w+P-2)
	swRetryExact(t, p, s, 1, w+P-2, d)
	s, d = slidingDecide(t, p, s, 100, w-1+P)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 100, ResetAfter: time.Minute})
	slWant(t, s, w-1+P, 100)
}

func TestSlidingLogWeightedRetryAfter(t *testing.T) {
	p := slPolicy(10, time.Minute)
	sec := int64(time.Second)
	s := slLog(t0, 3, t0+10*sec, 2, t0+10*sec, 4, t0+20*sec, 1)
	now := t0 + 30*sec
	tests := []struct {
		cost int64
		want time.Duration
	}{
		{1, 30 * time.Second}, // the first (3) leaves at t0+60s
		{3, 30 * time.Second},
		{4, 40 * time.Second}, // 3 + 2 + 4 leave at t0+70s (same At)
		{9, 40 * time.Second},
		{10, 50 * time.Second}, // all of them
	}
	for _, tc := range tests {
		_, d := slidingDecide(t, p, s, tc.cost, now)
		wantDecision(t, d, admission.Decision{Limit: 10, ResetAfter: 50 * time.Second, RetryAfter: tc.want})
		swRetryExact(t, p, s, tc.cost, now, d)
	}
	// At t0+70s, only the last entry is live: 9 fit, and the new state
	// holds the live entry and the new one.
	ns, d := slidingDecide(t, p, s, 9, t0+70*sec)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: time.Minute})
	slWant(t, ns, t0+20*sec, 1, t0+70*sec, 9)
}

// TestSlidingLogBounded: one entry per admitted request, even at the same
// instant, and never more than limit entries.
func TestSlidingLogBounded(t *testing.T) {
	p := slPolicy(50, time.Hour)
	var s admission.State
	for i := range 50 {
		var d admission.Decision
		s, d = slidingDecide(t, p, s, 1, t0+int64(i/17)) // 17 at t0, 17 at t0+1, 16 at t0+2
		if !d.Allowed {
			t.Fatalf("request %d denied: %+v", i, d)
		}
	}
	if len(s.Log) != 50 {
		t.Fatalf("%d entries, want 50", len(s.Log))
	}
	if _, d := slidingDecide(t, p, s, 1, t0+int64(time.Hour)-1); d.Allowed || d.RetryAfter != 1 {
		t.Fatalf("51st: %+v, want denied for 1ns", d)
	}
	// An hour after the first, the 17 at t0 have left.
	ns, d := slidingDecide(t, p, s, 17, t0+int64(time.Hour))
	if !d.Allowed || len(ns.Log) != 50-17+1 {
		t.Fatalf("after the first 17 left: %+v, %d entries", d, len(ns.Log))
	}
}

func TestSlidingLogGenericDispatch(t *testing.T) {
	p := slPolicy(5, time.Minute)
	now := t0
	tb := admission.State{Kind: admission.KindTokenBucket, TAT: now + int64(time.Hour)}
	if got := admission.ExpiresAt(p, tb); got != 0 {
		t.Errorf("ExpiresAt of a token-bucket state = %d, want 0", got)
	}
	s, d := slidingDecide(t, p, tb, 2, now)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 3, ResetAfter: time.Minute})
	slWant(t, s, now, 2)

	sec := int64(time.Second)
	peeks := []struct {
		name string
		s    admission.State
		now  int64
		want admission.Decision
	}{
		{"new key", admission.State{}, now, admission.Decision{Allowed: true, Limit: 5, Remaining: 5}},
		{"2 spent", s, now + 10*sec, admission.Decision{Allowed: true, Limit: 5, Remaining: 3, ResetAfter: 50 * time.Second}},
		{"full", slLog(now, 2, now+sec, 3), now + 10*sec, admission.Decision{Limit: 5, ResetAfter: 51 * time.Second, RetryAfter: 50 * time.Second}},
		{"some left", slLog(now, 2, now+sec, 3), now + 60*sec, admission.Decision{Allowed: true, Limit: 5, Remaining: 2, ResetAfter: time.Second}},
		{"all left", slLog(now, 2, now+sec, 3), now + 61*sec, admission.Decision{Allowed: true, Limit: 5, Remaining: 5}},
		{"over the limit", slLog(now, 4, now+sec, 4), now + 10*sec, admission.Decision{Limit: 5, ResetAfter: 51 * time.Second, RetryAfter: 50 * time.Second}},
	}
	for _, tc := range peeks {
		before := slidingClone(tc.s)
		if got := admission.Peek(p, tc.s, tc.now); got != tc.want {
			t.Errorf("%s: Peek = %+v\n want %+v", tc.name, got, tc.want)
		}
		if !slidingEqual(tc.s, before) {
			t.Errorf("%s: Peek changed the state", tc.name)
		}
	}
	expiries := []struct {
		name string
		s    admission.State
		want int64
	}{
		{"empty", admission.State{Kind: admission.KindSlidingLog}, 0},
		{"newest entry", slLog(now, 2, now+sec, 3), now + sec + int64(time.Minute)},
		{"past MaxInt64", slLog(math.MaxInt64-1, 1), math.MaxInt64},
	}
	for _, tc := range expiries {
		if got := admission.ExpiresAt(p, tc.s); got != tc.want {
			t.Errorf("%s: ExpiresAt = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestSlidingLogTotalAndFailClosed(t *testing.T) {
	p := slPolicy(10, time.Minute)
	never := admission.NeverRetry
	sec := int64(time.Second)
	tests := []struct {
		name string
		p    admission.Policy
		s    admission.State
		cost int64
		now  int64
		want admission.Decision
	}{
		{"invalid policy", slPolicy(10_001, time.Minute), admission.State{}, 1, t0, admission.Decision{RetryAfter: never}},
		{"cost 0", p, slLog(t0, 4), 0, t0, admission.Decision{Limit: 10, Remaining: 6, ResetAfter: time.Minute, RetryAfter: never}},
		{"cost above limit", p, slLog(t0, 4), 11, t0, admission.Decision{Limit: 10, Remaining: 6, ResetAfter: time.Minute, RetryAfter: never}},
		{"negative now", p, admission.State{}, 1, -1, admission.Decision{Limit: 10, RetryAfter: never}},
		{"now at the end of time", p, admission.State{}, 1, math.MaxInt64, admission.Decision{Limit: 10, RetryAfter: never}},
		{"huge costs", p, slLog(t0, math.MaxInt64, t0+sec, math.MaxInt64), 1, t0 + 2*sec,
			admission.Decision{Limit: 10, ResetAfter: 59 * time.Second, RetryAfter: 58 * time.Second}},
		{"negative costs count as 0", p, slLog(t0, -5, t0+sec, math.MinInt64), 10, t0 + 2*sec,
			admission.Decision{Allowed: true, Limit: 10, ResetAfter: time.Minute}},
		// Time never runs backwards: a future entry is waited for.
		{"entry from the future", p, slLog(t0+5*sec, 3), 1, t0, admission.Decision{Limit: 10, Remaining: 7, ResetAfter: 65 * time.Second, RetryAfter: 5 * time.Second}},
		{"full from the future", p, slLog(t0+5*sec, 10), 1, t0, admission.Decision{Limit: 10, ResetAfter: 65 * time.Second, RetryAfter: 65 * time.Second}},
		{"entry beyond the end of time", p, slLog(math.MaxInt64, 1), 1, t0, admission.Decision{Limit: 10, RetryAfter: never}},
		{"year 2200", slPolicy(10_000, 366*day), slLog(7258118400e9, 10_000), 1, 7258118400e9 + int64(366*day) - 1,
			admission.Decision{Limit: 10_000, ResetAfter: 1, RetryAfter: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := slidingClone(tc.s)
			s, d := admission.Decide(tc.p, tc.s, tc.cost, tc.now)
			wantDecision(t, d, tc.want)
			if !slidingEqual(tc.s, before) || !d.Allowed && !slidingEqual(s, before) {
				t.Errorf("the input state changed or a denial changed the state: %+v, was %+v", s, before)
			}
		})
	}
}

func TestSlidingLogValidate(t *testing.T) {
	base := func(edit func(p *admission.Policy)) admission.Policy {
		p := slPolicy(5, 15*time.Minute)
		edit(&p)
		return p
	}
	for name, p := range map[string]admission.Policy{
		"login-failures":          slPolicy(5, 15*time.Minute),
		"limit 10000":             base(func(p *admission.Policy) { p.Limit = 10_000 }),
		"limit 1":                 base(func(p *admission.Policy) { p.Limit = 1 }),
		"period 1ms":              base(func(p *admission.Policy) { p.Period = ms }),
		"uneven period":           base(func(p *admission.Policy) { p.Period = ms + 1 }),
		"period 366 days":         base(func(p *admission.Policy) { p.Period = 366 * day }),
		"burst equal to limit":    base(func(p *admission.Policy) { p.Burst = 5 }),
		"max_cost equal to limit": base(func(p *admission.Policy) { p.MaxCost = 5 }),
		"max_cost 1":              base(func(p *admission.Policy) { p.MaxCost = 1 }),
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
		{"limit above the cap", base(func(p *admission.Policy) { p.Limit = 10_001 }), "limit"},
		{"period 0", base(func(p *admission.Policy) { p.Period = 0 }), "period"},
		{"period below 1ms", base(func(p *admission.Policy) { p.Period = ms - 1 }), "period"},
		{"period above 366 days", base(func(p *admission.Policy) { p.Period = 366*day + 1 }), "period"},
		{"burst below limit", base(func(p *admission.Policy) { p.Burst = 4 }), "burst"},
		{"burst above limit", base(func(p *admission.Policy) { p.Burst = 6 }), "burst"},
		{"calendar", base(func(p *admission.Policy) { p.Calendar = admission.CalendarMonth }), "calendar"},
		{"negative max_cost", base(func(p *admission.Policy) { p.MaxCost = -1 }), "max_cost"},
		{"max_cost above limit", base(func(p *admission.Policy) { p.MaxCost = 6 }), "max_cost"},
		{"first problem wins: limit before period", base(func(p *admission.Policy) { p.Limit, p.Period = 10_001, 0 }), "limit"},
		{"first problem wins: period before burst", base(func(p *admission.Policy) { p.Period, p.Burst = 0, 1 }), "period"},
		{"first problem wins: calendar before limit", base(func(p *admission.Policy) { p.Limit, p.Calendar = 0, "day" }), "calendar"},
		{"first problem wins: burst before max_cost", base(func(p *admission.Policy) { p.Burst, p.MaxCost = 1, 6 }), "burst"},
		{"first problem wins: calendar before max_cost", base(func(p *admission.Policy) { p.Calendar, p.MaxCost = "day", 6 }), "calendar"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			wantFieldError(t, err, tc.field, admission.ErrInvalidPolicy)
			t.Log(err)
		})
	}
}

// BenchmarkDecideSlidingLog decides against a full log of 100 entries: one
// request every period/100, so each decision drops the oldest entry and
// copies the other 99 (allowed), or is denied without copying.
func BenchmarkDecideSlidingLog(b *testing.B) {
	p := slPolicy(100, time.Minute)
	step := int64(time.Minute) / 100
	full := func() (admission.State, int64) {
		var s admission.State
		now := t0
		for range 100 {
			s, _ = admission.Decide(p, s, 1, now)
			now += step
		}
		if len(s.Log) != 100 {
			b.Fatalf("log of %d entries, want 100", len(s.Log))
		}
		return s, now
	}
	b.Run("allowed", func(b *testing.B) {
		s, now := full()
		for b.Loop() {
			var d admission.Decision
			s, d = admission.Decide(p, s, 1, now)
			if !d.Allowed || len(s.Log) != 100 {
				b.Fatalf("denied or wrong size: %+v, %d entries", d, len(s.Log))
			}
			now += step
		}
	})
	b.Run("denied", func(b *testing.B) {
		s, now := full()
		for b.Loop() {
			if _, d := admission.Decide(p, s, 1, now-1); d.Allowed {
				b.Fatal("allowed")
			}
		}
	})
}
