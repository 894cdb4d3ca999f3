package node

import (
	"context"
	"net/http"

	"github.com/quorate/quorate/access"
)

// identityKey is the context key of the caller's identity.
type identityKey struct{}

// withIdentity returns ctx carrying id, the identity the API edge
// authenticated for this request (package access).
func withIdentity(ctx context.Context, id access.Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// identityOf is the identity the API edge authenticated for the request of
// ctx; access.Anonymous() when none was (no credentials, or a call the node
// makes itself).
func identityOf(ctx context.Context) access.Identity {
	if id, ok := ctx.Value(identityKey{}).(access.Identity); ok {
		return id
	}
	return access.Anonymous()
}

// The identity of a request a node forwards to a group's leader travels in
// these headers, over the peer port's forwarding channel only: the leader's
// forwarding server does not authenticate callers (the node that forwarded
// did), but it records who asked (the audit trail) from them. Headers
// arriving on the API port are ignored: there, only credentials count.
const (
	forwardedCallerHeader = "Quorate-Forwarded-Caller"
	forwardedSourceHeader = "Quorate-Forwarded-Caller-Source"
)

// setForwardedIdentity marks a request this node forwards with id, the
// identity it authenticated (nothing for an anonymous one).
func setForwardedIdentity(h http.Header, id access.Identity) {
	if id.Source != access.SourceCertificate && id.Source != access.SourceToken {
		return
	}
	h.Set(forwardedCallerHeader, id.Caller)
	h.Set(forwardedSourceHeader, string(id.Source))
}

// forwardedIdentity is the identity a forwarded request carries, read by
// the forwarding server; anonymous when the headers are absent or not of a
// form a node writes (an unknown source, a caller access would not accept).
func forwardedIdentity(h http.Header) access.Identity {
	caller, src := h.Get(forwardedCallerHeader), access.Source(h.Get(forwardedSourceHeader))
	if caller == "" || len(caller) > access.MaxCallerBytes ||
		(src != access.SourceCertificate && src != access.SourceToken) {
		return access.Anonymous()
	}
	return access.Identity{Caller: caller, Source: src}
}

// withForwardedIdentity is the forwarding server's middleware: each request
// runs with the identity its forwarding node sent (forwardedIdentity).
func withForwardedIdentity(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(withIdentity(r.Context(), forwardedIdentity(r.Header))))
	})
}
