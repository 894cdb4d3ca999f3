package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/lease"
	"github.com/quorate/quorate/node/internal/engine"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// leaseHandler serves quorate.v1.LeaseService.
type leaseHandler struct {
	n *Node
}

var _ quoratev1connect.LeaseServiceHandler = (*leaseHandler)(nil)

// parseLeaseID splits a lease ID (fsm.LeaseID) into the lease operation it
// names: policy, key, token and secret; the request's fencing token must be
// the lease's. A lease ID that AcquireLease cannot have made is
// invalid_argument; a token that is not the lease's is not its holder's,
// refused like a stale token (lease.ErrStale: failed_precondition). Whether
// the lease is the caller's, and the secret its own, the FSM decides: it
// refuses another holder as it refuses a lease that never existed.
func parseLeaseID(id string, token int64, kind raftcmdv1.LeaseOp_Kind) (*raftcmdv1.LeaseOp, error) {
	policy, key, t, secret, ok := fsm.ParseLeaseID(id)
	if !ok {
		return nil, engine.BadRequest("lease_id", "is not a lease ID from AcquireLease")
	}
	if token < 1 {
		return nil, engine.BadRequest("fencing_token", "must be a token from AcquireLease (got %d)", token)
	}
	if t != token {
		return nil, fmt.Errorf("%w: fencing_token %d is not the token of the lease of policy %s, key %s", lease.ErrStale, token, admission.Quote(policy), admission.Quote(key))
	}
	return &raftcmdv1.LeaseOp{Kind: kind, Policy: policy, Key: key, Token: t, Secret: secret[:]}, nil
}

// drawSecret returns the secret of a new lease or reservation: random
// bytes drawn here, on the node that proposes the command, so that Apply
// stays deterministic and no client chooses it.
func drawSecret() []byte {
	b := make([]byte, lease.SecretSize)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}

// drawJitter returns how far above the log time a new lease's token starts
// (lease.Claim): random, so that the token does not follow from the
// expiry a denial shows.
func drawJitter() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:])
}

func (h *leaseHandler) AcquireLease(ctx context.Context, req *connect.Request[quoratev1.AcquireLeaseRequest]) (*connect.Response[quoratev1.AcquireLeaseResponse], error) {
	n := h.n
	m := req.Msg
	op := &raftcmdv1.LeaseOp{Kind: raftcmdv1.LeaseOp_KIND_ACQUIRE, Policy: m.GetPolicy(), Key: m.GetKey(),
		RequestId: m.GetRequestId(), Caller: m.GetCaller(),
		ReservePolicy: m.GetReservePolicy(), ReserveEstimate: m.GetReserveEstimate(),
		Secret: drawSecret(), TokenJitter: drawJitter()}
	if err := checkLeaseOp(op, m.GetTtl(), true); err != nil {
		return nil, n.toConnectError(err)
	}
	switch {
	case op.GetReservePolicy() != "" && op.GetReserveEstimate() < 1:
		return nil, n.toConnectError(engine.BadRequest("reserve_estimate", "must be at least 1 with reserve_policy (got %d)", op.GetReserveEstimate()))
	case op.GetReservePolicy() == "" && op.GetReserveEstimate() != 0:
		return nil, n.toConnectError(engine.BadRequest("reserve_policy", "must name a rate or quota policy when reserve_estimate is set"))
	}
	wait, err := durationField("max_wait", m.GetMaxWait(), 0, MaxWait)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	maxWait := time.Duration(wait)
	return serve(ctx, n, req, engine.Request[quoratev1.AcquireLeaseResponse]{Route: engine.Routing{Data: true, Key: op.GetKey(), Idempotent: op.GetRequestId() != ""},
		Local: func(ctx context.Context, d engine.Dest) (*quoratev1.AcquireLeaseResponse, error) {
			var r *fsm.LeaseResult
			waited, err := n.waiters.Await(ctx, stateKeyOf(op), maxWait, func(ctx context.Context) (bool, time.Duration, error) {
				var err error
				if r, err = n.proposeLease(ctx, d, op); err != nil {
					return false, 0, err
				}
				return r.Allowed, r.RetryAfter, nil
			})
			if err != nil {
				return nil, err
			}
			out := &quoratev1.AcquireLeaseResponse{
				Waited:  durationpb.New(waited),
				Allowed: r.Allowed, Limit: r.Limit, Held: r.Held, RetryAfter: durationpb.New(r.RetryAfter),
				PolicyVersion: r.PolicyVersion, DecidedAt: unixTime(r.DecidedAt), Duplicate: r.Duplicate,
			}
			if r.Allowed {
				out.ReservationId = r.ReservationID
				// A retry's answer (duplicate) names the first attempt's
				// lease, with its secret: the record's, not this op's.
				out.LeaseId = fsm.LeaseID(op.GetPolicy(), op.GetKey(), r.Lease.Token, r.Lease.Holder.Secret)
				out.FencingToken, out.ExpiresAt = r.Lease.Token, unixTime(r.Lease.ExpiresAt)
			}
			return out, nil
		}},
		func(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[quoratev1.AcquireLeaseRequest]) (*connect.Response[quoratev1.AcquireLeaseResponse], error) {
			return p.Lease.AcquireLease(ctx, fwd)
		})
}

func (h *leaseHandler) RenewLease(ctx context.Context, req *connect.Request[quoratev1.RenewLeaseRequest]) (*connect.Response[quoratev1.RenewLeaseResponse], error) {
	n := h.n
	m := req.Msg
	op, err := parseLeaseID(m.GetLeaseId(), m.GetFencingToken(), raftcmdv1.LeaseOp_KIND_RENEW)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	op.RequestId, op.Caller = m.GetRequestId(), m.GetCaller()
	if err := checkLeaseOp(op, m.GetTtl(), false); err != nil {
		return nil, n.toConnectError(err)
	}
	// Renewing twice only extends the same lease.
	return serve(ctx, n, req, engine.Request[quoratev1.RenewLeaseResponse]{Route: engine.Routing{Data: true, Key: op.GetKey(), Idempotent: true},
		Command: &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Lease{Lease: op}},
		Answer: engine.AnswerOf(func(r *fsm.LeaseResult) *quoratev1.RenewLeaseResponse {
			return &quoratev1.RenewLeaseResponse{LeaseId: m.GetLeaseId(), FencingToken: r.Lease.Token,
				ExpiresAt: unixTime(r.Lease.ExpiresAt), DecidedAt: unixTime(r.DecidedAt), Duplicate: r.Duplicate}
		})},
		func(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[quoratev1.RenewLeaseRequest]) (*connect.Response[quoratev1.RenewLeaseResponse], error) {
			return p.Lease.RenewLease(ctx, fwd)
		})
}

func (h *leaseHandler) ReleaseLease(ctx context.Context, req *connect.Request[quoratev1.ReleaseLeaseRequest]) (*connect.Response[quoratev1.ReleaseLeaseResponse], error) {
	n := h.n
	m := req.Msg
	op, err := parseLeaseID(m.GetLeaseId(), m.GetFencingToken(), raftcmdv1.LeaseOp_KIND_RELEASE)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	op.RequestId, op.Caller, op.ActualCost = m.GetRequestId(), m.GetCaller(), m.ActualCost
	if err := checkLeaseOp(op, nil, false); err != nil {
		return nil, n.toConnectError(err)
	}
	// Without a request ID a retry of a release that applied would be told
	// the token is stale: only requests with one are retried by the server.
	return serve(ctx, n, req, engine.Request[quoratev1.ReleaseLeaseResponse]{Route: engine.Routing{Data: true, Key: op.GetKey(), Idempotent: op.GetRequestId() != ""},
		Local: func(ctx context.Context, d engine.Dest) (*quoratev1.ReleaseLeaseResponse, error) {
			r, err := n.proposeLease(ctx, d, op)
			if err != nil {
				return nil, err
			}
			n.waiters.Notify(stateKeyOf(op))
			return &quoratev1.ReleaseLeaseResponse{DecidedAt: unixTime(r.DecidedAt), Duplicate: r.Duplicate,
				Charged: r.Charged, ReleasedUnits: r.Released, Over: r.Over}, nil
		}},
		func(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[quoratev1.ReleaseLeaseRequest]) (*connect.Response[quoratev1.ReleaseLeaseResponse], error) {
			return p.Lease.ReleaseLease(ctx, fwd)
		})
}

func (h *leaseHandler) CheckFence(ctx context.Context, req *connect.Request[quoratev1.CheckFenceRequest]) (*connect.Response[quoratev1.CheckFenceResponse], error) {
	n := h.n
	m := req.Msg
	op, err := parseLeaseID(m.GetLeaseId(), m.GetFencingToken(), raftcmdv1.LeaseOp_KIND_CHECK)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	op.Caller = m.GetCaller()
	if err := checkLeaseOp(op, nil, false); err != nil {
		return nil, n.toConnectError(err)
	}
	return serve(ctx, n, req, engine.Request[quoratev1.CheckFenceResponse]{Route: engine.Routing{Data: true, Key: op.GetKey(), Idempotent: true},
		Command: &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Lease{Lease: op}},
		Answer: engine.AnswerOf(func(r *fsm.LeaseResult) *quoratev1.CheckFenceResponse {
			out := &quoratev1.CheckFenceResponse{Held: r.Allowed, DecidedAt: unixTime(r.DecidedAt)}
			if r.Allowed {
				out.ExpiresAt = unixTime(r.Lease.ExpiresAt)
			}
			return out
		})},
		func(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[quoratev1.CheckFenceRequest]) (*connect.Response[quoratev1.CheckFenceResponse], error) {
			return p.Lease.CheckFence(ctx, fwd)
		})
}

// checkLeaseOp checks a lease operation without state; ttl may be nil.
func checkLeaseOp(op *raftcmdv1.LeaseOp, ttl *durationpb.Duration, acquire bool) error {
	if err := checkPolicyName("policy", op.GetPolicy()); err != nil {
		return err
	}
	if rp := op.GetReservePolicy(); rp != "" {
		if err := checkPolicyName("reserve_policy", rp); err != nil {
			return err
		}
	}
	if err := admission.CheckKeyCost(op.GetKey(), 1); err != nil {
		return err
	}
	if !acquire && op.GetToken() < 1 {
		return engine.BadRequest("fencing_token", "must be a token from AcquireLease (got %d)", op.GetToken())
	}
	ns, err := durationField("ttl", ttl, admission.MinLeaseTTL, admission.MaxLeaseTTL)
	if err != nil {
		return err
	}
	op.TtlNanos = ns
	return checkRequestID(op.GetCaller(), op.GetRequestId())
}

// proposeLease proposes op to d's group, led here.
func (n *Node) proposeLease(ctx context.Context, d engine.Dest, op *raftcmdv1.LeaseOp) (*fsm.LeaseResult, error) {
	res, err := n.engine.ProposeTo(ctx, d, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Lease{Lease: op}})
	if err != nil {
		return nil, err
	}
	return res.(*fsm.LeaseResult), nil
}

func unixTime(ns int64) *timestamppb.Timestamp { return timestamppb.New(time.Unix(0, ns).UTC()) }

// stateKeyOf is the state key of a lease operation's policy and key.
func stateKeyOf(op *raftcmdv1.LeaseOp) string { return fsm.BucketKey(op.GetPolicy(), op.GetKey()) }
