package control

import (
	"context"

	"github.com/quorate/quorate/node/internal/engine"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// ActorOf is the Actor of an admin change asked for by ctx's request: the
// identity the API edge authenticated (engine.IdentityOf), anonymous when none.
// request says what was asked when the command alone does not (a shard map
// change), "" otherwise. The meta group records the change in its audit
// trail.
func ActorOf(ctx context.Context, request string) *raftcmdv1.Actor {
	id := engine.IdentityOf(ctx)
	return &raftcmdv1.Actor{Caller: id.Caller, Source: string(id.Source), Request: request}
}

// selfActor is the Actor of a change the control plane makes on its own
// (a plan's steps): "node:<id>" of this node.
func (c *Controller) selfActor() *raftcmdv1.Actor {
	id := engine.NodeIdentity(c.cfg.ID)
	return &raftcmdv1.Actor{Caller: id.Caller, Source: string(id.Source)}
}

// joinActor is the Actor of a registration asked for by ctx's request: who
// asked, as the API edge authenticated it (anonymous when nobody was), or
// the node itself for its own join; and, when the node the caller called
// noted it, the address the call came from ("join from <addr>").
func joinActor(ctx context.Context) *raftcmdv1.Actor {
	req := "join"
	if addr := engine.CallerAddrOf(ctx); addr != "" {
		req += " from " + addr
	}
	return ActorOf(ctx, req)
}
