package node

import (
	"context"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// onMetaLeader answers an admin call that must run on the meta leader: local
// runs there (this node, when it leads), forward sends the request, marked
// as forwarded, to the leader's AdminService otherwise (forward is the
// client's method, e.g. quoratev1connect.AdminServiceClient.Join). idempotent says a
// retry after an unknown outcome is safe (see routing). Errors go through
// the one error table.
func onMetaLeader[Req, Resp any](ctx context.Context, n *Node, req *connect.Request[Req], idempotent bool,
	local func(context.Context) (*Resp, error),
	forward func(quoratev1connect.AdminServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
) (*connect.Response[Resp], error) {
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	var out *Resp
	err := n.onLeader(ctx, routing{forwarded: req.Header().Get(forwardedHeader) != "", idempotent: idempotent},
		func(ctx context.Context) (err error) {
			out, err = local(ctx)
			return err
		},
		func(ctx context.Context, p *peerClient) error {
			fwd := connect.NewRequest(req.Msg)
			fwd.Header().Set(forwardedHeader, n.cfg.ID)
			resp, err := forward(p.admin, ctx, fwd)
			if err == nil {
				out = resp.Msg
			}
			return err
		})
	if err != nil {
		return nil, n.toConnectError(err)
	}
	return connect.NewResponse(out), nil
}
