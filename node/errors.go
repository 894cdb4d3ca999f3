package node

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/lease"
	"github.com/quorate/quorate/node/internal/control"
	"github.com/quorate/quorate/node/internal/engine"
	"github.com/quorate/quorate/node/internal/local"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// toConnectError is Quorate's one table from errors to Connect codes
// (DESIGN.md §6). Being over the limit is not an error: it is an OK answer
// with allowed=false. An error that is already a Connect error (the leader's
// answer to a forwarded call) passes through unchanged.
//
// The message is what the client reads after the code, in its terms: the
// errors it maps carry no package prefix, name request IDs as the caller
// sent them (dedupe.SentRequestID) and times in RFC 3339, and a message
// does not repeat what its code says (saidByCode).
func (n *Node) toConnectError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	var fe *admission.FieldError
	switch {
	case errors.As(err, &fe):
		return engine.WithDetail(connect.NewError(connect.CodeInvalidArgument, err),
			&quoratev1.FieldViolation{Field: fe.Field, Description: fe.Reason})
	case errors.Is(err, admission.ErrInvalidPolicy), errors.Is(err, admission.ErrInvalidRequest):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, fsm.ErrUnknownPolicy), errors.Is(err, fsm.ErrNothingToRefund), errors.Is(err, fsm.ErrNoReservation):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, fsm.ErrNoPlan):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, fsm.ErrNotAdmitted), errors.Is(err, lease.ErrStale),
		errors.Is(err, control.ErrNodeHoldsReplicas), errors.Is(err, control.ErrNodeLive), errors.Is(err, control.ErrNotTheNode), errors.Is(err, control.ErrOtherCluster),
		errors.Is(err, fsm.ErrPlanRunning), errors.Is(err, fsm.ErrPlanNotCancellable), errors.Is(err, engine.ErrUnplanned),
		errors.Is(err, fsm.ErrNotMetaGroup), errors.Is(err, fsm.ErrGrantSeq), errors.Is(err, local.ErrDecidedLocally):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, fsm.ErrImportRefused), errors.Is(err, fsm.ErrPlanConflict):
		return connect.NewError(connect.CodeAborted, err)
	case errors.Is(err, fsm.ErrNotOwnedYet), errors.Is(err, fsm.ErrNotFrozen), errors.Is(err, fsm.ErrSlotMoving):
		return connect.NewError(connect.CodeUnavailable, err)
	case errors.Is(err, fsm.ErrTooManyPolicies):
		return engine.WithDetail(connect.NewError(connect.CodeResourceExhausted, err),
			&quoratev1.FieldViolation{Field: "policies", Description: err.Error()})
	case errors.Is(err, fsm.ErrGroupFull), errors.Is(err, fsm.ErrDedupeFull), errors.Is(err, ErrRequestTooLarge), errors.Is(err, fsm.ErrTooManyGrants):
		return connect.NewError(connect.CodeResourceExhausted, err)
	case errors.Is(err, engine.ErrOutcomeUnknown):
		return engine.WithDetail(connect.NewError(connect.CodeUnavailable, err),
			&quoratev1.OutcomeUnknown{Reason: err.Error()})
	case errors.Is(err, engine.ErrNotLeader):
		addr, id := n.engine.Leader()
		return engine.WithDetail(connect.NewError(connect.CodeUnavailable, err),
			&quoratev1.NotLeader{LeaderId: id, LeaderAddr: addr})
	case errors.Is(err, engine.ErrNotProposed):
		return connect.NewError(connect.CodeUnavailable, err)
	case errors.Is(err, ErrInvalidConfig):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, access.ErrUnauthenticated):
		return connect.NewError(connect.CodeUnauthenticated, saidByCode(err, access.ErrUnauthenticated))
	case errors.Is(err, access.ErrPermissionDenied):
		return connect.NewError(connect.CodePermissionDenied, saidByCode(err, access.ErrPermissionDenied))
	case errors.Is(err, ErrAdminElsewhere):
		return connect.NewError(connect.CodeUnimplemented, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	default:
		return connect.NewError(connect.CodeInternal, err)
	}
}

// saidByCode returns err reading without the text of sentinel at its start,
// which only repeats the Connect code (access's "unauthenticated: …" under
// code unauthenticated); it still wraps err.
func saidByCode(err, sentinel error) error {
	msg, ok := strings.CutPrefix(err.Error(), sentinel.Error()+": ")
	if !ok {
		return err
	}
	return &codeSaidError{msg: msg, err: err}
}

// codeSaidError is an error whose code says what its text leaves out.
type codeSaidError struct {
	msg string
	err error
}

func (e *codeSaidError) Error() string { return e.msg }
func (e *codeSaidError) Unwrap() error { return e.err }
