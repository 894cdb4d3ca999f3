package admission_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

const day = 24 * time.Hour

// apiFree is the design's token-bucket example: 60/min, bursts of 20.
func apiFree() admission.Policy {
	return admission.Policy{
		Name:          "api-free",
		Algorithm:     admission.AlgorithmTokenBucket,
		Limit:         60,
		Period:        time.Minute,
		Burst:         20,
		MaxCost:       10,
		OnUnavailable: admission.OnUnavailableAllow,

		DedupeRetention: 2 * time.Minute,
	}
}

// with returns apiFree changed by edit.
func with(edit func(p *admission.Policy)) admission.Policy {
	p := apiFree()
	edit(&p)
	return p
}

// wantFieldError fails unless err is a *FieldError for field wrapping want.
func wantFieldError(t testing.TB, err error, field string, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want a *FieldError for %q", field)
	}
	var fe *admission.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("got %T (%v), want *admission.FieldError", err, err)
	}
	if fe.Field != field {
		t.Errorf("Field = %q, want %q (error: %v)", fe.Field, field, err)
	}
	if !errors.Is(err, want) {
		t.Errorf("errors.Is(%v, %v) = false", err, want)
	}
	other := admission.ErrInvalidRequest
	if want == admission.ErrInvalidRequest {
		other = admission.ErrInvalidPolicy
	}
	if errors.Is(err, other) {
		t.Errorf("errors.Is(%v, %v) = true, want false", err, other)
	}
	if fe.Reason == "" {
		t.Errorf("empty Reason in %#v", fe)
	}
}

func TestValidateAccepts(t *testing.T) {
	for name, p := range map[string]admission.Policy{
		"api-free": apiFree(),
		"provider-webhooks, burst 1": {Name: "provider-webhooks", Algorithm: "token_bucket",
			Limit: 20, Period: time.Second, Burst: 1},
		"defaults only":            {Name: "a", Algorithm: "token_bucket", Limit: 1, Period: time.Second},
		"name of 64 bytes":         with(func(p *admission.Policy) { p.Name = "0" + strings.Repeat("a._-", 15) + "xyz" }),
		"smallest period":          with(func(p *admission.Policy) { p.Period, p.Limit, p.Burst, p.MaxCost = time.Millisecond, 1, 1, 1 }),
		"largest period":           with(func(p *admission.Policy) { p.Period, p.Limit, p.Burst, p.MaxCost = 366*day, 1, 1, 1 }),
		"largest limit and burst":  with(func(p *admission.Policy) { p.Limit, p.Period, p.Burst, p.MaxCost = 1e9, time.Second, 1e9, 1e9 }),
		"one unit per nanosecond":  with(func(p *admission.Policy) { p.Limit, p.Period, p.Burst = 1_000_000, time.Millisecond, 0 }),
		"refill of 3660 days":      with(func(p *admission.Policy) { p.Limit, p.Period, p.Burst, p.MaxCost = 1, 366*day, 10, 0 }),
		"uneven period":            with(func(p *admission.Policy) { p.Limit, p.Period, p.Burst, p.MaxCost = 7, time.Millisecond, 0, 0 }),
		"max_cost equal to burst":  with(func(p *admission.Policy) { p.MaxCost = p.Burst }),
		"on_unavailable deny":      with(func(p *admission.Policy) { p.OnUnavailable = admission.OnUnavailableDeny }),
		"on_unavailable local":     with(func(p *admission.Policy) { p.OnUnavailable = admission.OnUnavailableLocal }),
		"on_unavailable defaulted": with(func(p *admission.Policy) { p.OnUnavailable = "" }),
		"dedupe_retention 1s":      with(func(p *admission.Policy) { p.DedupeRetention = time.Second }),
		"dedupe_retention 24h":     with(func(p *admission.Policy) { p.DedupeRetention = 24 * time.Hour }),
		"dedupe_retention default": with(func(p *admission.Policy) { p.DedupeRetention = 0 }),
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%s: Validate(%+v) = %v, want nil", name, p, err)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	tests := []struct {
		name  string
		p     admission.Policy
		field string
	}{
		{"empty policy reports name first", admission.Policy{}, "name"},
		{"empty name", with(func(p *admission.Policy) { p.Name = "" }), "name"},
		{"name of 65 bytes", with(func(p *admission.Policy) { p.Name = strings.Repeat("a", 65) }), "name"},
		{"uppercase name", with(func(p *admission.Policy) { p.Name = "Api" }), "name"},
		{"name starting with dash", with(func(p *admission.Policy) { p.Name = "-api" }), "name"},
		{"name starting with dot", with(func(p *admission.Policy) { p.Name = ".api" }), "name"},
		{"name starting with underscore", with(func(p *admission.Policy) { p.Name = "_api" }), "name"},
		{"name with space", with(func(p *admission.Policy) { p.Name = "api free" }), "name"},
		{"name with slash", with(func(p *admission.Policy) { p.Name = "api/free" }), "name"},
		{"name with non-ASCII", with(func(p *admission.Policy) { p.Name = "apí" }), "name"},
		{"missing algorithm", with(func(p *admission.Policy) { p.Algorithm = "" }), "algorithm"},
		{"unknown algorithm", with(func(p *admission.Policy) { p.Algorithm = "leaky_bucket" }), "algorithm"},
		{"algorithm in wrong case", with(func(p *admission.Policy) { p.Algorithm = "Token_Bucket" }), "algorithm"},
		{"fixed_window with a burst", with(func(p *admission.Policy) { p.Algorithm = "fixed_window" }), "burst"},
		{"sliding_window with a burst", with(func(p *admission.Policy) { p.Algorithm = "sliding_window" }), "burst"},
		{"sliding_log with a burst", with(func(p *admission.Policy) { p.Algorithm = "sliding_log" }), "burst"},
		{"quota without calendar", with(func(p *admission.Policy) { p.Algorithm = "quota" }), "calendar"},
		{"concurrency with a period", with(func(p *admission.Policy) { p.Algorithm = "concurrency" }), "period"},
		{"zero limit", with(func(p *admission.Policy) { p.Limit = 0 }), "limit"},
		{"negative limit", with(func(p *admission.Policy) { p.Limit = -1 }), "limit"},
		{"limit above 1e9", with(func(p *admission.Policy) { p.Limit, p.Period = 1e9+1, day }), "limit"},
		{"limit above one per ns", with(func(p *admission.Policy) { p.Limit, p.Period, p.Burst = 1_000_001, time.Millisecond, 1 }), "limit"},
		{"zero period", with(func(p *admission.Policy) { p.Period = 0 }), "period"},
		{"negative period", with(func(p *admission.Policy) { p.Period = -time.Second }), "period"},
		{"period below 1ms", with(func(p *admission.Policy) { p.Period = time.Millisecond - 1 }), "period"},
		{"period above 366 days", with(func(p *admission.Policy) { p.Period = 366*day + 1 }), "period"},
		{"negative burst", with(func(p *admission.Policy) { p.Burst = -1 }), "burst"},
		{"burst above 1e9", with(func(p *admission.Policy) { p.Burst = 1e9 + 1 }), "burst"},
		{"limit above 1e9 with default burst", with(func(p *admission.Policy) { p.Limit, p.Burst = 2e9, 0 }), "limit"},
		{"refill longer than 3660 days", with(func(p *admission.Policy) { p.Limit, p.Period, p.Burst, p.MaxCost = 1, 366*day, 11, 1 }), "burst"},
		{"refill overflowing int64", with(func(p *admission.Policy) { p.Limit, p.Period, p.Burst, p.MaxCost = 1, 366*day, 1e9, 1 }), "burst"},
		{"negative max_cost", with(func(p *admission.Policy) { p.MaxCost = -1 }), "max_cost"},
		{"max_cost above burst", with(func(p *admission.Policy) { p.MaxCost = p.Burst + 1 }), "max_cost"},
		{"max_cost above defaulted burst", with(func(p *admission.Policy) { p.Burst, p.MaxCost = 0, 61 }), "max_cost"},
		{"unknown on_unavailable", with(func(p *admission.Policy) { p.OnUnavailable = "maybe" }), "on_unavailable"},
		{"on_unavailable in wrong case", with(func(p *admission.Policy) { p.OnUnavailable = "ALLOW" }), "on_unavailable"},
		{"dedupe_retention too short", with(func(p *admission.Policy) { p.DedupeRetention = time.Second - 1 }), "dedupe_retention"},
		{"dedupe_retention too long", with(func(p *admission.Policy) { p.DedupeRetention = 24*time.Hour + 1 }), "dedupe_retention"},
		{"dedupe_retention negative", with(func(p *admission.Policy) { p.DedupeRetention = -time.Minute }), "dedupe_retention"},
		{"first problem wins: limit before burst", with(func(p *admission.Policy) { p.Limit, p.Burst = 0, -1 }), "limit"},
		{"first problem wins: algorithm before period", with(func(p *admission.Policy) { p.Algorithm, p.Period = "x", 0 }), "algorithm"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			wantFieldError(t, err, tc.field, admission.ErrInvalidPolicy)
			t.Log(err) // for humans: the message shown to operators
		})
	}
}

func TestValidateDoesNotMutate(t *testing.T) {
	for _, p := range []admission.Policy{
		{Name: "a", Algorithm: "token_bucket", Limit: 5, Period: time.Second},
		{Name: "bad name", Limit: 5},
	} {
		before := p
		_ = p.Validate()
		if p != before {
			t.Errorf("Validate changed the policy: %+v, was %+v", p, before)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	p := admission.Policy{Name: "a", Algorithm: "token_bucket", Limit: 60, Period: time.Minute}
	before := p
	got := p.WithDefaults()
	want := p
	want.Burst, want.MaxCost, want.OnUnavailable, want.DedupeRetention = 60, 60, admission.OnUnavailableDeny, admission.DefaultDedupeRetention
	if got != want {
		t.Errorf("WithDefaults() = %+v, want %+v", got, want)
	}
	if p != before {
		t.Errorf("WithDefaults changed its receiver: %+v", p)
	}
	// MaxCost defaults to the (explicit) burst, not to the limit.
	p.Burst = 7
	if got := p.WithDefaults(); got.MaxCost != 7 || got.Burst != 7 {
		t.Errorf("burst 7: WithDefaults() = %+v, want burst 7 and max_cost 7", got)
	}
	// Explicit values are kept.
	if got := apiFree().WithDefaults(); got != apiFree() {
		t.Errorf("WithDefaults() = %+v, want %+v unchanged", got, apiFree())
	}
	if got, want := p.Capacity(), int64(7); got != want {
		t.Errorf("Capacity() = %d, want %d", got, want)
	}
	p.Burst = 0
	if got, want := p.Capacity(), int64(60); got != want {
		t.Errorf("Capacity() with burst 0 = %d, want %d (the limit)", got, want)
	}
}

func TestEmissionInterval(t *testing.T) {
	tests := []struct {
		limit  int64
		period time.Duration
		want   int64
	}{
		{60, time.Minute, int64(time.Second)},
		{20, time.Second, int64(50 * time.Millisecond)},
		{3, 10, 4}, // 10/3 = 3.33: rounded up
		{7, time.Millisecond, 142858},
		{1_000_000, time.Millisecond, 1},
		{1, 366 * day, int64(366 * day)},
		{1e9, 1500 * time.Millisecond, 2},
		{0, time.Second, 0},
		{1, 0, 0},
	}
	for _, tc := range tests {
		p := admission.Policy{Limit: tc.limit, Period: tc.period}
		got := p.EmissionInterval()
		if got != tc.want {
			t.Errorf("EmissionInterval(%d per %v) = %d, want %d", tc.limit, tc.period, got, tc.want)
		}
		// Strict: one unit per T never exceeds limit per period.
		if got > 0 && got*tc.limit < int64(tc.period) {
			t.Errorf("%d per %v: T=%d admits more than the limit", tc.limit, tc.period, got)
		}
	}
}

func TestCheckRequest(t *testing.T) {
	p := apiFree() // burst 20, max_cost 10
	tests := []struct {
		name  string
		key   string
		cost  int64
		field string // "" = valid
	}{
		{"valid", "tenant:acme", 1, ""},
		{"cost at max_cost", "k", 10, ""},
		{"key of 512 bytes", strings.Repeat("k", admission.MaxKeyBytes), 1, ""},
		{"UTF-8 key with hash tag", "{tenant-é}/user:1", 1, ""},
		{"empty key", "", 1, "key"},
		{"key of 513 bytes", strings.Repeat("k", admission.MaxKeyBytes+1), 1, "key"},
		{"invalid UTF-8", "tenant\xff", 1, "key"},
		{"truncated UTF-8", "é"[:1], 1, "key"},
		{"key checked before cost", "", 0, "key"},
		{"cost 0", "k", 0, "cost"},
		{"cost -1", "k", -1, "cost"},
		{"cost above max_cost", "k", 11, "cost"},
		{"cost above burst", "k", 21, "cost"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := p.CheckRequest(tc.key, tc.cost)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("CheckRequest = %v, want nil", err)
				}
				return
			}
			wantFieldError(t, err, tc.field, admission.ErrInvalidRequest)
			t.Log(err)
		})
	}
	// max_cost defaults to burst.
	p.MaxCost = 0
	if err := p.CheckRequest("k", 20); err != nil {
		t.Errorf("cost 20 with max_cost defaulted to burst 20: %v", err)
	}
	wantFieldError(t, p.CheckRequest("k", 21), "cost", admission.ErrInvalidRequest)
}

// TestFieldErrorFormatAndUnwrap tests the FieldError methods themselves on a
// hand-built value; no test matches the text of an error the package returns.
func TestFieldErrorFormatAndUnwrap(t *testing.T) {
	fe := &admission.FieldError{Field: "burst", Reason: "must be between 1 and 1000000000 (got 0)", Err: admission.ErrInvalidPolicy}
	if got, want := fe.Error(), "burst: must be between 1 and 1000000000 (got 0)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if fe.Unwrap() != admission.ErrInvalidPolicy {
		t.Errorf("Unwrap() = %v, want ErrInvalidPolicy", fe.Unwrap())
	}
}
