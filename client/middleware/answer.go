package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/client/ratelimitheader"
)

// The answer's fields.
const (
	HeaderPolicy     = ratelimitheader.Policy
	HeaderRateLimit  = ratelimitheader.RateLimit
	HeaderRetryAfter = "Retry-After"
	// HeaderDeniedBy names the limit that denied, a structured-field String.
	HeaderDeniedBy = "Quorate-Denied-By"
)

// verdictKind is what the middleware does with a request.
type verdictKind int

const (
	pass        verdictKind = iota // call the handler
	badKey                         // 400 / InvalidArgument
	denied                         // 429 / ResourceExhausted
	unavailable                    // 503 / Unavailable
	reused                         // 422 / InvalidArgument: an Idempotency-Key used for another request
)

// verdict is the middleware's answer to one request, for either protocol.
type verdict struct {
	kind verdictKind
	// header holds the RateLimit fields (and, on denial, Retry-After and
	// Quorate-Denied-By).
	header http.Header
	// deniedBy is the name of the limit that denied, if known.
	deniedBy   string
	retryAfter time.Duration
	msg        string
	// refundKey and refundID name the admission to refund when the handler
	// fails (WithRefundOnServerError); empty: none.
	refundKey, refundID string
}

// decide admits r.
func (l *Limiter) decide(r *http.Request) verdict {
	p, err := l.plan(r)
	if err != nil {
		return verdict{kind: badKey, msg: err.Error()}
	}
	if len(p.limits) == 0 {
		return verdict{kind: pass}
	}
	idem, err := l.cfg.answers.idempotencyKey(r)
	if err != nil {
		return verdict{kind: badKey, msg: err.Error()}
	}
	d, err := l.admit(r.Context(), p.req, idem)
	if err != nil {
		if idem != "" && reusedRequestID(err) {
			return verdict{kind: reused, msg: fmt.Sprintf("%s was already used for another request: use a new key", l.cfg.answers.idempotency)}
		}
		if l.cfg.onError != nil {
			l.cfg.onError(r, err)
		}
		if l.cfg.fail == FailOpen {
			return verdict{kind: pass}
		}
		return l.unavailable()
	}
	results := checkResults(d, len(p.limits))
	v := verdict{kind: pass}
	if l.cfg.answers.refund && d.Allowed && d.Outcome == client.Verified && !d.Duplicate && d.RequestID != "" {
		v.refundKey, v.refundID = p.req.Key, d.RequestID
	}
	if !d.Allowed {
		v.retryAfter = d.RetryAfter
		i := deniedIndex(d, len(p.limits))
		if i >= 0 {
			v.deniedBy = p.limits[i].Name
			v.retryAfter = max(v.retryAfter, results[i].RetryAfter)
		}
		results = unspent(results, p.costs, i)
		if i >= 0 && i < len(results) && results[i].RetryAfter > 0 {
			// The denied limit's t is when the request would fit, as
			// Retry-After says: the draft wants Retry-After no earlier
			// than the effective window's end (a token bucket is full again
			// long after its next unit).
			results = slices.Clone(results)
			results[i].ResetAfter = results[i].RetryAfter
		}
	}
	// A LocalGrant decision is exact (spent from a budget lease the
	// cluster granted); its remaining and reset are the client's estimate
	// from the grant's last answer, as good as any answer's once sent.
	if d.Outcome != client.Verified && d.Outcome != client.LocalGrant {
		if l.cfg.unverified != nil {
			l.cfg.unverified(r, d)
		}
		switch {
		case d.Allowed:
			return v
		case d.Outcome == client.Unavailable:
			return l.unavailable()
		}
		v.header = http.Header{}
	} else {
		v.header = rateLimitHeader(p.limits, results)
		if l.cfg.answers.xHeaders {
			xRateLimitHeader(v.header, results, deniedIndex(d, len(p.limits)))
		}
		if d.Allowed {
			return v
		}
	}
	v.kind = denied
	v.header.Set(HeaderRetryAfter, strconv.FormatInt(retryAfterSeconds(v.retryAfter), 10))
	if v.deniedBy != "" {
		v.header.Set(HeaderDeniedBy, ratelimitheader.String(v.deniedBy))
		v.msg = fmt.Sprintf("rate limited by %q: retry after %d s", v.deniedBy, retryAfterSeconds(v.retryAfter))
	} else {
		v.msg = fmt.Sprintf("rate limited: retry after %d s", retryAfterSeconds(v.retryAfter))
	}
	return v
}

// admit decides req, named by the idempotency key idem when it is not
// empty: a retry of an admitted request gets its recorded answer, and a
// retry of a denied one, once that denial's Retry-After has passed, is
// decided anew under the key's next attempt ID.
func (l *Limiter) admit(ctx context.Context, req client.Request, idem string) (*client.Decision, error) {
	for n := 0; ; n++ {
		if idem != "" {
			req.RequestID = idempotentID(idem, n)
		}
		d, err := l.a.Admit(ctx, req)
		if err == nil && d == nil {
			err = errors.New("middleware: the admitter returned no decision and no error")
		}
		if err != nil {
			return nil, err
		}
		if idem == "" || !d.Duplicate || d.Allowed || n == maxIdempotentAttempts-1 ||
			time.Now().Before(d.DecidedAt.Add(d.RetryAfter)) {
			return d, nil
		}
	}
}

// unavailable is the answer when no decision could be had.
func (l *Limiter) unavailable() verdict {
	retry := l.cfg.answers.unavailableRetry
	h := http.Header{}
	h.Set(HeaderRetryAfter, strconv.FormatInt(retryAfterSeconds(retry), 10))
	return verdict{kind: unavailable, header: h, retryAfter: retry, msg: "rate limiter unavailable"}
}

// checkResults returns one result per limit: d.Checks when it has one per
// limit, else d's own fields for the first limit only.
func checkResults(d *client.Decision, n int) []client.CheckResult {
	if len(d.Checks) == n {
		return d.Checks
	}
	return []client.CheckResult{{
		Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		ResetAfter: d.ResetAfter, RetryAfter: d.RetryAfter, Window: d.Window, Quota: d.Quota,
	}}
}

// unspent returns the results of a denied request as its limits stand:
// the cluster reports each check as it was decided, the checks that passed
// with their cost taken off, before the denial took every spend back.
func unspent(results []client.CheckResult, costs []int64, denied int) []client.CheckResult {
	if len(results) != len(costs) || len(results) < 2 {
		return results
	}
	out := make([]client.CheckResult, len(results))
	copy(out, results)
	for i := range out {
		if i != denied && out[i].Allowed && !out[i].ShadowDenied {
			out[i].Remaining += costs[i]
		}
	}
	return out
}

// deniedIndex is the index among n limits of the one that denied d, -1
// when d does not say.
func deniedIndex(d *client.Decision, n int) int {
	switch {
	case d.DeniedCheck >= 0 && d.DeniedCheck < n:
		return d.DeniedCheck
	case n == 1:
		return 0
	case len(d.Checks) == n:
		for i, c := range d.Checks {
			if !c.Allowed {
				return i
			}
		}
	}
	return -1
}

// rateLimitHeader returns the RateLimit-Policy and RateLimit fields of the
// limits' results, one list member per result: q is the policy's quota per
// window (what a client may sustain), with a token bucket's burst (the
// result's Limit, its capacity) as quorate-burst. An answer that does not
// carry the quota (the policy changed since the decision) advertises the
// capacity as q.
func rateLimitHeader(limits []*Limit, results []client.CheckResult) http.Header {
	fields := make([]ratelimitheader.Limit, len(results))
	for i, res := range results {
		f := ratelimitheader.Limit{Name: limits[i].Name, Limit: res.Limit, Remaining: res.Remaining,
			Window: res.Window, ResetAfter: res.ResetAfter}
		if res.Quota > 0 {
			f.Limit, f.Burst = res.Quota, res.Limit
		}
		fields[i] = f
	}
	return ratelimitheader.Fields(fields)
}

// xRateLimitHeader adds to h the X-RateLimit fields of one limit: the one
// that denied (index denied), else the one with the fewest units left.
func xRateLimitHeader(h http.Header, results []client.CheckResult, denied int) {
	if len(results) == 0 {
		return
	}
	i := denied
	if i < 0 || i >= len(results) {
		i = 0
		for j, res := range results {
			if res.Remaining < results[i].Remaining {
				i = j
			}
		}
	}
	res := results[i]
	quota := res.Limit
	if res.Quota > 0 {
		quota = res.Quota
	}
	h.Set(HeaderXLimit, ratelimitheader.Integer(quota))
	h.Set(HeaderXRemaining, ratelimitheader.Integer(res.Remaining))
	h.Set(HeaderXReset, ratelimitheader.Integer(ratelimitheader.CeilSeconds(res.ResetAfter)))
}

// retryAfterSeconds is d in whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	return max(ratelimitheader.CeilSeconds(d), 1)
}
