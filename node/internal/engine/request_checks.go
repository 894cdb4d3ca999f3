package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

var (
	// ErrNotProposed is returned when a command was certainly not applied:
	// there was no leader, or the node asked was not the leader, within the
	// request's deadline. Retrying is safe.
	ErrNotProposed = errors.New("not proposed")
	// ErrNotLeader is returned by a node asked to decide as leader (a
	// forwarded request) that is not the leader. It wraps ErrNotProposed.
	ErrNotLeader = fmt.Errorf("%w: not the leader", ErrNotProposed)
	// ErrOutcomeUnknown is returned when a command may or may not have been
	// applied: leadership was lost after it was proposed, the deadline passed
	// while it was committing, or the leader it was forwarded to failed
	// mid-call. Only a retry with the same request ID is safe.
	ErrOutcomeUnknown = errors.New("outcome unknown")
)

// BadRequest is the error of a request whose field is wrong: reason, in
// the caller's terms (format and args), an admission.FieldError wrapping
// admission.ErrInvalidRequest.
func BadRequest(field, format string, args ...any) error {
	return &admission.FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Err: admission.ErrInvalidRequest}
}

// ForwardedHeader marks a request forwarded by another node to this one as
// leader; such a request is never forwarded again.
const ForwardedHeader = "Quorate-Forwarded-By"

// LeaderHeader is set on the response to a data call this node
// forwarded because another node leads the key's group: its value is that
// leader's node ID (one value per leader for an AdmitBatch), telling a
// client that routes by AdmissionService.Routes that its routes are stale.
const LeaderHeader = "Quorate-Leader"

// knowPolicies brings the group of d (led here) to know every policy env
// names, or returns fsm.ErrUnknownPolicy when the cluster does not have
// one, or ErrNotProposed when it could not tell now. It costs two map
// lookups when the group has the policies.
func (n *Engine) knowPolicies(ctx context.Context, d Dest, env *raftcmdv1.Envelope) error {
	names, caller, requestID := policyNames(env)
	if _, missing := d.Replica.FSM.MissingPolicy(names); !missing {
		return nil
	}
	// The policy may be newer than this node's meta replica: catch up
	// with the meta leader first (a read index), and with this group (a
	// record of the request ID acknowledged by an earlier leader).
	serr := n.CatchUpMeta(ctx)
	if serr == nil && requestID != "" {
		serr = n.CaughtUp(ctx, d.Replica)
	}
	if serr == nil {
		if requestID != "" && d.Replica.FSM.Recorded(caller, requestID) {
			return nil
		}
		if name, missing := n.meta.FSM.MissingPolicy(names); missing {
			return fmt.Errorf("%w %s", fsm.ErrUnknownPolicy, admission.Quote(name))
		}
		if d.ID != shard.MetaGroup {
			serr = n.SyncPolicies(ctx, d.Replica)
		}
	}
	if serr != nil {
		// Nothing was applied, and the group could not be brought up to
		// date now (a leader change, a leadership transfer): retry rather
		// than answer that the policy does not exist.
		return fmt.Errorf("%w: copying the policy table: %v", ErrNotProposed, serr)
	}
	return nil
}

// policyNames returns the policies a command names, and its request ID.
func policyNames(env *raftcmdv1.Envelope) (names []string, caller, requestID string) {
	switch b := env.GetBody().(type) {
	case *raftcmdv1.Envelope_Admit:
		names = append(make([]string, 0, 1+len(b.Admit.GetAlso())), b.Admit.GetPolicy())
		for _, c := range b.Admit.GetAlso() {
			names = append(names, c.GetPolicy())
		}
		return names, b.Admit.GetCaller(), b.Admit.GetRequestId()
	case *raftcmdv1.Envelope_Peek:
		return []string{b.Peek.GetPolicy()}, "", ""
	case *raftcmdv1.Envelope_Reserve:
		return []string{b.Reserve.GetPolicy()}, b.Reserve.GetCaller(), b.Reserve.GetRequestId()
	case *raftcmdv1.Envelope_Lease:
		names = []string{b.Lease.GetPolicy()}
		if rp := b.Lease.GetReservePolicy(); rp != "" {
			names = append(names, rp)
		}
		return names, b.Lease.GetCaller(), b.Lease.GetRequestId()
	}
	return nil, "", ""
}

// Leader returns the Leader's API address (empty when unknown or not yet
// registered) and ID.
func (n *Engine) Leader() (apiAddr, id string) {
	_, lid := n.meta.Raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	m, _ := n.meta.FSM.Node(string(lid))
	return m.APIAddr, string(lid)
}

// classifyRemote sorts the error of a call forwarded to the leader into
// the engine's three kinds: the leader's own answer (a wire error) passes
// through, final, except that "not leader" means not proposed and an
// OutcomeUnknown answer wraps ErrOutcomeUnknown (toConnectError still
// passes the leader's error on as it is); a call that never reached the
// leader was not proposed; any other failure of the call leaves the outcome
// unknown. The answers a forwarded AdmitBatch carries for each item are
// sorted by batchResultAnswer instead.
func classifyRemote(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) && connect.IsWireError(ce) {
		if ce.Code() == connect.CodeUnavailable {
			if _, notLeader := ErrorDetail[*quoratev1.NotLeader](ce); notLeader {
				return fmt.Errorf("%w: %v", ErrNotProposed, ce)
			}
			if IsOutcomeUnknown(ce) {
				return fmt.Errorf("%w: %w", ErrOutcomeUnknown, ce)
			}
		}
		return ce
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%w: leader unreachable: %v", ErrNotProposed, err)
	}
	return fmt.Errorf("%w: forwarding to the leader: %v", ErrOutcomeUnknown, err)
}

// RequestContext applies the server's RequestTimeout to ctx and keeps a
// margin before the caller's own deadline, so that the server still answers
// — with what it knows, e.g. OutcomeUnknown — before the caller gives up.
func (n *Engine) RequestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	timeout := n.cfg.RequestTimeout
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d)
		margin := min(max(left/20, 5*time.Millisecond), 100*time.Millisecond)
		timeout = min(timeout, left-margin)
	}
	return context.WithTimeout(ctx, timeout)
}

// ErrorDetail returns the first detail of type T carried by err's Connect
// error, if any.
func ErrorDetail[T proto.Message](err error) (T, bool) {
	var zero T
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return zero, false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if t, ok := v.(T); ok {
				return t, true
			}
		}
	}
	return zero, false
}

// IsOutcomeUnknown reports whether err (a Connect error from a Quorate node)
// carries the OutcomeUnknown detail: the request may or may not have been
// applied, and only a retry with the same request ID is safe.
func IsOutcomeUnknown(err error) bool {
	_, ok := ErrorDetail[*quoratev1.OutcomeUnknown](err)
	return ok
}

// WithDetail adds m to ce as a detail.
func WithDetail(ce *connect.Error, m proto.Message) *connect.Error {
	if d, err := connect.NewErrorDetail(m); err == nil {
		ce.AddDetail(d)
	}
	return ce
}
