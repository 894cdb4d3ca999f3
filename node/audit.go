package node

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

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
// trail from feature level 5 (fsm.FeatureAudit); below it the Actor is
// ignored.
func actorOf(ctx context.Context, request string) *raftcmdv1.Actor {
	id := identityOf(ctx)
	return &raftcmdv1.Actor{Caller: id.Caller, Source: string(id.Source), Request: request}
}

// selfActor is the Actor of a change the control plane makes on its own
// (a plan's steps): "node:<id>" of this node.
func (c *controller) selfActor() *raftcmdv1.Actor {
	return &raftcmdv1.Actor{Caller: "node:" + c.cfg.ID, Source: "node"}
}

// joinActor is the Actor of node id's registration: the authenticated
// caller that asked, or, when none was, the node the request names (with
// source "none": a claim, not an identity).
func joinActor(ctx context.Context, id string) *raftcmdv1.Actor {
	a := actorOf(ctx, "join")
	if a.GetCaller() == "" {
		a.Caller = "node:" + id
	}
	return a
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
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	if err := n.catchUpMeta(ctx); err != nil {
		return nil, n.toConnectError(fmt.Errorf("%w: catching up with the meta leader before listing the audit trail: %v", ErrNotProposed, err))
	}
	recs, more := n.meta.fsm.Audit(req.Msg.GetSince(), limit)
	out := &quoratev1.ListAuditResponse{More: more, Entries: make([]*quoratev1.AuditEntry, 0, len(recs))}
	for _, r := range recs {
		out.Entries = append(out.Entries, &quoratev1.AuditEntry{Index: r.Index, Time: timestamppb.New(time.Unix(0, r.At)),
			Caller: r.Caller, Source: r.Source, Action: r.Action, Summary: r.Summary})
	}
	return connect.NewResponse(out), nil
}
