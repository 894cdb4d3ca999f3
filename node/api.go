package node

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// admissionHandler serves quorate.v1.AdmissionService.
type admissionHandler struct {
	n *Node
}

var _ quoratev1connect.AdmissionServiceHandler = (*admissionHandler)(nil)

// Admit checks what it can without state, then has the leader decide through
// the log: locally when this node leads, else by forwarding.
func (h *admissionHandler) Admit(ctx context.Context, req *connect.Request[quoratev1.AdmitRequest]) (*connect.Response[quoratev1.AdmitResponse], error) {
	n := h.n
	m := req.Msg
	cost := int64(1)
	if m.Cost != nil {
		cost = m.GetCost()
	}
	if m.GetPolicy() == "" {
		return nil, n.toConnectError(&admission.FieldError{Field: "policy", Reason: "must not be empty", Err: admission.ErrInvalidRequest})
	}
	if err := admission.CheckKeyCost(m.GetKey(), cost); err != nil {
		return nil, n.toConnectError(err)
	}
	if err := checkRequestID(m.GetCaller(), m.GetRequestId()); err != nil {
		return nil, n.toConnectError(err)
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()

	var out *quoratev1.AdmitResponse
	err := n.onLeader(ctx, routing{forwarded: req.Header().Get(forwardedHeader) != "", idempotent: m.GetRequestId() != ""},
		func(ctx context.Context) error {
			res, err := n.propose(ctx, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Admit{Admit: &raftcmdv1.Admit{
				Policy: m.GetPolicy(), Key: m.GetKey(), Cost: cost, RequestId: m.GetRequestId(), Caller: m.GetCaller(),
			}}})
			if err != nil {
				return err
			}
			out = admitResponse(res.(*fsm.AdmitResult))
			return nil
		},
		func(ctx context.Context, baseURL string) error {
			fwd := connect.NewRequest(m)
			fwd.Header().Set(forwardedHeader, n.cfg.ID)
			resp, err := n.peers.get(baseURL).admission.Admit(ctx, fwd)
			if err != nil {
				return err
			}
			out = resp.Msg
			return nil
		})
	if err != nil {
		return nil, n.toConnectError(err)
	}
	return connect.NewResponse(out), nil
}

func admitResponse(r *fsm.AdmitResult) *quoratev1.AdmitResponse {
	d := r.Decision
	return &quoratev1.AdmitResponse{
		Allowed:       d.Allowed,
		Limit:         d.Limit,
		Remaining:     d.Remaining,
		ResetAfter:    durationpb.New(d.ResetAfter),
		RetryAfter:    durationpb.New(d.RetryAfter),
		PolicyVersion: r.PolicyVersion,
		DecidedAt:     timestamppb.New(time.Unix(0, r.DecidedAt).UTC()),
		Duplicate:     r.Duplicate,
	}
}

// checkRequestID checks the dedupe identity of a request. Both parts may be
// empty (an empty request_id is not deduplicated).
func checkRequestID(caller, requestID string) error {
	switch {
	case len(caller) > dedupe.MaxCallerBytes:
		return &admission.FieldError{Field: "caller", Reason: fmt.Sprintf("must be at most %d bytes (got %d)", dedupe.MaxCallerBytes, len(caller)), Err: admission.ErrInvalidRequest}
	case len(requestID) > dedupe.MaxRequestIDBytes:
		return &admission.FieldError{Field: "request_id", Reason: fmt.Sprintf("must be at most %d bytes (got %d)", dedupe.MaxRequestIDBytes, len(requestID)), Err: admission.ErrInvalidRequest}
	}
	return nil
}
