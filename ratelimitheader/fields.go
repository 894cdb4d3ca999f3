package ratelimitheader

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The header fields.
const (
	// Policy is the RateLimit-Policy field: each limit's quota (q) and
	// window (w).
	Policy = "RateLimit-Policy"
	// RateLimit is the RateLimit field: each limit's remaining units (r)
	// and the seconds until they are restored (t).
	RateLimit = "RateLimit"
)

// Limit is one limit's state as the fields show it.
type Limit struct {
	// Name is the limit's name, printable ASCII.
	Name string
	// Limit is the policy's quota (q), Remaining the units left (r).
	Limit, Remaining int64
	// Window is the policy's window (w; omitted when zero), ResetAfter the
	// time until the quota is restored (t); both in whole seconds, rounded
	// up.
	Window, ResetAfter time.Duration
}

// Fields returns the RateLimit-Policy and RateLimit header fields of
// limits, one list member per limit, in order.
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
		if res.Window > 0 {
			pol.WriteString(";w=")
			pol.WriteString(Integer(CeilSeconds(res.Window)))
		}
		cur.WriteString(name)
		cur.WriteString(";r=")
		cur.WriteString(Integer(res.Remaining))
		cur.WriteString(";t=")
		cur.WriteString(Integer(CeilSeconds(res.ResetAfter)))
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
