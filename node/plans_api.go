package node

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func (h *adminHandler) MoveSlots(ctx context.Context, req *connect.Request[quoratev1.MoveSlotsRequest]) (*connect.Response[quoratev1.PlanResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("not yet"))
}

func (h *adminHandler) AddGroup(ctx context.Context, req *connect.Request[quoratev1.AddGroupRequest]) (*connect.Response[quoratev1.PlanResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("not yet"))
}

func (h *adminHandler) SplitGroup(ctx context.Context, req *connect.Request[quoratev1.SplitGroupRequest]) (*connect.Response[quoratev1.PlanResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("not yet"))
}

func (h *adminHandler) ListPlans(ctx context.Context, req *connect.Request[quoratev1.ListPlansRequest]) (*connect.Response[quoratev1.ListPlansResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("not yet"))
}

func (h *adminHandler) CancelPlan(ctx context.Context, req *connect.Request[quoratev1.CancelPlanRequest]) (*connect.Response[quoratev1.PlanResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("not yet"))
}
