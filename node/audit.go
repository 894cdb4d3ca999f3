package node

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/node/internal/engine"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Bounds of a ListAudit page.
const (
	defaultAuditLimit = 100
	maxAuditLimit     = 1000
)

// actorOf is the Actor of an admin change asked for by ctx's request: the
// identity the API edge authenticated (identityOf), anonymous when none.
// request says what was asked when the command alone does not (a shard map
// change), "" otherwise. The meta group records the change in its audit
// trail.
func actorOf(ctx context.Context, request string) *raftcmdv1.Actor {
	id := identityOf(ctx)
	return &raftcmdv1.Actor{Caller: id.Caller, Source: string(id.Source), Request: request}
}

// selfActor is the Actor of a change the control plane makes on its own
// (a plan's steps): "node:<id>" of this node.
func (c *controller) selfActor() *raftcmdv1.Actor {
	id := nodeIdentity(c.cfg.ID)
	return &raftcmdv1.Actor{Caller: id.Caller, Source: string(id.Source)}
}

// joinActor is the Actor of a registration asked for by ctx's request: who
// asked, as the API edge authenticated it (anonymous when nobody was), or
// the node itself for its own join; and, when the node the caller called
// noted it, the address the call came from ("join from <addr>").
func joinActor(ctx context.Context) *raftcmdv1.Actor {
	req := "join"
	if addr := callerAddrOf(ctx); addr != "" {
		req += " from " + addr
	}
	return actorOf(ctx, req)
}

// ListAudit answers from this node's meta replica once it has applied
// everything the meta leader had applied when asked (a read barrier), as
// ListPlans does.
func (h *adminHandler) ListAudit(ctx context.Context, req *connect.Request[quoratev1.ListAuditRequest]) (*connect.Response[quoratev1.ListAuditResponse], error) {
	n := h.n
	limit := int(req.Msg.GetLimit())
	switch {
	case limit == 0:
		limit = defaultAuditLimit
	case limit > maxAuditLimit:
		return nil, n.toConnectError(badRequest("limit", "is %d; at most %d records in one page", limit, maxAuditLimit))
	}
	ctx, cancel := n.engine.RequestContext(ctx)
	defer cancel()
	if err := n.engine.CatchUpMeta(ctx); err != nil {
		return nil, n.toConnectError(fmt.Errorf("%w: catching up with the meta leader before listing the audit trail: %v", engine.ErrNotProposed, err))
	}
	recs, more := n.meta.FSM.Audit(req.Msg.GetSince(), limit)
	out := &quoratev1.ListAuditResponse{More: more, Entries: make([]*quoratev1.AuditEntry, 0, len(recs))}
	for _, r := range recs {
		out.Entries = append(out.Entries, &quoratev1.AuditEntry{Index: r.Index, Time: timestamppb.New(time.Unix(0, r.At)),
			Caller: r.Caller, Source: r.Source, Action: r.Action, Summary: r.Summary})
	}
	return connect.NewResponse(out), nil
}
