package node

import (
	"context"

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
