package node

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
	"github.com/quorate/quorate/shard"
)

// MaxWait bounds AdmitRequest.max_wait.
const MaxWait = time.Minute

// admissionHandler serves quorate.v1.AdmissionService.
type admissionHandler struct {
	n *Node
}

var _ quoratev1connect.AdmissionServiceHandler = (*admissionHandler)(nil)

// serve runs r, the request req of a unary handler, on the leader of its
// group through the request engine (engine.Run), within the request's
// deadline (RequestContext): forwarded, req goes to the leader by remote,
// marked with this node's ID and its caller's identity. Errors go through
// the node's one error table.
func serve[Req, Resp any](ctx context.Context, n *Node, req *connect.Request[Req], r engine.Request[Resp],
	remote func(context.Context, *engine.PeerClient, *connect.Request[Req]) (*connect.Response[Resp], error),
) (*connect.Response[Resp], error) {
	out, err := run(ctx, n, req.Msg, req.Header().Get(engine.ForwardedHeader) != "", r, remote)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}

// run is serve of a request's message msg (forwarded: from another node),
// for a handler and for a call the node makes itself (its grants'), whose
// identity is then ctx's.
func run[Req, Resp any](ctx context.Context, n *Node, msg *Req, forwarded bool, r engine.Request[Resp],
	remote func(context.Context, *engine.PeerClient, *connect.Request[Req]) (*connect.Response[Resp], error),
) (*Resp, error) {
	ctx, cancel := n.engine.RequestContext(ctx)
	defer cancel()
	r.Route.Forwarded = forwarded
	r.Forward = func(ctx context.Context, p *engine.PeerClient) (*Resp, error) {
		fwd := connect.NewRequest(msg)
		fwd.Header().Set(engine.ForwardedHeader, n.cfg.ID)
		engine.SetForwardedIdentity(ctx, fwd.Header())
		resp, err := remote(ctx, p, fwd)
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	out, leader, err := engine.Run(ctx, n.engine, r)
	markForwarded(ctx, r.Route, leader)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	return out, nil
}

// markForwarded sets the Quorate-Leader response header (leaderHeader)
// of the unary data call of ctx, the handler's, routed by rt, when its
// last attempt forwarded it to another node, leader: on an answer and on
// an error alike (a leader's error passed on is a wire error, whose own
// metadata Connect does not send again).
func markForwarded(ctx context.Context, rt engine.Routing, leader string) {
	if !rt.Data || leader == "" {
		return
	}
	if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
		info.ResponseHeader().Set(engine.LeaderHeader, leader)
	}
}

// Admit checks what it can without state, then has the leader decide through
// the log: locally when this node leads, else by forwarding.
func (h *admissionHandler) Admit(ctx context.Context, req *connect.Request[quoratev1.AdmitRequest]) (*connect.Response[quoratev1.AdmitResponse], error) {
	resp, err := admit(ctx, h.n, req.Msg, req.Header().Get(engine.ForwardedHeader) != "")
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// admit decides m, an Admit (forwarded: from another node), as the Admit
// handler and Envoy's service do: from a grant the node holds when it can
// (never a forwarded one: the node that forwarded it could not), else
// through the log. Its errors are Connect errors of the node's table.
func admit(ctx context.Context, n *Node, m *quoratev1.AdmitRequest, forwarded bool) (*quoratev1.AdmitResponse, error) {
	cmd, err := admitCommand(m)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	if plantedLocalRead && !forwarded {
		if out, ok := plantedLocalDecision(n, m); ok {
			bg := proto.Clone(m).(*quoratev1.AdmitRequest)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RequestTimeout)
				defer cancel()
				_, _ = decideAdmit(ctx, n, bg, cmd, false)
			}()
			return out, nil
		}
	}
	if !forwarded {
		// A hot key of a policy with local decisions: from the grant this
		// node holds for it (package local), else through the log.
		resp, err := n.local.Admit(ctx, m)
		if err != nil {
			return nil, n.toConnectError(err)
		}
		if resp != nil {
			return resp, nil
		}
	}
	return decideAdmit(ctx, n, m, cmd, forwarded)
}

// decideAdmit decides cmd, m checked, through the leader's log: an
// AdmitBatch of one (Engine.Decide). Forwarded, it shares AdmitBatch calls
// with the others forwarded to the same leader (package engine's
// forward.go).
func decideAdmit(ctx context.Context, n *Node, m *quoratev1.AdmitRequest, cmd *raftcmdv1.Admit, forwarded bool) (*quoratev1.AdmitResponse, error) {
	ctx, cancel := n.engine.RequestContext(ctx)
	defer cancel()
	it := admitItem(m, cmd, forwarded)
	n.engine.Decide(ctx, []*engine.Item{it})
	markForwarded(ctx, it.Route, it.Away.ViaLeader)
	resp, err := admitAnswer(it)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	return resp, nil
}

// admitCommand checks an AdmitRequest without state and builds its command:
// every check's policy, key and cost, that all keys share a hash tag, the
// request ID and the pacing wait.
func admitCommand(m *quoratev1.AdmitRequest) (*raftcmdv1.Admit, error) {
	first, err := checkCommand("", &quoratev1.Check{Policy: m.GetPolicy(), Key: m.GetKey(), Cost: m.Cost})
	if err != nil {
		return nil, err
	}
	if err := checkRequestID(m.GetCaller(), m.GetRequestId()); err != nil {
		return nil, err
	}
	if n := 1 + len(m.GetAlso()); n > admission.MaxChecks {
		return nil, engine.BadRequest("also", "at most %d checks in one request (got %d)", admission.MaxChecks, n)
	}
	cmd := &raftcmdv1.Admit{Policy: first.Policy, Key: first.Key, Cost: first.Cost, RequestId: m.GetRequestId(), Caller: m.GetCaller()}
	tag := shard.HashTag(first.Key)
	for i, c := range m.GetAlso() {
		field := fmt.Sprintf("also[%d].", i)
		ch, err := checkCommand(field, c)
		if err != nil {
			return nil, err
		}
		if t := shard.HashTag(ch.Key); t != tag {
			return nil, engine.BadRequest(field+"key", "%s has hash tag %s but key %s has %s: the keys of one request must share a hash tag, "+
				"so put the common part in braces in every key, e.g. {tenant:acme}:api and {tenant:acme}:ip:1.2.3.4", admission.Quote(ch.Key), admission.Quote(t), admission.Quote(first.Key), admission.Quote(tag))
		}
		cmd.Also = append(cmd.Also, ch)
	}
	wait, err := durationField("max_wait", m.GetMaxWait(), 0, MaxWait)
	if err != nil {
		return nil, err
	}
	cmd.MaxWaitNanos = wait
	return cmd, nil
}

// checkCommand checks one (policy, key, cost) without state; field prefixes
// the names in errors ("also[0].").
func checkCommand(field string, c *quoratev1.Check) (*raftcmdv1.Check, error) {
	cost := int64(1)
	if c.Cost != nil {
		cost = c.GetCost()
	}
	if err := checkPolicyName(field+"policy", c.GetPolicy()); err != nil {
		return nil, err
	}
	if err := admission.CheckKeyCost(c.GetKey(), cost); err != nil {
		return nil, admission.Nested(field, err)
	}
	return &raftcmdv1.Check{Policy: c.GetPolicy(), Key: c.GetKey(), Cost: cost}, nil
}

// durationField checks an optional duration of a request against
// [lo, hi], naming field, and returns it in nanoseconds (0 when unset).
func durationField(field string, d *durationpb.Duration, lo, hi time.Duration) (int64, error) {
	if d == nil {
		return 0, nil
	}
	if v := d.AsDuration(); d.CheckValid() != nil || v < lo || v > hi {
		return 0, engine.BadRequest(field, "must be between %v and %v (got %v)", lo, hi, v)
	}
	return int64(d.AsDuration()), nil
}

// checkPolicyName refuses, naming field, a policy name that no policy can
// have: empty or longer than admission.MaxNameBytes. Such a name never
// reaches the log.
func checkPolicyName(field, name string) error {
	switch {
	case name == "":
		return engine.BadRequest(field, "must not be empty")
	case len(name) > admission.MaxNameBytes:
		return engine.BadRequest(field, "must be at most %d bytes (got %d)", admission.MaxNameBytes, len(name))
	}
	return nil
}

// Peek reads a key's state through the log, changing nothing.
func (h *admissionHandler) Peek(ctx context.Context, req *connect.Request[quoratev1.PeekRequest]) (*connect.Response[quoratev1.PeekResponse], error) {
	n := h.n
	m := req.Msg
	if _, err := checkCommand("", &quoratev1.Check{Policy: m.GetPolicy(), Key: m.GetKey()}); err != nil {
		return nil, n.toConnectError(err)
	}
	env := &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Peek{Peek: &raftcmdv1.Peek{Policy: m.GetPolicy(), Key: m.GetKey()}}}
	return serve(ctx, n, req, engine.Request[quoratev1.PeekResponse]{Route: engine.Routing{Data: true, Key: m.GetKey(), Idempotent: true},
		Command: env,
		Answer: engine.AnswerOf(func(r *fsm.PeekResult) *quoratev1.PeekResponse {
			d := r.Decision
			return &quoratev1.PeekResponse{
				WouldAllow: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
				ResetAfter: durationpb.New(d.ResetAfter), RetryAfter: durationpb.New(d.RetryAfter),
				PolicyVersion: r.PolicyVersion, DecidedAt: timestamppb.New(time.Unix(0, r.At).UTC()),
			}
		})},
		func(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[quoratev1.PeekRequest]) (*connect.Response[quoratev1.PeekResponse], error) {
			return p.Admission.Peek(ctx, fwd)
		})
}

// Refund gives back, once, what a recorded admitted request spent.
func (h *admissionHandler) Refund(ctx context.Context, req *connect.Request[quoratev1.RefundRequest]) (*connect.Response[quoratev1.RefundResponse], error) {
	n := h.n
	m := req.Msg
	if m.GetRequestId() == "" {
		return nil, n.toConnectError(engine.BadRequest("request_id", "must not be empty: it names the admitted request to refund"))
	}
	if err := checkRequestID(m.GetCaller(), m.GetRequestId()); err != nil {
		return nil, n.toConnectError(err)
	}
	if m.GetKey() == "" {
		return nil, n.toConnectError(engine.BadRequest("key", "must name the refunded request's key (its first check's): a request is its caller, request_id and key"))
	}
	if err := admission.CheckKeyCost(m.GetKey(), 1); err != nil {
		return nil, n.toConnectError(err)
	}
	if err := n.local.CheckRefund(m.GetCaller(), m.GetRequestId(), m.GetKey()); err != nil {
		return nil, n.toConnectError(err)
	}
	// A repeated refund answers refunded=false.
	env := &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Refund{Refund: &raftcmdv1.Refund{
		Caller: m.GetCaller(), RequestId: m.GetRequestId(), Key: m.GetKey()}}}
	return serve(ctx, n, req, engine.Request[quoratev1.RefundResponse]{Route: engine.Routing{Data: true, Key: m.GetKey(), Idempotent: true},
		Command: env,
		Answer: engine.AnswerOf(func(r *fsm.RefundResult) *quoratev1.RefundResponse {
			return &quoratev1.RefundResponse{Refunded: r.Refunded, Cost: r.Cost, RefundedAt: timestamppb.New(time.Unix(0, r.RefundedAt).UTC())}
		})},
		func(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[quoratev1.RefundRequest]) (*connect.Response[quoratev1.RefundResponse], error) {
			return p.Admission.Refund(ctx, fwd)
		})
}

// admitResponse is the API's form of an Admit's result. Each check's
// window and quota (and the top ones, those of the check whose fields are
// on top) are what the FSM read of its policy with the result
// (fsm.CheckResult.Window, Quota): unset when the group's table no longer
// held the version decided with (a recorded answer after a policy change).
func admitResponse(r *fsm.AdmitResult) *quoratev1.AdmitResponse {
	d := r.Decision
	out := &quoratev1.AdmitResponse{
		Allowed:       d.Allowed,
		Limit:         d.Limit,
		Remaining:     d.Remaining,
		ResetAfter:    durationpb.New(d.ResetAfter),
		RetryAfter:    durationpb.New(d.RetryAfter),
		PolicyVersion: r.PolicyVersion,
		DecidedAt:     timestamppb.New(time.Unix(0, r.DecidedAt).UTC()),
		Duplicate:     r.Duplicate,
		Wait:          durationpb.New(r.Wait),
		ShadowDenied:  r.ShadowDenied,
	}
	if top := max(r.DeniedCheck, 0); top < len(r.Checks) {
		out.Window, out.Quota = windowOf(r.Checks[top].Window), r.Checks[top].Quota
	}
	if r.Multi {
		for _, c := range r.Checks {
			cd := c.Decision
			out.Checks = append(out.Checks, &quoratev1.CheckResult{
				Policy: c.Policy, Key: c.Key, Allowed: cd.Allowed, Limit: cd.Limit, Remaining: cd.Remaining,
				ResetAfter: durationpb.New(cd.ResetAfter), RetryAfter: durationpb.New(cd.RetryAfter),
				PolicyVersion: c.PolicyVersion, ShadowDenied: c.ShadowDenied, Window: windowOf(c.Window), Quota: c.Quota,
			})
		}
		if r.DeniedCheck >= 0 {
			i := int32(r.DeniedCheck)
			out.DeniedCheck = &i
		}
	}
	return out
}

// windowOf is a policy window as the API sends it: unset for none (a
// concurrency policy, which Admit does not decide).
func windowOf(w time.Duration) *durationpb.Duration {
	if w <= 0 {
		return nil
	}
	return durationpb.New(w)
}

// checkRequestID checks the dedupe identity of a request. Both parts may be
// empty (an empty request_id is not deduplicated).
func checkRequestID(caller, requestID string) error {
	switch {
	case len(caller) > dedupe.MaxCallerBytes:
		return engine.BadRequest("caller", "must be at most %d bytes (got %d)", dedupe.MaxCallerBytes, len(caller))
	case len(requestID) > dedupe.MaxRequestIDBytes:
		return engine.BadRequest("request_id", "must be at most %d bytes (got %d)", dedupe.MaxRequestIDBytes, len(requestID))
	}
	return nil
}

// Reserve holds an estimate of a rate or quota policy through the log.
func (h *admissionHandler) Reserve(ctx context.Context, req *connect.Request[quoratev1.ReserveRequest]) (*connect.Response[quoratev1.ReserveResponse], error) {
	n := h.n
	m := req.Msg
	if err := checkPolicyName("policy", m.GetPolicy()); err != nil {
		return nil, n.toConnectError(err)
	}
	if err := admission.CheckKeyCost(m.GetKey(), max(1, m.GetEstimate())); err != nil {
		return nil, n.toConnectError(err)
	}
	if m.GetEstimate() < 1 {
		return nil, n.toConnectError(engine.BadRequest("estimate", "must be at least 1 (got %d)", m.GetEstimate()))
	}
	if err := checkRequestID(m.GetCaller(), m.GetRequestId()); err != nil {
		return nil, n.toConnectError(err)
	}
	cmd := &raftcmdv1.Reserve{Policy: m.GetPolicy(), Key: m.GetKey(), Estimate: m.GetEstimate(), RequestId: m.GetRequestId(), Caller: m.GetCaller(),
		Secret: drawSecret()}
	ttl, err := durationField("ttl", m.GetTtl(), admission.MinLeaseTTL, admission.MaxLeaseTTL)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	cmd.TtlNanos = ttl
	return serve(ctx, n, req, engine.Request[quoratev1.ReserveResponse]{Route: engine.Routing{Data: true, Key: cmd.GetKey(), Idempotent: cmd.GetRequestId() != ""},
		Command: &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Reserve{Reserve: cmd}},
		Answer: engine.AnswerOf(func(r *fsm.ReserveResult) *quoratev1.ReserveResponse {
			out := &quoratev1.ReserveResponse{Allowed: r.Allowed, ReservationId: r.ReservationID, Limit: r.Decision.Limit,
				Remaining: r.Decision.Remaining, RetryAfter: durationpb.New(r.Decision.RetryAfter), PolicyVersion: r.PolicyVersion,
				DecidedAt: unixTime(r.DecidedAt), Duplicate: r.Duplicate}
			if r.Allowed {
				out.ExpiresAt = unixTime(r.ExpiresAt)
			}
			return out
		})},
		func(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[quoratev1.ReserveRequest]) (*connect.Response[quoratev1.ReserveResponse], error) {
			return p.Admission.Reserve(ctx, fwd)
		})
}

// Commit settles a reservation through the log.
func (h *admissionHandler) Commit(ctx context.Context, req *connect.Request[quoratev1.CommitRequest]) (*connect.Response[quoratev1.CommitResponse], error) {
	n := h.n
	m := req.Msg
	if fsm.ReservationKey(m.GetReservationId()) == "" {
		return nil, n.toConnectError(engine.BadRequest("reservation_id", "is not a reservation ID from Reserve"))
	}
	if m.GetActual() < 0 {
		return nil, n.toConnectError(engine.BadRequest("actual", "must be at least 0 (got %d)", m.GetActual()))
	}
	if err := checkRequestID(m.GetCaller(), m.GetRequestId()); err != nil {
		return nil, n.toConnectError(err)
	}
	cmd := &raftcmdv1.Commit{ReservationId: m.GetReservationId(), Actual: m.GetActual(), RequestId: m.GetRequestId(), Caller: m.GetCaller()}
	return serve(ctx, n, req, engine.Request[quoratev1.CommitResponse]{Route: engine.Routing{Data: true, Key: fsm.ReservationKey(cmd.GetReservationId()), Idempotent: cmd.GetRequestId() != ""},
		Command: &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Commit{Commit: cmd}},
		Answer: engine.AnswerOf(func(r *fsm.ReserveResult) *quoratev1.CommitResponse {
			return &quoratev1.CommitResponse{Charged: r.Charged, Released: r.Released, Over: r.Over,
				DecidedAt: unixTime(r.DecidedAt), Duplicate: r.Duplicate}
		})},
		func(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[quoratev1.CommitRequest]) (*connect.Response[quoratev1.CommitResponse], error) {
			return p.Admission.Commit(ctx, fwd)
		})
}
