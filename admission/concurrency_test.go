package admission_test

import (
	"errors"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

func TestConcurrencyPolicyValidation(t *testing.T) {
	ok := admission.Policy{Name: "reports-active", Algorithm: admission.AlgorithmConcurrency, Limit: 2, LeaseTTL: 2 * time.Minute}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid concurrency policy: %v", err)
	}
	if got := (admission.Policy{Name: "c", Algorithm: admission.AlgorithmConcurrency, Limit: 2}).WithDefaults().LeaseTTL; got != admission.DefaultLeaseTTL {
		t.Fatalf("default lease_ttl %v, want %v", got, admission.DefaultLeaseTTL)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*admission.Policy)
		field string
	}{
		{"no slots", func(p *admission.Policy) { p.Limit = 0 }, "limit"},
		{"too many slots", func(p *admission.Policy) { p.Limit = admission.MaxConcurrencyLimit + 1 }, "limit"},
		{"a period", func(p *admission.Policy) { p.Period = time.Minute }, "period"},
		{"a burst", func(p *admission.Policy) { p.Burst = 5 }, "burst"},
		{"a max_cost", func(p *admission.Policy) { p.MaxCost = 5 }, "max_cost"},
		{"a calendar", func(p *admission.Policy) { p.Calendar = admission.CalendarDay }, "calendar"},
		{"ttl too short", func(p *admission.Policy) { p.LeaseTTL = time.Second - 1 }, "lease_ttl"},
		{"ttl too long", func(p *admission.Policy) { p.LeaseTTL = 24*time.Hour + 1 }, "lease_ttl"},
		{"negative ttl", func(p *admission.Policy) { p.LeaseTTL = -time.Second }, "lease_ttl"},
	} {
		p := ok
		tc.edit(&p)
		var fe *admission.FieldError
		if err := p.Validate(); !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, admission.ErrInvalidPolicy) {
			t.Errorf("%s: %v, want a FieldError on %q", tc.name, err, tc.field)
		}
	}
	rate := admission.Policy{Name: "r", Algorithm: admission.AlgorithmTokenBucket, Limit: 1, Period: time.Second, LeaseTTL: time.Minute}
	var fe *admission.FieldError
	if err := rate.Validate(); !errors.As(err, &fe) || fe.Field != "lease_ttl" {
		t.Errorf("lease_ttl on a token bucket: %v, want a FieldError on lease_ttl", err)
	}
}
