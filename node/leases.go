package node

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/lease"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// leaseHandler serves quorate.v1.LeaseService.
type leaseHandler struct {
	n *Node
}

var _ quoratev1connect.LeaseServiceHandler = (*leaseHandler)(nil)

// leaseID names a lease: its policy, key and fencing token, so that any node
// can route Renew and Release to the key without an index (and it stays
// valid when the key's slot moves to another group).
func leaseID(policy, key string, token int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(policy + "\x00" + key + "\x00" + strconv.FormatInt(token, 10)))
}

// parseLeaseID reverses leaseID and checks that the request's fencing token
// is the lease's. A lease ID that AcquireLease cannot have made is
// invalid_argument; a token that is not the lease's is not its holder's,
// refused like a stale token (lease.ErrStale: failed_precondition).
func parseLeaseID(id string, token int64) (policy, key string, err error) {
	b, derr := base64.RawURLEncoding.DecodeString(id)
	parts := strings.Split(string(b), "\x00")
	if id == "" || derr != nil || len(parts) != 3 {
		return "", "", badRequest("lease_id", "is not a lease ID from AcquireLease")
	}
	if token < 1 {
		return "", "", badRequest("fencing_token", "must be a token from AcquireLease (got %d)", token)
	}
	t, perr := strconv.ParseInt(parts[2], 10, 64)
	if perr != nil || t < 1 {
		return "", "", badRequest("lease_id", "is not a lease ID from AcquireLease")
	}
	if t != token {
		return "", "", fmt.Errorf("%w: fencing_token %d is not the token of lease %s", lease.ErrStale, token, admission.Quote(id))
	}
	return parts[0], parts[1], nil
}

func (h *leaseHandler) AcquireLease(ctx context.Context, req *connect.Request[quoratev1.AcquireLeaseRequest]) (*connect.Response[quoratev1.AcquireLeaseResponse], error) {
	n := h.n
	m := req.Msg
	op := &raftcmdv1.LeaseOp{Kind: raftcmdv1.LeaseOp_KIND_ACQUIRE, Policy: m.GetPolicy(), Key: m.GetKey(),
		RequestId: m.GetRequestId(), Caller: m.GetCaller(),
		ReservePolicy: m.GetReservePolicy(), ReserveEstimate: m.GetReserveEstimate()}
	if err := checkLeaseOp(op, m.GetTtl(), true); err != nil {
		return nil, n.toConnectError(err)
	}
	switch {
	case op.GetReservePolicy() != "" && op.GetReserveEstimate() < 1:
		return nil, n.toConnectError(badRequest("reserve_estimate", "must be at least 1 with reserve_policy (got %d)", op.GetReserveEstimate()))
	case op.GetReservePolicy() == "" && op.GetReserveEstimate() != 0:
		return nil, n.toConnectError(badRequest("reserve_policy", "must name a rate or quota policy when reserve_estimate is set"))
	}
	wait, err := durationField("max_wait", m.GetMaxWait(), 0, MaxWait)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	maxWait := time.Duration(wait)
	return leaderCall(ctx, n, routing{data: true, key: op.GetKey(), idempotent: op.GetRequestId() != ""}, req,
		func(ctx context.Context, d dest) (*quoratev1.AcquireLeaseResponse, error) {
			var r *fsm.LeaseResult
			waited, err := n.waiters.await(ctx, stateKeyOf(op), maxWait, func(ctx context.Context) (bool, time.Duration, error) {
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
				out.LeaseId = leaseID(op.GetPolicy(), op.GetKey(), r.Lease.Token)
				out.FencingToken, out.ExpiresAt = r.Lease.Token, unixTime(r.Lease.ExpiresAt)
			}
			return out, nil
		},
		func(ctx context.Context, p *peerClient, fwd *connect.Request[quoratev1.AcquireLeaseRequest]) (*connect.Response[quoratev1.AcquireLeaseResponse], error) {
			return p.lease.AcquireLease(ctx, fwd)
		})
}

func (h *leaseHandler) RenewLease(ctx context.Context, req *connect.Request[quoratev1.RenewLeaseRequest]) (*connect.Response[quoratev1.RenewLeaseResponse], error) {
	n := h.n
	m := req.Msg
	policy, key, err := parseLeaseID(m.GetLeaseId(), m.GetFencingToken())
	if err != nil {
		return nil, n.toConnectError(err)
	}
	op := &raftcmdv1.LeaseOp{Kind: raftcmdv1.LeaseOp_KIND_RENEW, Policy: policy, Key: key, Token: m.GetFencingToken(),
		RequestId: m.GetRequestId(), Caller: m.GetCaller()}
	if err := checkLeaseOp(op, m.GetTtl(), false); err != nil {
		return nil, n.toConnectError(err)
	}
	// Renewing twice only extends the same lease.
	return commandCall(ctx, n, routing{data: true, key: key, idempotent: true}, req,
		&raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Lease{Lease: op}},
		func(res any) *quoratev1.RenewLeaseResponse {
			r := res.(*fsm.LeaseResult)
			return &quoratev1.RenewLeaseResponse{LeaseId: m.GetLeaseId(), FencingToken: r.Lease.Token,
				ExpiresAt: unixTime(r.Lease.ExpiresAt), DecidedAt: unixTime(r.DecidedAt), Duplicate: r.Duplicate}
		},
		func(ctx context.Context, p *peerClient, fwd *connect.Request[quoratev1.RenewLeaseRequest]) (*connect.Response[quoratev1.RenewLeaseResponse], error) {
			return p.lease.RenewLease(ctx, fwd)
		})
}

func (h *leaseHandler) ReleaseLease(ctx context.Context, req *connect.Request[quoratev1.ReleaseLeaseRequest]) (*connect.Response[quoratev1.ReleaseLeaseResponse], error) {
	n := h.n
	m := req.Msg
	policy, key, err := parseLeaseID(m.GetLeaseId(), m.GetFencingToken())
	if err != nil {
		return nil, n.toConnectError(err)
	}
	op := &raftcmdv1.LeaseOp{Kind: raftcmdv1.LeaseOp_KIND_RELEASE, Policy: policy, Key: key, Token: m.GetFencingToken(),
		RequestId: m.GetRequestId(), Caller: m.GetCaller(), ActualCost: m.ActualCost}
	if err := checkLeaseOp(op, nil, false); err != nil {
		return nil, n.toConnectError(err)
	}
	// Without a request ID a retry of a release that applied would be told
	// the token is stale: only requests with one are retried by the server.
	return leaderCall(ctx, n, routing{data: true, key: op.GetKey(), idempotent: op.GetRequestId() != ""}, req,
		func(ctx context.Context, d dest) (*quoratev1.ReleaseLeaseResponse, error) {
			r, err := n.proposeLease(ctx, d, op)
			if err != nil {
				return nil, err
			}
			n.waiters.notify(stateKeyOf(op))
			return &quoratev1.ReleaseLeaseResponse{DecidedAt: unixTime(r.DecidedAt), Duplicate: r.Duplicate,
				Charged: r.Charged, ReleasedUnits: r.Released, Over: r.Over}, nil
		},
		func(ctx context.Context, p *peerClient, fwd *connect.Request[quoratev1.ReleaseLeaseRequest]) (*connect.Response[quoratev1.ReleaseLeaseResponse], error) {
			return p.lease.ReleaseLease(ctx, fwd)
		})
}

func (h *leaseHandler) CheckFence(ctx context.Context, req *connect.Request[quoratev1.CheckFenceRequest]) (*connect.Response[quoratev1.CheckFenceResponse], error) {
	n := h.n
	m := req.Msg
	op := &raftcmdv1.LeaseOp{Kind: raftcmdv1.LeaseOp_KIND_CHECK, Policy: m.GetPolicy(), Key: m.GetKey(), Token: m.GetFencingToken()}
	if err := checkLeaseOp(op, nil, false); err != nil {
		return nil, n.toConnectError(err)
	}
	return commandCall(ctx, n, routing{data: true, key: op.GetKey(), idempotent: true}, req,
		&raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Lease{Lease: op}},
		func(res any) *quoratev1.CheckFenceResponse {
			r := res.(*fsm.LeaseResult)
			out := &quoratev1.CheckFenceResponse{Held: r.Allowed, DecidedAt: unixTime(r.DecidedAt)}
			if r.Allowed {
				out.ExpiresAt = unixTime(r.Lease.ExpiresAt)
			}
			return out
		},
		func(ctx context.Context, p *peerClient, fwd *connect.Request[quoratev1.CheckFenceRequest]) (*connect.Response[quoratev1.CheckFenceResponse], error) {
			return p.lease.CheckFence(ctx, fwd)
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
		return badRequest("fencing_token", "must be a token from AcquireLease (got %d)", op.GetToken())
	}
	ns, err := durationField("ttl", ttl, admission.MinLeaseTTL, admission.MaxLeaseTTL)
	if err != nil {
		return err
	}
	op.TtlNanos = ns
	return checkRequestID(op.GetCaller(), op.GetRequestId())
}

// proposeLease proposes op to d's group, led here.
func (n *Node) proposeLease(ctx context.Context, d dest, op *raftcmdv1.LeaseOp) (*fsm.LeaseResult, error) {
	res, err := n.proposeTo(ctx, d, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Lease{Lease: op}})
	if err != nil {
		return nil, err
	}
	return res.(*fsm.LeaseResult), nil
}

func unixTime(ns int64) *timestamppb.Timestamp { return timestamppb.New(time.Unix(0, ns).UTC()) }

// stateKeyOf is the state key of a lease operation's policy and key.
func stateKeyOf(op *raftcmdv1.LeaseOp) string { return fsm.BucketKey(op.GetPolicy(), op.GetKey()) }
