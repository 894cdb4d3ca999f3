package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/quorate/quorate/client"
)

// Admitter decides admissions; *client.Client is one.
type Admitter interface {
	Admit(ctx context.Context, r client.Request) (*client.Decision, error)
}

// KeyFunc extracts one part of a key from a request; ok is false when the
// request does not carry it.
type KeyFunc func(r *http.Request) (part string, ok bool)

// Limit is one policy applied to every request, with its own key.
type Limit struct {
	// Name is the limit's name in the RateLimit fields and in denials;
	// empty means Policy. Printable ASCII only.
	Name string
	// Policy is the Quorate policy deciding the limit.
	Policy string
	// Key are the key's parts after the identity, e.g. Route(nil) for one
	// budget per identity and route; none for one budget per identity.
	Key []KeyFunc
	// Cost is the units a request spends; nil, or a result below 1, is 1.
	Cost func(*http.Request) int64
}

// MissingKey is what happens to a request whose identity or key part cannot
// be extracted.
type MissingKey int

const (
	// RejectMissing answers 400 Bad Request (InvalidArgument), naming the
	// limit whose key is missing. The default.
	RejectMissing MissingKey = iota
	// SkipMissing lets the request through without the limit whose key is
	// missing (without any limit when the identity is missing).
	SkipMissing
)

// FailMode is what happens to a request when Admit returns an error.
type FailMode int

const (
	// FailClosed answers 503 Service Unavailable (Unavailable). The default.
	FailClosed FailMode = iota
	// FailOpen lets the request through, without RateLimit fields.
	FailOpen
)

// Option configures a Limiter.
type Option func(*config)

type config struct {
	limits     []Limit
	identity   []KeyFunc
	missing    MissingKey
	fail       FailMode
	unverified func(*http.Request, *client.Decision)
	onError    func(*http.Request, error)
	answers    answerConfig // options.go
}

// WithLimits adds limits, decided together in one atomic check in this order.
// When every limit's policy has local decisions, a *client.Client decides
// the request from the budget leases of all its limits, all or nothing
// (client.LocalGrant); otherwise, or when one is short, the cluster does.
func WithLimits(l ...Limit) Option {
	return func(c *config) { c.limits = append(c.limits, l...) }
}

// WithIdentity sets the identity extractors, tried in order: the first that
// yields a value is the identity, the hash tag of every key.
func WithIdentity(k ...KeyFunc) Option {
	return func(c *config) { c.identity = append(c.identity, k...) }
}

// WithMissingKey sets what happens to a request whose key cannot be
// extracted (default RejectMissing).
func WithMissingKey(m MissingKey) Option {
	return func(c *config) { c.missing = m }
}

// WithFailMode sets what happens when Admit returns an error (default
// FailClosed).
func WithFailMode(f FailMode) Option {
	return func(c *config) { c.fail = f }
}

// WithOnUnverified sets a hook called with every decision the cluster did
// not make (client.Bypassed, client.LocalDecision, client.Unavailable), to
// count them apart from verified admissions.
func WithOnUnverified(f func(*http.Request, *client.Decision)) Option {
	return func(c *config) { c.unverified = f }
}

// WithOnError sets a hook called with every error Admit returns.
func WithOnError(f func(*http.Request, error)) Option {
	return func(c *config) { c.onError = f }
}

// Limiter admits requests through an Admitter; Handler and Interceptor put
// it in front of a service. It is safe for concurrent use.
type Limiter struct {
	a   Admitter
	cfg config
}

// New returns a Limiter admitting through a with the given options. At least
// one limit and one identity extractor are required.
func New(a Admitter, opts ...Option) (*Limiter, error) {
	if a == nil {
		return nil, errors.New("middleware: admitter: is nil")
	}
	l := &Limiter{a: a}
	for _, o := range opts {
		o(&l.cfg)
	}
	if len(l.cfg.limits) == 0 {
		return nil, errors.New("middleware: limits: none given (WithLimits)")
	}
	if err := l.cfg.answers.check(a); err != nil {
		return nil, err
	}
	if len(l.cfg.identity) == 0 {
		return nil, errors.New("middleware: identity: no extractor given (WithIdentity)")
	}
	for i, k := range l.cfg.identity {
		if k == nil {
			return nil, fmt.Errorf("middleware: identity[%d]: is nil", i)
		}
	}
	seen := map[string]bool{}
	for i := range l.cfg.limits {
		lim := &l.cfg.limits[i]
		if lim.Policy == "" {
			return nil, fmt.Errorf("middleware: limits[%d].Policy: is empty", i)
		}
		if lim.Name == "" {
			lim.Name = lim.Policy
		}
		if err := checkName(lim.Name); err != nil {
			return nil, fmt.Errorf("middleware: limits[%d].Name: %w", i, err)
		}
		if seen[lim.Name] {
			return nil, fmt.Errorf("middleware: limits[%d].Name: %q is given twice", i, lim.Name)
		}
		seen[lim.Name] = true
		for j, k := range lim.Key {
			if k == nil {
				return nil, fmt.Errorf("middleware: limits[%d].Key[%d]: is nil", i, j)
			}
		}
	}
	return l, nil
}

// checkName accepts the names a structured-field String can carry.
func checkName(s string) error {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return fmt.Errorf("%q: byte %d is not printable ASCII", s, i)
		}
	}
	return nil
}

// missingKeyError is a request whose key cannot be extracted.
type missingKeyError struct {
	limit string // empty: the identity
}

func (e *missingKeyError) Error() string {
	if e.limit == "" {
		return "rate limit key: the request carries no identity"
	}
	return fmt.Sprintf("rate limit key: the request carries no key for limit %q", e.limit)
}

// plan is a request's admission: the client request and the limits it checks.
type plan struct {
	req    client.Request
	limits []*Limit
	costs  []int64 // per limit
}

// keyEscaper keeps the braces that delimit the hash tag out of the identity.
var keyEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// plan builds r's admission; an empty plan (no limit) lets r through. The
// error is a *missingKeyError.
func (l *Limiter) plan(r *http.Request) (plan, error) {
	var p plan
	identity, ok := "", false
	for _, k := range l.cfg.identity {
		if identity, ok = k(r); ok && identity != "" {
			break
		}
	}
	if !ok || identity == "" {
		if l.cfg.missing == SkipMissing {
			return p, nil
		}
		return p, &missingKeyError{}
	}
	prefix := "{" + keyEscaper.Replace(identity) + "}"
	var checks []client.Check
limits:
	for i := range l.cfg.limits {
		lim := &l.cfg.limits[i]
		var b strings.Builder
		b.WriteString(prefix)
		for _, k := range lim.Key {
			part, ok := k(r)
			if !ok {
				if l.cfg.missing == SkipMissing {
					continue limits
				}
				return plan{}, &missingKeyError{limit: lim.Name}
			}
			b.WriteByte(':')
			b.WriteString(part) // after the tag: braces here change nothing
		}
		cost := int64(1)
		if lim.Cost != nil {
			cost = max(lim.Cost(r), 1)
		}
		p.limits = append(p.limits, lim)
		p.costs = append(p.costs, cost)
		checks = append(checks, client.Check{Policy: lim.Policy, Key: b.String(), Cost: cost})
	}
	if len(checks) == 0 {
		return p, nil
	}
	p.req = client.Request{Policy: checks[0].Policy, Key: checks[0].Key, Cost: checks[0].Cost}
	if len(checks) > 1 {
		p.req.Also = checks[1:]
	}
	return p, nil
}
