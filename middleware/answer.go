package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quorate/quorate/client"
)

// The answer's fields.
const (
	HeaderPolicy     = "RateLimit-Policy"
	HeaderRateLimit  = "RateLimit"
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
		v.header.Set(HeaderDeniedBy, sfString(v.deniedBy))
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
	var pol, cur strings.Builder
	for i, res := range results {
		if i > 0 {
			pol.WriteString(", ")
			cur.WriteString(", ")
		}
		name := sfString(limits[i].Name)
		pol.WriteString(name)
		pol.WriteString(";q=")
		pol.WriteString(sfInteger(res.Limit))
		if res.Window > 0 {
			pol.WriteString(";w=")
			pol.WriteString(sfInteger(ceilSeconds(res.Window)))
		}
		cur.WriteString(name)
		cur.WriteString(";r=")
		cur.WriteString(sfInteger(res.Remaining))
		cur.WriteString(";t=")
		cur.WriteString(sfInteger(ceilSeconds(res.ResetAfter)))
	}
	h := http.Header{}
	h.Set(HeaderPolicy, pol.String())
	h.Set(HeaderRateLimit, cur.String())
	return h
}

// retryAfterSeconds is d in whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	return max(ceilSeconds(d), 1)
}

// ceilSeconds is d in whole seconds rounded up, 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// sfString is s as a structured-field String (RFC 9651 §4.1.6); s holds
// printable ASCII only (New checks limit names).
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// sfInteger is n as a non-negative structured-field Integer (at most 15
// digits), clamped into range.
func sfInteger(n int64) string {
	const most = 999_999_999_999_999
	return strconv.FormatInt(min(max(n, 0), most), 10)
}
