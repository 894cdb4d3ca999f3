package client

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Admit decides r: the key's group leader decides it through its Raft log
// (Outcome Verified), retried with the same request ID across nodes until
// ctx's deadline (Config.Timeout when ctx has none). Admits to one leader
// that overlap in time may share an AdmitBatch call (unless
// Config.DisableCoalescing).
//
// When no decision is possible before the deadline, Admit applies the
// policy's on_unavailable mode (unless r.NoFallback) and returns the
// Decision with Outcome Unavailable, Bypassed or LocalDecision and the
// failure as Cause; it returns the failure instead when the client does not
// know the policy (see Config.Policies), as an *OutcomeUnknownError when
// some attempt may have been applied. Errors about the request itself
// (InvalidArgument, NotFound, ...) are returned at once as Connect errors.
//
// For a policy whose local.mode is grant (unless Config.DisableGrants),
// a request without MaxWait is allowed in memory (Outcome LocalGrant, no
// call, no request ID generated) when the client holds a live grant of the
// policy for the key with at least its cost unspent — for a request with
// Also, a grant for every check, each holding its check's cost, all or
// nothing; the key's first such request starts acquiring one in the
// background. Otherwise (and always for a request with a RequestID of the
// caller's, which a grant does not record) the request is decided by the
// cluster as above, so every denial comes from the cluster.
func (c *Client) Admit(ctx context.Context, r Request) (*Decision, error) {
	if c.grants != nil {
		if d := c.grants.admit(&r); d != nil {
			return d, nil
		}
	}
	return c.admitStrict(ctx, r)
}

// admitStrict is Admit without grants: the cluster decides r.
func (c *Client) admitStrict(ctx context.Context, r Request) (*Decision, error) {
	parent := ctx
	ctx, cancel, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if r.RequestID == "" {
		r.RequestID = NewRequestID()
	}
	req := admitRequestOf(r, c.cfg.Caller)
	resp, err := call(ctx, c, callSpec{procedure: "Admit", key: r.Key, requestID: r.RequestID},
		func(ctx context.Context, server string) (*quoratev1.AdmitResponse, http.Header, error) {
			if c.cfg.DisableCoalescing {
				return unary(ctx, req, c.admission(server).Admit)
			}
			return c.batcher(server).admit(ctx, req)
		})
	if err == nil {
		d := decisionOf(resp, r.RequestID)
		c.fb.count(Verified)
		c.fb.seen(r.Policy, d.PolicyVersion)
		for _, ch := range d.Checks {
			c.fb.seen(ch.Policy, ch.PolicyVersion)
		}
		return d, nil
	}
	err = publicError(err, r.RequestID)
	if !r.NoFallback && undecided(err) && !errors.Is(parent.Err(), context.Canceled) {
		if d, ok := c.fb.decide(&r, err); ok {
			return d, nil
		}
	}
	return nil, err
}

// AdmitInto decides *r exactly as Admit does and writes the decision into
// *d instead of returning a new one: a decision from a grant (Outcome
// LocalGrant) then allocates nothing. For callers at millions of requests
// per second that reuse a Decision; d is overwritten whole. On error *d is
// left as it was.
func (c *Client) AdmitInto(ctx context.Context, r *Request, d *Decision) error {
	if c.grants != nil {
		if len(r.Also) != 0 {
			if c.grants.spendAll(r, d) {
				return nil
			}
		} else if g, left, ok := c.grants.spend(r); ok {
			g.fill(d, r, left)
			return nil
		}
	}
	res, err := c.admitStrict(ctx, *r)
	if err != nil {
		return err
	}
	*d = *res
	return nil
}

// undecided reports whether a failed Admit found no node able to decide (as
// opposed to an answer about the request, or a TLS or protocol mismatch: a
// configuration error is reported, never hidden by a fallback).
func undecided(err error) bool {
	if isProtocolMismatch(err) {
		return false
	}
	var ou *OutcomeUnknownError
	return errors.As(err, &ou) || retryable(err) || errors.Is(err, context.DeadlineExceeded) ||
		connect.CodeOf(err) == connect.CodeDeadlineExceeded || connect.CodeOf(err) == connect.CodeUnavailable
}

// BatchResult is one request's result in AdmitBatch: a Decision or an error,
// as Admit would have returned them.
type BatchResult struct {
	Decision *Decision
	Err      error
}

// AdmitBatch decides many independent requests, each exactly as by Admit
// (with its own request ID, retries and fallback), and returns their
// results in request order. They are sent together, coalesced into
// AdmitBatch calls per leader.
func (c *Client) AdmitBatch(ctx context.Context, reqs []Request) []BatchResult {
	out := make([]BatchResult, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			out[i].Decision, out[i].Err = c.Admit(ctx, r)
		})
	}
	wg.Wait()
	return out
}

// admitRequestOf is r on the wire, marked strict: the client holds grants
// of its own, and a node must not decide its requests from the node's
// (a retry of one at another node, with the same request ID, would then be
// charged again).
func admitRequestOf(r Request, caller string) *quoratev1.AdmitRequest {
	req := &quoratev1.AdmitRequest{Policy: r.Policy, Key: r.Key, RequestId: r.RequestID, Caller: caller, Strict: true}
	if r.Cost != 0 {
		req.Cost = &r.Cost
	}
	for _, ch := range r.Also {
		pc := &quoratev1.Check{Policy: ch.Policy, Key: ch.Key}
		if ch.Cost != 0 {
			pc.Cost = &ch.Cost
		}
		req.Also = append(req.Also, pc)
	}
	if r.MaxWait > 0 {
		req.MaxWait = durationpb.New(r.MaxWait)
	}
	return req
}

func decisionOf(m *quoratev1.AdmitResponse, requestID string) *Decision {
	d := &Decision{Allowed: m.GetAllowed(), Outcome: Verified, RequestID: requestID,
		Limit: m.GetLimit(), Remaining: m.GetRemaining(), ResetAfter: m.GetResetAfter().AsDuration(),
		RetryAfter: m.GetRetryAfter().AsDuration(), Window: m.GetWindow().AsDuration(), Quota: m.GetQuota(),
		PolicyVersion: m.GetPolicyVersion(), Duplicate: m.GetDuplicate(), Wait: m.GetWait().AsDuration(),
		ShadowDenied: m.GetShadowDenied(), DeniedCheck: -1}
	if m.GetDecidedAt() != nil {
		d.DecidedAt = m.GetDecidedAt().AsTime()
	}
	if m.DeniedCheck != nil {
		d.DeniedCheck = int(m.GetDeniedCheck())
	}
	for _, ch := range m.GetChecks() {
		d.Checks = append(d.Checks, CheckResult{Policy: ch.GetPolicy(), Key: ch.GetKey(), Allowed: ch.GetAllowed(),
			Limit: ch.GetLimit(), Remaining: ch.GetRemaining(), ResetAfter: ch.GetResetAfter().AsDuration(),
			RetryAfter: ch.GetRetryAfter().AsDuration(), Window: ch.GetWindow().AsDuration(), Quota: ch.GetQuota(),
			PolicyVersion: ch.GetPolicyVersion(), ShadowDenied: ch.GetShadowDenied()})
	}
	return d
}

// PeekResult describes a key's state under a policy.
type PeekResult struct {
	// WouldAllow says whether a request of cost 1 would be allowed now.
	WouldAllow    bool
	Limit         int64
	Remaining     int64
	ResetAfter    time.Duration
	RetryAfter    time.Duration
	PolicyVersion uint64
	DecidedAt     time.Time
}

// Peek describes key's state under policy without spending anything. It
// changes nothing, so it is retried whatever the outcome of an attempt.
func (c *Client) Peek(ctx context.Context, policy, key string) (*PeekResult, error) {
	ctx, cancel, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	req := &quoratev1.PeekRequest{Policy: policy, Key: key}
	m, err := call(ctx, c, callSpec{procedure: "Peek", key: key, readOnly: true},
		func(ctx context.Context, server string) (*quoratev1.PeekResponse, http.Header, error) {
			return unary(ctx, req, c.admission(server).Peek)
		})
	if err != nil {
		return nil, publicError(err, "")
	}
	return &PeekResult{WouldAllow: m.GetWouldAllow(), Limit: m.GetLimit(), Remaining: m.GetRemaining(),
		ResetAfter: m.GetResetAfter().AsDuration(), RetryAfter: m.GetRetryAfter().AsDuration(),
		PolicyVersion: m.GetPolicyVersion(), DecidedAt: m.GetDecidedAt().AsTime()}, nil
}

// Refund gives back what the admitted request requestID (of this client's
// Caller) on key spent. Refunded is false when an earlier Refund already
// had; NotFound when no admitted request is recorded under that ID.
func (c *Client) Refund(ctx context.Context, key, requestID string) (refunded bool, cost int64, _ error) {
	ctx, cancel, err := c.begin(ctx)
	if err != nil {
		return false, 0, err
	}
	defer cancel()
	req := &quoratev1.RefundRequest{Caller: c.cfg.Caller, RequestId: requestID, Key: key}
	m, err := call(ctx, c, callSpec{procedure: "Refund", key: key, requestID: requestID},
		func(ctx context.Context, server string) (*quoratev1.RefundResponse, http.Header, error) {
			return unary(ctx, req, c.admission(server).Refund)
		})
	if err != nil {
		return false, 0, publicError(err, requestID)
	}
	return m.GetRefunded(), m.GetCost(), nil
}

// Reservation is units held by Reserve until Commit settles them.
type Reservation struct {
	Allowed bool
	// ID names the reservation (opaque); Key routes its Commit.
	ID        string
	Key       string
	Limit     int64
	Remaining int64
	// RetryAfter is, when denied, the time until the estimate would fit.
	RetryAfter time.Duration
	// ExpiresAt is when an uncommitted reservation gives its units back.
	ExpiresAt time.Time
	Duplicate bool
}

// Reserve holds estimate units of a rate or quota policy on key for work
// whose cost is known only afterwards; Commit settles the real cost. ttl 0
// means the server's default. It is retried with one request ID like Admit.
func (c *Client) Reserve(ctx context.Context, policy, key string, estimate int64, ttl time.Duration) (*Reservation, error) {
	ctx, cancel, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	req := &quoratev1.ReserveRequest{Policy: policy, Key: key, Estimate: estimate, RequestId: NewRequestID(), Caller: c.cfg.Caller}
	if ttl > 0 {
		req.Ttl = durationpb.New(ttl)
	}
	m, err := call(ctx, c, callSpec{procedure: "Reserve", key: key, requestID: req.RequestId},
		func(ctx context.Context, server string) (*quoratev1.ReserveResponse, http.Header, error) {
			return unary(ctx, req, c.admission(server).Reserve)
		})
	if err != nil {
		return nil, publicError(err, req.RequestId)
	}
	return &Reservation{Allowed: m.GetAllowed(), ID: m.GetReservationId(), Key: key, Limit: m.GetLimit(),
		Remaining: m.GetRemaining(), RetryAfter: m.GetRetryAfter().AsDuration(),
		ExpiresAt: m.GetExpiresAt().AsTime(), Duplicate: m.GetDuplicate()}, nil
}

// CommitResult is what Commit charged.
type CommitResult struct {
	// Charged units for the work, Released of the estimate given back, Over
	// the units above the estimate the limit did not allow to charge.
	Charged, Released, Over int64
	Duplicate               bool
}

// Commit charges actual units for reservation r and gives back the rest of
// its estimate. It is retried with one request ID like Admit.
func (c *Client) Commit(ctx context.Context, r *Reservation, actual int64) (*CommitResult, error) {
	ctx, cancel, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	req := &quoratev1.CommitRequest{ReservationId: r.ID, Actual: actual, RequestId: NewRequestID(), Caller: c.cfg.Caller}
	m, err := call(ctx, c, callSpec{procedure: "Commit", key: r.Key, requestID: req.RequestId},
		func(ctx context.Context, server string) (*quoratev1.CommitResponse, http.Header, error) {
			return unary(ctx, req, c.admission(server).Commit)
		})
	if err != nil {
		return nil, publicError(err, req.RequestId)
	}
	return &CommitResult{Charged: m.GetCharged(), Released: m.GetReleased(), Over: m.GetOver(), Duplicate: m.GetDuplicate()}, nil
}

// unary makes one Connect call of m and returns its answer and header (the
// error's metadata on failure).
func unary[Req, Resp any](ctx context.Context, m *Req, f func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)) (*Resp, http.Header, error) {
	resp, err := f(ctx, connect.NewRequest(m))
	if err != nil {
		return nil, metaOf(err), err
	}
	return resp.Msg, resp.Header(), nil
}
