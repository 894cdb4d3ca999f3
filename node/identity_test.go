package node

import (
	"context"
	"testing"

	"github.com/quorate/quorate/access"
)

func TestIdentityOf(t *testing.T) {
	if got := identityOf(context.Background()); got != access.Anonymous() {
		t.Fatalf("no identity: got %+v, want anonymous", got)
	}
	id := access.Identity{Caller: "gateway-eu", Source: access.SourceToken}
	if got := identityOf(withIdentity(context.Background(), id)); got != id {
		t.Fatalf("got %+v, want %+v", got, id)
	}
}
