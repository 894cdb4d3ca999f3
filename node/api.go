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

// leaderCall runs a unary request on the leader of its group (rt: a key's
// data group, or the meta group) through the request engine as a batch of
// one (decide): local, with the group's destination, when this node leads
// it, else the same request forwarded with remote. Errors go through the
// node's one error table.
func leaderCall[Req, Resp any](ctx context.Context, n *Node, rt engine.Routing, req *connect.Request[Req],
	local func(context.Context, engine.Dest) (*Resp, error),
	remote func(context.Context, *engine.PeerClient, *connect.Request[Req]) (*connect.Response[Resp], error),
) (*connect.Response[Resp], error) {
	var out *Resp
	it := &engine.Item{Route: rt, Local: func(ctx context.Context, d engine.Dest) (err error) {
		out, err = local(ctx, d)
		return err
	}}
	err := runCall(ctx, n, req, it, &out, remote)
	markForwarded(ctx, it)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	return connect.NewResponse(out), nil
}

// commandCall is leaderCall of a request that is one command, env: on the
// leader, it shares the group's entries with the other commands proposed
// meanwhile, and answer turns the FSM's result into the response.
func commandCall[Req, Resp any](ctx context.Context, n *Node, rt engine.Routing, req *connect.Request[Req],
	env *raftcmdv1.Envelope, answer func(res any) *Resp,
	remote func(context.Context, *engine.PeerClient, *connect.Request[Req]) (*connect.Response[Resp], error),
) (*connect.Response[Resp], error) {
	var out *Resp
	it := &engine.Item{Route: rt, Env: env}
	err := runCall(ctx, n, req, it, &out, remote)
	markForwarded(ctx, it)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	if it.Res != nil {
		out = answer(it.Res)
	}
	return connect.NewResponse(out), nil
}

// markForwarded sets the Quorate-Leader response header (leaderHeader)
// of the unary data call of ctx, the handler's, when its last attempt
// forwarded it, it, to another node: on an answer and on an error alike (a
// leader's error passed on is a wire error, whose own metadata Connect does
// not send again).
func markForwarded(ctx context.Context, it *engine.Item) {
	if !it.Route.Data || it.ViaLeader == "" {
		return
	}
	if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
		info.ResponseHeader().Set(engine.LeaderHeader, it.ViaLeader)
	}
}

// runCall decides it, a unary request, within the request's deadline
// (requestContext); forwarded, req is sent to the leader by remote, marked
// with this node's ID, and its answer lands in out.
func runCall[Req, Resp any](ctx context.Context, n *Node, req *connect.Request[Req], it *engine.Item, out **Resp,
	remote func(context.Context, *engine.PeerClient, *connect.Request[Req]) (*connect.Response[Resp], error),
) error {
	ctx, cancel := n.engine.RequestContext(ctx)
	defer cancel()
	it.Route.Forwarded = req.Header().Get(engine.ForwardedHeader) != ""
	it.Forward = func(ctx context.Context, p *engine.PeerClient) error {
		fwd := connect.NewRequest(req.Msg)
		fwd.Header().Set(engine.ForwardedHeader, n.cfg.ID)
		engine.SetForwardedIdentity(ctx, fwd.Header())
		resp, err := remote(ctx, p, fwd)
		if err == nil {
			*out = resp.Msg
		}
		return err
	}
	n.engine.Decide(ctx, []*engine.Item{it})
	return it.Err
}

// Admit checks what it can without state, then has the leader decide through
// the log: locally when this node leads, else by forwarding.
func (h *admissionHandler) Admit(ctx context.Context, req *connect.Request[quoratev1.AdmitRequest]) (*connect.Response[quoratev1.AdmitResponse], error) {
	n := h.n
	cmd, err := admitCommand(req.Msg)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	if plantedLocalRead && req.Header().Get(engine.ForwardedHeader) == "" {
		if out, ok := plantedLocalDecision(n, req.Msg); ok {
			bg := connect.NewRequest(proto.Clone(req.Msg).(*quoratev1.AdmitRequest))
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RequestTimeout)
				defer cancel()
				_, _ = h.admit(ctx, bg, cmd)
			}()
			return connect.NewResponse(out), nil
		}
	}
	return h.admit(ctx, req, cmd)
}

// admit decides cmd through the leader's log: an AdmitBatch of one. A
// forwarded Admit shares AdmitBatch calls with the others forwarded to the
// same leader (forward.go).
func (h *admissionHandler) admit(ctx context.Context, req *connect.Request[quoratev1.AdmitRequest], cmd *raftcmdv1.Admit) (*connect.Response[quoratev1.AdmitResponse], error) {
	n := h.n
	ctx, cancel := n.engine.RequestContext(ctx)
	defer cancel()
	it := admitItem(req.Msg, cmd, req.Header().Get(engine.ForwardedHeader) != "")
	n.engine.Decide(ctx, []*engine.Item{it})
	markForwarded(ctx, it)
	resp, err := admitAnswer(it)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	return connect.NewResponse(resp), nil
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
	return commandCall(ctx, n, engine.Routing{Data: true, Key: m.GetKey(), Idempotent: true}, req, env,
		func(res any) *quoratev1.PeekResponse {
			r := res.(*fsm.PeekResult)
			d := r.Decision
			return &quoratev1.PeekResponse{
				WouldAllow: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
				ResetAfter: durationpb.New(d.ResetAfter), RetryAfter: durationpb.New(d.RetryAfter),
				PolicyVersion: r.PolicyVersion, DecidedAt: timestamppb.New(time.Unix(0, r.At).UTC()),
			}
		},
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
	// A repeated refund answers refunded=false.
	env := &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Refund{Refund: &raftcmdv1.Refund{
		Caller: m.GetCaller(), RequestId: m.GetRequestId(), Key: m.GetKey()}}}
	return commandCall(ctx, n, engine.Routing{Data: true, Key: m.GetKey(), Idempotent: true}, req, env,
		func(res any) *quoratev1.RefundResponse {
			r := res.(*fsm.RefundResult)
			return &quoratev1.RefundResponse{Refunded: r.Refunded, Cost: r.Cost, RefundedAt: timestamppb.New(time.Unix(0, r.RefundedAt).UTC())}
		},
		func(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[quoratev1.RefundRequest]) (*connect.Response[quoratev1.RefundResponse], error) {
			return p.Admission.Refund(ctx, fwd)
		})
}

// policyTable is where admitResponse finds the policies a decision used:
// the FSM of the group that decided it.
type policyTable interface {
	Policy(name string) (fsm.PolicyVersion, bool)
}

// admitResponse is the API's form of an Admit's result, decided by the FSM
// whose policies are ps. Each check's window and quota (and the top ones,
// those of the check whose fields are on top) are its policy's at the
// decision's log time (admission.Policy.Window, Policy.Limit): of the
// version decided with, which the group holds unless a policy change was
// applied since; they are then left unset. A recorded answer (duplicate)
// gets them the same way, from the policy at answer time: records do not
// keep them.
func admitResponse(r *fsm.AdmitResult, ps policyTable) *quoratev1.AdmitResponse {
	at := r.DecidedAt + int64(r.Wait)
	window := func(policy string, version uint64) (*durationpb.Duration, int64) {
		pv, ok := ps.Policy(policy)
		if !ok || pv.Version != version {
			return nil, 0
		}
		return windowOf(pv.Policy.Window(at)), pv.Policy.Limit
	}
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
		out.Window, out.Quota = window(r.Checks[top].Policy, r.PolicyVersion)
	}
	if r.Multi {
		for _, c := range r.Checks {
			cd := c.Decision
			w, q := window(c.Policy, c.PolicyVersion)
			out.Checks = append(out.Checks, &quoratev1.CheckResult{
				Policy: c.Policy, Key: c.Key, Allowed: cd.Allowed, Limit: cd.Limit, Remaining: cd.Remaining,
				ResetAfter: durationpb.New(cd.ResetAfter), RetryAfter: durationpb.New(cd.RetryAfter),
				PolicyVersion: c.PolicyVersion, ShadowDenied: c.ShadowDenied, Window: w, Quota: q,
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
	return commandCall(ctx, n, engine.Routing{Data: true, Key: cmd.GetKey(), Idempotent: cmd.GetRequestId() != ""}, req,
		&raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Reserve{Reserve: cmd}},
		func(res any) *quoratev1.ReserveResponse {
			r := res.(*fsm.ReserveResult)
			out := &quoratev1.ReserveResponse{Allowed: r.Allowed, ReservationId: r.ReservationID, Limit: r.Decision.Limit,
				Remaining: r.Decision.Remaining, RetryAfter: durationpb.New(r.Decision.RetryAfter), PolicyVersion: r.PolicyVersion,
				DecidedAt: unixTime(r.DecidedAt), Duplicate: r.Duplicate}
			if r.Allowed {
				out.ExpiresAt = unixTime(r.ExpiresAt)
			}
			return out
		},
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
	return commandCall(ctx, n, engine.Routing{Data: true, Key: fsm.ReservationKey(cmd.GetReservationId()), Idempotent: cmd.GetRequestId() != ""}, req,
		&raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Commit{Commit: cmd}},
		func(res any) *quoratev1.CommitResponse {
			r := res.(*fsm.ReserveResult)
			return &quoratev1.CommitResponse{Charged: r.Charged, Released: r.Released, Over: r.Over,
				DecidedAt: unixTime(r.DecidedAt), Duplicate: r.Duplicate}
		},
		func(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[quoratev1.CommitRequest]) (*connect.Response[quoratev1.CommitResponse], error) {
			return p.Admission.Commit(ctx, fwd)
		})
}
