package admission_test

import (
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

func TestLocalDefaults(t *testing.T) {
	p := with(func(p *admission.Policy) { p.Local.Mode = admission.LocalGrant }).WithDefaults()
	if p.Local.MaxGrant != 2 || p.Local.TTL != admission.DefaultGrantTTL {
		t.Errorf("defaults = %+v, want max_grant 2 (burst 20 / 10), ttl %v", p.Local, admission.DefaultGrantTTL)
	}
	small := with(func(p *admission.Policy) { p.Local.Mode = admission.LocalGrant; p.Burst = 5; p.MaxCost = 5 }).WithDefaults()
	if small.Local.MaxGrant != 1 {
		t.Errorf("max_grant of burst 5 = %d, want 1", small.Local.MaxGrant)
	}
	if none := apiFree().WithDefaults(); none.Local != (admission.Local{}) {
		t.Errorf("a policy without a local mode got %+v", none.Local)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("Validate(defaulted grant-mode policy) = %v", err)
	}
	if p != p.WithDefaults() {
		t.Error("WithDefaults is not idempotent with a local mode")
	}
}

func TestLocalValidate(t *testing.T) {
	reserve := func(edit func(p *admission.Policy)) admission.Policy {
		return with(func(p *admission.Policy) { p.Local.Mode = admission.LocalGrant; edit(p) })
	}
	for _, tc := range []struct {
		name  string
		p     admission.Policy
		field string
		in    string
	}{
		{"unknown mode", with(func(p *admission.Policy) { p.Local.Mode = "gossip" }), "local.mode", `"gossip"`},
		{"sliding_log", reserve(func(p *admission.Policy) { p.Algorithm = admission.AlgorithmSlidingLog; p.Burst = 0; p.MaxCost = 0 }), "local.mode", "sliding_log"},
		{"concurrency", reserve(func(p *admission.Policy) {
			p.Algorithm = admission.AlgorithmConcurrency
			p.Burst, p.MaxCost, p.Period = 0, 0, 0
		}), "local.mode", "concurrency"},
		{"max_grant above burst", reserve(func(p *admission.Policy) { p.Local.MaxGrant = 21 }), "local.max_grant", "burst 20"},
		{"negative max_grant", reserve(func(p *admission.Policy) { p.Local.MaxGrant = -1 }), "local.max_grant", "-1"},
		{"ttl too short", reserve(func(p *admission.Policy) { p.Local.TTL = 99 * time.Millisecond }), "local.ttl", "99ms"},
		{"ttl too long", reserve(func(p *admission.Policy) { p.Local.TTL = time.Hour + 1 }), "local.ttl", "between"},
		{"max_grant without mode", with(func(p *admission.Policy) { p.Local.MaxGrant = 3 }), "local.max_grant", "local mode"},
		{"ttl without mode", with(func(p *admission.Policy) { p.Local.TTL = time.Second }), "local.ttl", "local mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			wantFieldError(t, err, tc.field, admission.ErrInvalidPolicy)
			if err != nil && !strings.Contains(err.Error(), tc.in) {
				t.Errorf("error %q does not mention %q", err, tc.in)
			}
		})
	}
	for _, p := range []admission.Policy{
		reserve(func(p *admission.Policy) { p.Local.MaxGrant, p.Local.TTL = 20, time.Hour }),
		reserve(func(p *admission.Policy) { p.Local.MaxGrant, p.Local.TTL = 1, admission.MinGrantTTL }),
		{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 100, Period: time.Minute, Local: admission.Local{Mode: admission.LocalGrant}},
		{Name: "sw", Algorithm: admission.AlgorithmSlidingWindow, Limit: 100, Period: time.Minute, Local: admission.Local{Mode: admission.LocalGrant}},
		{Name: "q", Algorithm: admission.AlgorithmQuota, Limit: 1000, Calendar: admission.CalendarDay, Local: admission.Local{Mode: admission.LocalGrant}},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%s) = %v", p.Name, err)
		}
	}
}

func TestGrantExpiry(t *testing.T) {
	const minute = int64(time.Minute)
	now := 10*minute + 50*int64(time.Second)
	tb := with(func(p *admission.Policy) { p.Local.Mode = admission.LocalGrant }).WithDefaults()
	if got := tb.GrantExpiry(now); got != now+int64(10*time.Second) {
		t.Errorf("token bucket: GrantExpiry = %d, want now+10s", got)
	}
	fw := admission.Policy{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 100, Period: time.Minute,
		Local: admission.Local{Mode: admission.LocalGrant, TTL: 30 * time.Second}}.WithDefaults()
	if got := fw.GrantExpiry(now); got != 11*minute {
		t.Errorf("fixed window: GrantExpiry = %d, want the window end %d", got, 11*minute)
	}
	if got := fw.GrantExpiry(11 * minute); got != 11*minute+30*int64(time.Second) {
		t.Errorf("fixed window at a window start: GrantExpiry = %d, want +30s", got)
	}
	sw := fw
	sw.Algorithm = admission.AlgorithmSlidingWindow
	if got := sw.GrantExpiry(now); got != 11*minute {
		t.Errorf("sliding window: GrantExpiry = %d, want the period end", got)
	}
	q := admission.Policy{Name: "q", Algorithm: admission.AlgorithmQuota, Limit: 1000, Calendar: admission.CalendarDay,
		Local: admission.Local{Mode: admission.LocalGrant, TTL: time.Hour}}.WithDefaults()
	day0 := time.Date(2026, 3, 4, 23, 30, 0, 0, time.UTC).UnixNano()
	if got, want := q.GrantExpiry(day0), time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC).UnixNano(); got != want {
		t.Errorf("quota: GrantExpiry = %d, want midnight %d", got, want)
	}
	if _, ok := tb.WindowEnd(now); ok {
		t.Error("a token bucket has a window end")
	}
}
