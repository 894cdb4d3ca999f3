package engine

import (
	"context"
	"net/http"
	"strings"
	"unicode"

	"github.com/quorate/quorate/access"
)

// identityKey is the context key of the caller's identity.
type identityKey struct{}

// WithIdentity returns ctx carrying id, the identity the API edge
// authenticated for this request (package access).
func WithIdentity(ctx context.Context, id access.Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityOf is the identity the API edge authenticated for the request of
// ctx; access.Anonymous() when none was (no credentials, or a call the node
// makes itself).
func IdentityOf(ctx context.Context) access.Identity {
	if id, ok := ctx.Value(identityKey{}).(access.Identity); ok {
		return id
	}
	return access.Anonymous()
}

// SourceNode is the Source of a node's own call (its join, the control
// plane's changes): made by the node itself, or sent by it over the peer
// port, which only nodes reach. Its caller is "node:<id>" (NodeIdentity).
// The API edge never gives it: there, only credentials count.
const SourceNode access.Source = "node"

// NodeCallerPrefix leads the caller of a node's own call.
const NodeCallerPrefix = "node:"

// NodeIdentity is the identity of node id's own calls.
func NodeIdentity(id string) access.Identity {
	return access.Identity{Caller: NodeCallerPrefix + id, Source: SourceNode}
}

// The identity of a request a node forwards to a group's leader travels in
// these headers, over the peer port's forwarding channel only: the leader's
// forwarding server does not authenticate callers (the node that forwarded
// did), but it records who asked (the audit trail) from them, and where the
// call came from when the handler noted it (WithCallerAddr: a join).
// Headers arriving on the API port are ignored: there, only credentials
// count.
const (
	forwardedCallerHeader = "Quorate-Forwarded-Caller"
	forwardedSourceHeader = "Quorate-Forwarded-Caller-Source"
	forwardedAddrHeader   = "Quorate-Forwarded-Caller-Addr"
)

// maxCallerAddrBytes bounds a forwarded caller address: host:port of an
// IPv6 address with a zone fits.
const maxCallerAddrBytes = 128

// SetForwardedIdentity marks a request this node forwards with the
// identity of ctx's request, the one its edge authenticated or a node's
// own (nothing for an anonymous one), and with the caller's address, when
// ctx has one.
func SetForwardedIdentity(ctx context.Context, h http.Header) {
	if addr := CallerAddrOf(ctx); addr != "" {
		h.Set(forwardedAddrHeader, addr)
	}
	id := IdentityOf(ctx)
	if id.Source != access.SourceCertificate && id.Source != access.SourceToken && id.Source != SourceNode {
		return
	}
	h.Set(forwardedCallerHeader, id.Caller)
	h.Set(forwardedSourceHeader, string(id.Source))
}

// forwardedIdentity is the identity a forwarded request carries, read by
// the forwarding server; anonymous when the headers are absent or not of a
// form a node writes (an unknown source, a caller access would not accept,
// a node's call not named "node:<id>").
func forwardedIdentity(h http.Header) access.Identity {
	caller, src := h.Get(forwardedCallerHeader), access.Source(h.Get(forwardedSourceHeader))
	if caller == "" || len(caller) > access.MaxCallerBytes ||
		(src != access.SourceCertificate && src != access.SourceToken && src != SourceNode) ||
		(src == SourceNode && !strings.HasPrefix(caller, NodeCallerPrefix)) {
		return access.Anonymous()
	}
	return access.Identity{Caller: caller, Source: src}
}

// WithForwardedIdentity is the forwarding server's middleware: each request
// runs with the identity its forwarding node sent (forwardedIdentity), and
// with the caller address it sent, if any: a request on the peer port has
// no other (its connection's is a node's).
func WithForwardedIdentity(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := WithIdentity(r.Context(), forwardedIdentity(r.Header))
		addr := r.Header.Get(forwardedAddrHeader)
		if len(addr) > maxCallerAddrBytes || strings.IndexFunc(addr, unicode.IsControl) >= 0 {
			addr = ""
		}
		ctx = context.WithValue(ctx, callerAddrKey{}, addr)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// callerAddrKey is the context key of the network address a request came
// from, as the node the client called saw it.
type callerAddrKey struct{}

// WithCallerAddr returns ctx noting addr, the remote address of the
// connection its request came on, unless ctx already has one: a request
// the forwarding server serves keeps the address the forwarding node sent
// (or none).
func WithCallerAddr(ctx context.Context, addr string) context.Context {
	if _, ok := ctx.Value(callerAddrKey{}).(string); ok {
		return ctx
	}
	return context.WithValue(ctx, callerAddrKey{}, addr)
}

// CallerAddrOf is the caller's address ctx notes ("" for none).
func CallerAddrOf(ctx context.Context) string {
	addr, _ := ctx.Value(callerAddrKey{}).(string)
	return addr
}
