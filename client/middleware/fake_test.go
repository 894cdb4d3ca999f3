package middleware

import (
	"context"
	"sync"
	"time"

	"github.com/quorate/quorate/client"
)

// fakePolicy is a fixed budget per key that never refills.
type fakePolicy struct {
	limit  int64
	window time.Duration
	reset  time.Duration
	retry  time.Duration
}

// fakeAdmitter decides multi-checks all or nothing against fixed budgets,
// and records every request.
type fakeAdmitter struct {
	mu       sync.Mutex
	policies map[string]fakePolicy
	spent    map[[2]string]int64
	requests []client.Request
	// err and outcome, when set, replace the decision.
	err     error
	outcome client.Outcome
	allowed bool // with outcome != Verified
}

func newFake(p map[string]fakePolicy) *fakeAdmitter {
	return &fakeAdmitter{policies: p, spent: map[[2]string]int64{}}
}

func (f *fakeAdmitter) Admit(_ context.Context, r client.Request) (*client.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r)
	if f.err != nil {
		return nil, f.err
	}
	if f.outcome != client.Verified {
		return &client.Decision{Allowed: f.allowed, Outcome: f.outcome, DeniedCheck: -1, RetryAfter: 1500 * time.Millisecond}, nil
	}
	checks := append([]client.Check{{Policy: r.Policy, Key: r.Key, Cost: r.Cost}}, r.Also...)
	d := &client.Decision{Allowed: true, Outcome: client.Verified, DeniedCheck: -1}
	for i, c := range checks {
		p := f.policies[c.Policy]
		rem := p.limit - f.spent[[2]string{c.Policy, c.Key}]
		res := client.CheckResult{Policy: c.Policy, Key: c.Key, Allowed: c.Cost <= rem, Limit: p.limit,
			Remaining: rem, ResetAfter: p.reset, Window: p.window}
		if res.Allowed {
			// As the cluster does: a check that passes reports its spend
			// taken off, even when another check denies the request.
			res.Remaining -= c.Cost
		} else {
			res.RetryAfter = p.retry
			if d.Allowed {
				d.Allowed, d.DeniedCheck, d.RetryAfter = false, i, p.retry
			}
		}
		d.Checks = append(d.Checks, res)
	}
	if d.Allowed {
		for _, c := range checks {
			f.spent[[2]string{c.Policy, c.Key}] += c.Cost
		}
	}
	if len(r.Also) == 0 {
		c := d.Checks[0]
		d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter, d.Window = c.Limit, c.Remaining, c.ResetAfter, c.RetryAfter, c.Window
		d.Checks, d.DeniedCheck = nil, -1
	}
	return d, nil
}

func (f *fakeAdmitter) last() client.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[len(f.requests)-1]
}
