package node

import (
	"context"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node/internal/engine"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// onMetaLeader is serve for an admin call that must run on the meta
// leader: local runs there (this node, when it leads), forward sends the
// request to the leader's AdminService otherwise (forward is the client's
// method, e.g. quoratev1connect.AdminServiceClient.Join). idempotent says a
// retry after an unknown outcome is safe (see engine.Routing).
func onMetaLeader[Req, Resp any](ctx context.Context, n *Node, req *connect.Request[Req], idempotent bool,
	local func(context.Context) (*Resp, error),
	forward func(quoratev1connect.AdminServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
) (*connect.Response[Resp], error) {
	return serve(ctx, n, req, engine.Request[Resp]{
		Route: engine.Routing{Idempotent: idempotent},
		Local: func(ctx context.Context, _ engine.Dest) (*Resp, error) { return local(ctx) },
	}, func(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[Req]) (*connect.Response[Resp], error) {
		return forward(p.Admin, ctx, fwd)
	})
}
