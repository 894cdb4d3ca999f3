package middleware

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func request(remote string, header ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

var proxies = Proxies{Trusted: []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("2001:db8:ffff::/48"),
}}

func TestClientIPTrustedProxies(t *testing.T) {
	fwd := proxies
	fwd.Forwarded = true
	for _, c := range []struct {
		name   string
		p      Proxies
		r      *http.Request
		want   string
		wantOK bool
	}{
		{"no proxy", proxies, request("198.51.100.7:5000"), "ip:198.51.100.7", true},
		{"untrusted peer's X-Forwarded-For is ignored", proxies,
			request("198.51.100.7:5000", "X-Forwarded-For", "203.0.113.9"), "ip:198.51.100.7", true},
		{"untrusted peer's Forwarded is ignored", fwd,
			request("198.51.100.7:5000", "Forwarded", "for=203.0.113.9"), "ip:198.51.100.7", true},
		{"trusted peer: the rightmost untrusted hop", proxies,
			request("10.1.1.1:443", "X-Forwarded-For", "6.6.6.6, 203.0.113.9, 10.2.2.2"), "ip:203.0.113.9", true},
		{"hops over several fields", proxies,
			request("10.1.1.1:443", "X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "203.0.113.9"), "ip:203.0.113.9", true},
		{"a spoofed leftmost hop is not believed", proxies,
			request("10.1.1.1:443", "X-Forwarded-For", "10.9.9.9, 203.0.113.9"), "ip:203.0.113.9", true},
		{"trusted peer without a hop is the client", proxies, request("10.1.1.1:443"), "ip:10.1.1.1", true},
		{"every hop trusted: the leftmost", proxies,
			request("10.1.1.1:443", "X-Forwarded-For", "10.3.3.3, 10.2.2.2"), "ip:10.3.3.3", true},
		{"garbage hop reached through trusted ones", proxies,
			request("10.1.1.1:443", "X-Forwarded-For", "203.0.113.9, junk"), "", false},
		{"X-Forwarded-For is not read in Forwarded mode", fwd,
			request("10.1.1.1:443", "X-Forwarded-For", "203.0.113.9"), "ip:10.1.1.1", true},
		{"Forwarded, quoted IPv6 with port", fwd,
			request("[2001:db8:ffff::1]:443", "Forwarded", `for=192.0.2.60;proto=http, for="[2001:db8:cafe:1:2:3:4:5]:4711"`),
			"ip:2001:db8:cafe:1::/64", true},
		{"Forwarded unknown hop", fwd, request("10.1.1.1:443", "Forwarded", "for=unknown"), "", false},
		{"IPv4-mapped IPv6 peer is IPv4", proxies, request("[::ffff:198.51.100.7]:80"), "ip:198.51.100.7", true},
		{"unparseable RemoteAddr", proxies, request("@"), "", false},
	} {
		got, ok := c.p.ClientIP()(c.r)
		if got != c.want || ok != c.wantOK {
			t.Errorf("%s: %q %v, want %q %v", c.name, got, ok, c.want, c.wantOK)
		}
	}
}

func TestClientIPv6SharesA64(t *testing.T) {
	ip := Proxies{}.ClientIP()
	a, _ := ip(request("[2001:db8:1:2:aaaa::1]:1000"))
	b, _ := ip(request("[2001:db8:1:2:ffff:eeee:dddd:cccc%eth0]:2000"))
	c, _ := ip(request("[2001:db8:1:3::1]:1000"))
	if a != b || a != "ip:2001:db8:1:2::/64" {
		t.Errorf("one /64: %q and %q, want both ip:2001:db8:1:2::/64", a, b)
	}
	if c == a {
		t.Errorf("another /64 shares key %q", c)
	}
	v4a, _ := ip(request("192.0.2.1:1"))
	v4b, _ := ip(request("192.0.2.2:1"))
	if v4a == v4b {
		t.Errorf("two IPv4 addresses share key %q", v4a)
	}

	// Through the middleware: two addresses of one /64 spend one budget.
	f := newFake(map[string]fakePolicy{"api": {limit: 1}})
	h := mustNew(t, f, WithIdentity(ip), WithLimits(Limit{Policy: "api"})).Handler(ok200)
	if w := get(h, "/", "[2001:db8:1:2::1]:1"); w.Code != http.StatusOK {
		t.Fatalf("first address: status %d", w.Code)
	}
	if w := get(h, "/", "[2001:db8:1:2::2]:1"); w.Code != http.StatusTooManyRequests {
		t.Errorf("second address of the /64: status %d, want 429", w.Code)
	}
}

func TestHeaderOnlyFromTrustedProxies(t *testing.T) {
	k := proxies.Header("X-Tenant")
	if got, ok := k(request("10.1.1.1:1", "X-Tenant", "acme")); !ok || got != "x-tenant:acme" {
		t.Errorf("trusted peer: %q %v, want x-tenant:acme", got, ok)
	}
	if got, ok := k(request("198.51.100.7:1", "X-Tenant", "acme")); ok {
		t.Errorf("untrusted peer: %q believed", got)
	}
	if got, ok := k(request("10.1.1.1:1")); ok {
		t.Errorf("no header: %q", got)
	}

	// Identity falls back to the client IP when the header is not believed.
	f := newFake(map[string]fakePolicy{"api": {limit: 10}})
	h := mustNew(t, f, WithIdentity(k, proxies.ClientIP()), WithLimits(Limit{Policy: "api"})).Handler(ok200)
	get(h, "/", "198.51.100.7:1", "X-Tenant", "acme", "X-Forwarded-For", "1.2.3.4")
	if got := f.last().Key; got != "{ip:198.51.100.7}" {
		t.Errorf("untrusted peer: key %q, want {ip:198.51.100.7}", got)
	}
	get(h, "/", "10.1.1.1:1", "X-Tenant", "acme")
	if got := f.last().Key; got != "{x-tenant:acme}" {
		t.Errorf("trusted peer: key %q, want {x-tenant:acme}", got)
	}
}
