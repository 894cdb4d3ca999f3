package ratelimitheader

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The header fields.
const (
	// Policy is the RateLimit-Policy field: each limit's quota (q) per
	// window (w), in its unit (qu), and Quorate's burst (quorate-burst).
	Policy = "RateLimit-Policy"
	// RateLimit is the RateLimit field: each limit's remaining units (r)
	// and the seconds until they are all restored (t).
	RateLimit = "RateLimit"
	// BurstParam is the vendor parameter of RateLimit-Policy naming the
	// most units a token bucket admits at once, when it is not the quota
	// (the draft asks vendor parameters to be prefixed, e.g. acme-burst).
	BurstParam = "quorate-burst"
	// ConcurrentUnit is the quota unit (qu) of a concurrency limit.
	ConcurrentUnit = "concurrent-requests"
)

// Limit is one limit's state as the fields show it.
type Limit struct {
	// Name is the limit's name, printable ASCII.
	Name string
	// Limit is the quota (q): the units a client may sustain per Window,
	// the policy's limit (for a token bucket its refill per period, not
	// its burst). Remaining is the units left now (r).
	Limit, Remaining int64
	// Burst is the most units admitted at once (a token bucket's
	// capacity), sent as quorate-burst when it is above 0 and not Limit.
	Burst int64
	// Window is the policy's window (w; omitted when zero), ResetAfter the
	// time until every spent unit is restored (t); both in whole seconds,
	// rounded up.
	Window, ResetAfter time.Duration
	// Concurrent says Limit counts requests in flight (a concurrency
	// policy): qu="concurrent-requests", and neither w nor t, which a
	// semaphore has not.
	Concurrent bool
}

// Fields returns the RateLimit-Policy and RateLimit header fields of
// limits, one list member per limit, in order:
//
//	RateLimit-Policy: "per-client";q=60;w=60;quorate-burst=20
//	RateLimit: "per-client";r=19;t=1
func Fields(limits []Limit) http.Header {
	var pol, cur strings.Builder
	for i, res := range limits {
		if i > 0 {
			pol.WriteString(", ")
			cur.WriteString(", ")
		}
		name := String(res.Name)
		pol.WriteString(name)
		pol.WriteString(";q=")
		pol.WriteString(Integer(res.Limit))
		if res.Concurrent {
			pol.WriteString(";qu=")
			pol.WriteString(String(ConcurrentUnit))
		} else if res.Window > 0 {
			pol.WriteString(";w=")
			pol.WriteString(Integer(CeilSeconds(res.Window)))
		}
		if res.Burst > 0 && res.Burst != res.Limit {
			pol.WriteString(";" + BurstParam + "=")
			pol.WriteString(Integer(res.Burst))
		}
		cur.WriteString(name)
		cur.WriteString(";r=")
		cur.WriteString(Integer(res.Remaining))
		if !res.Concurrent {
			cur.WriteString(";t=")
			cur.WriteString(Integer(CeilSeconds(res.ResetAfter)))
		}
	}
	h := http.Header{}
	h.Set(Policy, pol.String())
	h.Set(RateLimit, cur.String())
	return h
}

// CeilSeconds is d in whole seconds rounded up, 0 for d ≤ 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// String is s as a structured-field String (RFC 9651 §4.1.6); s holds
// printable ASCII only.
func String(s string) string {
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

// Integer is n as a non-negative structured-field Integer (at most 15
// digits), clamped into range.
func Integer(n int64) string {
	const most = 999_999_999_999_999
	return strconv.FormatInt(min(max(n, 0), most), 10)
}
