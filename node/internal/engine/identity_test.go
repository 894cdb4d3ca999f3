package engine

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/quorate/quorate/access"
)

func TestIdentityOf(t *testing.T) {
	if got := IdentityOf(context.Background()); got != access.Anonymous() {
		t.Fatalf("no identity: got %+v, want anonymous", got)
	}
	id := access.Identity{Caller: "gateway-eu", Source: access.SourceToken}
	if got := IdentityOf(WithIdentity(context.Background(), id)); got != id {
		t.Fatalf("got %+v, want %+v", got, id)
	}
}

// A forwarded request's identity headers are taken only in the form a node
// writes them; anything else is anonymous.
func TestForwardedIdentity(t *testing.T) {
	long := strings.Repeat("x", access.MaxCallerBytes+1)
	for _, tc := range []struct {
		name           string
		caller, source string
		want           access.Identity
	}{
		{"token", "app-a", "token", access.Identity{Caller: "app-a", Source: access.SourceToken}},
		{"certificate", "spiffe://x/y", "certificate", access.Identity{Caller: "spiffe://x/y", Source: access.SourceCertificate}},
		{"none", "", "", access.Anonymous()},
		{"no source", "app-a", "", access.Anonymous()},
		{"unknown source", "app-a", "admin", access.Anonymous()},
		{"node", "node:node3", "node", access.Identity{Caller: "node:node3", Source: SourceNode}},
		{"node source, not a node's caller", "app-a", "node", access.Anonymous()},
		{"source none", "app-a", "none", access.Anonymous()},
		{"caller too long", long, "token", access.Anonymous()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.caller != "" {
				h.Set(forwardedCallerHeader, tc.caller)
			}
			if tc.source != "" {
				h.Set(forwardedSourceHeader, tc.source)
			}
			if got := forwardedIdentity(h); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	// A node writes only authenticated identities and its own, and reads
	// back what it wrote.
	h := http.Header{}
	SetForwardedIdentity(context.Background(), h)
	if len(h) != 0 {
		t.Fatalf("an anonymous identity wrote headers %v", h)
	}
	for _, id := range []access.Identity{{Caller: "ops", Source: access.SourceToken}, NodeIdentity("node2")} {
		h := http.Header{}
		SetForwardedIdentity(WithIdentity(context.Background(), id), h)
		if got := forwardedIdentity(h); got != id {
			t.Fatalf("round trip: got %+v, want %+v", got, id)
		}
	}
}
