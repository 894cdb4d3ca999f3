package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/ratelimitheader"
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
	d, err := l.a.Admit(r.Context(), p.req)
	if err == nil && d == nil {
		err = errors.New("middleware: the admitter returned no decision and no error")
	}
	if err != nil {
		if l.cfg.onError != nil {
			l.cfg.onError(r, err)
		}
		if l.cfg.fail == FailOpen {
			return verdict{kind: pass}
		}
		return verdict{kind: unavailable, msg: "rate limiter unavailable"}
	}
	results := checkResults(d, len(p.limits))
	v := verdict{kind: pass}
	if !d.Allowed {
		v.retryAfter = d.RetryAfter
		i := deniedIndex(d, len(p.limits))
		if i >= 0 {
			v.deniedBy = p.limits[i].Name
			v.retryAfter = max(v.retryAfter, results[i].RetryAfter)
		}
		results = unspent(results, p.costs, i)
	}
	if d.Outcome == client.LocalGrant {
		// Exact (spent from a budget lease the cluster granted), but the
		// client knows its own grant, not the key's remaining units or
		// reset: no RateLimit fields rather than misleading ones.
		return v
	}
	if d.Outcome != client.Verified {
		if l.cfg.unverified != nil {
			l.cfg.unverified(r, d)
		}
		switch {
		case d.Allowed:
			return v
		case d.Outcome == client.Unavailable:
			return verdict{kind: unavailable, msg: "rate limiter unavailable"}
		}
		v.header = http.Header{}
	} else {
		v.header = rateLimitHeader(p.limits, results)
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

// checkResults returns one result per limit: d.Checks when it has one per
// limit, else d's own fields for the first limit only.
func checkResults(d *client.Decision, n int) []client.CheckResult {
	if len(d.Checks) == n {
		return d.Checks
	}
	return []client.CheckResult{{
		Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		ResetAfter: d.ResetAfter, RetryAfter: d.RetryAfter, Window: d.Window,
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
// limits' results, one list member per result.
func rateLimitHeader(limits []*Limit, results []client.CheckResult) http.Header {
	fields := make([]ratelimitheader.Limit, len(results))
	for i, res := range results {
		fields[i] = ratelimitheader.Limit{Name: limits[i].Name, Limit: res.Limit, Remaining: res.Remaining,
			Window: res.Window, ResetAfter: res.ResetAfter}
	}
	return ratelimitheader.Fields(fields)
}

// retryAfterSeconds is d in whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	return max(ratelimitheader.CeilSeconds(d), 1)
}
