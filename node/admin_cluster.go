package node

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/control"
	"github.com/quorate/quorate/node/internal/engine"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
	"github.com/quorate/quorate/shard"
)

// The admin calls that change the cluster's shape (replica moves, drains,
// rebalancing, plans, node removals and pre-registrations) run on the meta
// leader (onMetaLeader) and are the control plane's (package control);
// their lists (plans, the audit trail) answer from this node's meta
// replica after a read barrier.

// MoveReplica writes the shard map's next epoch with group's replica moved
// from one node to another, on the meta leader (forwarded there from any
// node); the group's leader carries the move out.
func (h *adminHandler) MoveReplica(ctx context.Context, req *connect.Request[quoratev1.MoveReplicaRequest]) (*connect.Response[quoratev1.MoveReplicaResponse], error) {
	n := h.n
	return onMetaLeader(ctx, n, req, true,
		func(ctx context.Context) (*quoratev1.MoveReplicaResponse, error) {
			epoch, err := n.controller.MoveReplica(ctx, req.Msg)
			return &quoratev1.MoveReplicaResponse{MapEpoch: epoch}, err
		}, quoratev1connect.AdminServiceClient.MoveReplica)
}

// DrainNode moves every data group replica off a node in one shard map
// change, on the meta leader.
func (h *adminHandler) DrainNode(ctx context.Context, req *connect.Request[quoratev1.DrainNodeRequest]) (*connect.Response[quoratev1.DrainNodeResponse], error) {
	n := h.n
	if req.Msg.GetId() == "" {
		return nil, n.toConnectError(engine.BadRequest("id", "must not be empty"))
	}
	return onMetaLeader(ctx, n, req, true,
		func(ctx context.Context) (*quoratev1.DrainNodeResponse, error) {
			return n.controller.DrainNode(ctx, req.Msg.GetId())
		},
		quoratev1connect.AdminServiceClient.DrainNode)
}

func (h *adminHandler) Rebalance(ctx context.Context, req *connect.Request[quoratev1.RebalanceRequest]) (*connect.Response[quoratev1.RebalanceResponse], error) {
	return onMetaLeader(ctx, h.n, req, true, func(ctx context.Context) (*quoratev1.RebalanceResponse, error) {
		return h.n.controller.Rebalance(ctx, req.Msg.GetDryRun())
	}, quoratev1connect.AdminServiceClient.Rebalance)
}

func (h *adminHandler) MoveSlots(ctx context.Context, req *connect.Request[quoratev1.MoveSlotsRequest]) (*connect.Response[quoratev1.PlanResponse], error) {
	return onMetaLeader(ctx, h.n, req, false, func(ctx context.Context) (*quoratev1.PlanResponse, error) {
		return h.n.controller.MoveSlots(ctx, req.Msg)
	}, quoratev1connect.AdminServiceClient.MoveSlots)
}

func (h *adminHandler) AddGroup(ctx context.Context, req *connect.Request[quoratev1.AddGroupRequest]) (*connect.Response[quoratev1.PlanResponse], error) {
	return onMetaLeader(ctx, h.n, req, false, func(ctx context.Context) (*quoratev1.PlanResponse, error) {
		return h.n.controller.AddGroup(ctx, req.Msg.GetReplicas())
	}, quoratev1connect.AdminServiceClient.AddGroup)
}

func (h *adminHandler) SplitGroup(ctx context.Context, req *connect.Request[quoratev1.SplitGroupRequest]) (*connect.Response[quoratev1.PlanResponse], error) {
	return onMetaLeader(ctx, h.n, req, false, func(ctx context.Context) (*quoratev1.PlanResponse, error) {
		return h.n.controller.SplitGroup(ctx, shard.GroupID(req.Msg.GetGroup()))
	}, quoratev1connect.AdminServiceClient.SplitGroup)
}

func (h *adminHandler) CancelPlan(ctx context.Context, req *connect.Request[quoratev1.CancelPlanRequest]) (*connect.Response[quoratev1.PlanResponse], error) {
	return onMetaLeader(ctx, h.n, req, true, func(ctx context.Context) (*quoratev1.PlanResponse, error) {
		return h.n.controller.CancelPlan(ctx, req.Msg.GetId())
	}, quoratev1connect.AdminServiceClient.CancelPlan)
}

// ListPlans answers from this node's meta replica once it has applied
// everything the meta leader had applied when asked (a read barrier), so a
// plan another node just started, or a step it just finished, is listed
// whichever node is asked.
func (h *adminHandler) ListPlans(ctx context.Context, _ *connect.Request[quoratev1.ListPlansRequest]) (*connect.Response[quoratev1.ListPlansResponse], error) {
	ctx, cancel := h.n.engine.RequestContext(ctx)
	defer cancel()
	if err := h.n.engine.CatchUpMeta(ctx); err != nil {
		return nil, h.n.toConnectError(fmt.Errorf("%w: catching up with the meta leader before listing plans: %v", engine.ErrNotProposed, err))
	}
	out := &quoratev1.ListPlansResponse{}
	for _, p := range h.n.meta.FSM.Plans() {
		out.Plans = append(out.Plans, control.PlanStatus(p, h.n.now()))
	}
	return connect.NewResponse(out), nil
}

// RemoveNode takes a node out of the cluster on the meta leader.
func (h *adminHandler) RemoveNode(ctx context.Context, req *connect.Request[quoratev1.RemoveNodeRequest]) (*connect.Response[quoratev1.RemoveNodeResponse], error) {
	n := h.n
	if req.Msg.GetId() == "" {
		return nil, n.toConnectError(engine.BadRequest("id", "must not be empty"))
	}
	return onMetaLeader(ctx, n, req, true,
		func(ctx context.Context) (*quoratev1.RemoveNodeResponse, error) {
			return &quoratev1.RemoveNodeResponse{}, n.controller.RemoveNode(ctx, req.Msg.GetId(), req.Msg.GetForce())
		}, quoratev1connect.AdminServiceClient.RemoveNode)
}

// AddNode pre-registers a node on the meta leader: the registry learns its
// addresses before it runs (see the proto).
func (h *adminHandler) AddNode(ctx context.Context, req *connect.Request[quoratev1.AddNodeRequest]) (*connect.Response[quoratev1.AddNodeResponse], error) {
	n, r := h.n, req.Msg
	if err := checkJoinRequest(&quoratev1.JoinRequest{Id: r.GetId(), RaftAddr: r.GetRaftAddr(), ApiAddr: r.GetApiAddr(), FeatureLevel: fsm.FeatureLevel}); err != nil {
		return nil, n.toConnectError(err)
	}
	return onMetaLeader(ctx, n, req, true, func(ctx context.Context) (*quoratev1.AddNodeResponse, error) {
		return &quoratev1.AddNodeResponse{}, n.controller.AddNode(ctx, r)
	}, quoratev1connect.AdminServiceClient.AddNode)
}

// UncordonNode lets plans place replicas on a drained node again, on the
// meta leader.
func (h *adminHandler) UncordonNode(ctx context.Context, req *connect.Request[quoratev1.UncordonNodeRequest]) (*connect.Response[quoratev1.UncordonNodeResponse], error) {
	n := h.n
	if req.Msg.GetId() == "" {
		return nil, n.toConnectError(engine.BadRequest("id", "must not be empty"))
	}
	return onMetaLeader(ctx, n, req, true, func(ctx context.Context) (*quoratev1.UncordonNodeResponse, error) {
		epoch, err := n.controller.Uncordon(ctx, req.Msg.GetId())
		return &quoratev1.UncordonNodeResponse{MapEpoch: epoch}, err
	}, quoratev1connect.AdminServiceClient.UncordonNode)
}

// Bounds of a ListAudit page.
const (
	defaultAuditLimit = 100
	maxAuditLimit     = 1000
)

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
		return nil, n.toConnectError(engine.BadRequest("limit", "is %d; at most %d records in one page", limit, maxAuditLimit))
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
