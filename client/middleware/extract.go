package middleware

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Principal extracts the authenticated principal that f finds in the
// request's context (put there by your authentication middleware), as
// "user:<principal>".
func Principal(f func(ctx context.Context) (string, bool)) KeyFunc {
	return func(r *http.Request) (string, bool) {
		p, ok := f(r.Context())
		if !ok || p == "" {
			return "", false
		}
		return "user:" + p, true
	}
}

// Route extracts the route template: r.Pattern, set by a Go 1.22+
// http.ServeMux (e.g. "GET /items/{id}") and by the Connect interceptor (the
// procedure), else what fallback returns (nil: none). It never uses the raw
// path, whose every value would be a budget of its own.
func Route(fallback func(*http.Request) (string, bool)) KeyFunc {
	return func(r *http.Request) (string, bool) {
		if r.Pattern != "" {
			return "route:" + r.Pattern, true
		}
		if fallback == nil {
			return "", false
		}
		t, ok := fallback(r)
		if !ok || t == "" {
			return "", false
		}
		return "route:" + t, true
	}
}

// Static is a constant key part, e.g. to tell two limits on one policy apart.
func Static(part string) KeyFunc {
	return func(*http.Request) (string, bool) { return part, true }
}

// Proxies says which peers are trusted proxies: only their forwarding
// headers, and headers they set, are believed.
type Proxies struct {
	// Trusted are the trusted proxies' networks.
	Trusted []netip.Prefix
	// Forwarded makes ClientIP read the Forwarded field (RFC 7239) instead
	// of X-Forwarded-For. Read the one your proxies set: the other may come
	// from the client unchanged.
	Forwarded bool
}

func (p Proxies) trusted(a netip.Addr) bool {
	for _, n := range p.Trusted {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

// Header extracts header name, as "<name>:<value>" with name in lower case,
// only when the immediate peer (RemoteAddr) is a trusted proxy.
func (p Proxies) Header(name string) KeyFunc {
	lower := strings.ToLower(name)
	return func(r *http.Request) (string, bool) {
		peer, ok := peerAddr(r.RemoteAddr)
		if !ok || !p.trusted(peer) {
			return "", false
		}
		v := strings.TrimSpace(r.Header.Get(name))
		if v == "" {
			return "", false
		}
		return lower + ":" + v, true
	}
}

// ClientIP extracts the client address, as "ip:<address>" for IPv4 and
// "ip:<prefix>/64" for IPv6. When the immediate peer is a trusted proxy it is
// the rightmost hop of X-Forwarded-For (or Forwarded) that is not a trusted
// proxy; an untrusted peer's forwarding headers are ignored. A hop that is
// not an address (Forwarded's "unknown" or an obfuscated name) before an
// untrusted one is found makes the address missing.
func (p Proxies) ClientIP() KeyFunc {
	return func(r *http.Request) (string, bool) {
		a, ok := p.clientAddr(r)
		if !ok {
			return "", false
		}
		return "ip:" + normalize(a), true
	}
}

func (p Proxies) clientAddr(r *http.Request) (netip.Addr, bool) {
	addr, ok := peerAddr(r.RemoteAddr)
	if !ok || !p.trusted(addr) {
		return addr, ok
	}
	var hops []string
	if p.Forwarded {
		hops = forwardedFor(r.Header.Values("Forwarded"))
	} else {
		for _, v := range r.Header.Values("X-Forwarded-For") {
			for h := range strings.SplitSeq(v, ",") {
				hops = append(hops, strings.TrimSpace(h))
			}
		}
	}
	for i := len(hops) - 1; i >= 0 && p.trusted(addr); i-- {
		if addr, ok = parseHop(hops[i]); !ok {
			return netip.Addr{}, false
		}
	}
	return addr, true
}

// peerAddr parses a RemoteAddr ("host:port", or a bare address).
func peerAddr(remote string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if a, err := netip.ParseAddr(remote); err == nil {
		return a.Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

// parseHop parses one forwarding hop: an address, "[v6]", or either with a
// port.
func parseHop(h string) (netip.Addr, bool) {
	h = strings.Trim(strings.TrimSpace(h), `"`)
	if a, ok := peerAddr(h); ok {
		return a, true
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return peerAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
}

// forwardedFor lists the for= values of Forwarded fields, in order.
func forwardedFor(values []string) []string {
	var hops []string
	for _, v := range values {
		for elem := range strings.SplitSeq(v, ",") {
			for pair := range strings.SplitSeq(elem, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(k, "for") {
					hops = append(hops, val)
				}
			}
		}
	}
	return hops
}

// normalize returns an IPv4 address as itself and an IPv6 address as its /64.
func normalize(a netip.Addr) string {
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// MuxRoute extracts the route template for a limiter wrapping a whole
// http.ServeMux, before mux sets r.Pattern: the pattern mux routes r to, as
// "route:<pattern>", or "route:(none)" when no pattern matches (such requests
// share one budget per identity, so scans of unknown paths are limited too).
// It ignores r.Pattern, which an outer mux may have set to its own pattern.
func MuxRoute(mux *http.ServeMux) KeyFunc {
	return func(r *http.Request) (string, bool) {
		if _, p := mux.Handler(r); p != "" {
			return "route:" + p, true
		}
		return "route:(none)", true
	}
}
