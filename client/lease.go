package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// ErrLeaseLost is the cause (context.Cause) of a lease's context ended
// because the lease could not be renewed before it expired, or a renewal
// found it no longer held: another holder may own its slot now, and the
// work it guarded must stop.
var ErrLeaseLost = errors.New("client: lease lost")

// ErrLeaseReleased is the cause of a lease's context ended by Release.
var ErrLeaseReleased = errors.New("client: lease released")

// ErrLeaseAbandoned is the cause of a lease's context ended by Abandon.
var ErrLeaseAbandoned = errors.New("client: lease abandoned")

// LeaseDeniedError is AcquireLease's error when every slot of the key is
// held.
type LeaseDeniedError struct {
	Policy, Key string
	Limit, Held int64
	// RetryAfter is the time until the earliest lease expires.
	RetryAfter time.Duration
	// DecidedAt is the log time of the denial.
	DecidedAt time.Time
}

func (e *LeaseDeniedError) Error() string {
	return fmt.Sprintf("lease of %q on %q denied: %d of %d slots held; retry after %v", e.Policy, e.Key, e.Held, e.Limit, e.RetryAfter)
}

// LeaseOptions are AcquireLeaseWith's options.
type LeaseOptions struct {
	// TTL is how long the lease lives unless renewed; 0 means the policy's
	// lease_ttl.
	TTL time.Duration
	// RequestID identifies the acquire for retries; empty means a fresh
	// one. Acquiring again with the ID of an acquire that was applied (after
	// an *OutcomeUnknownError, say) gets the same lease back, with
	// Duplicate set, instead of a second slot.
	RequestID string
	// ManualRenew: the client does not renew the lease; the caller renews
	// it with Renew before ExpiresAt, and its Context ends only on Release,
	// Abandon, Close or a Renew that finds it lost.
	ManualRenew bool
	// MaxWait: when every slot is held, wait up to this long (at most a
	// minute) for one to free instead of being denied; waiters of a key are
	// served first come, first served. A call whose context has no deadline
	// gets Config.Timeout plus MaxWait.
	MaxWait time.Duration
	// ReservePolicy and ReserveEstimate also hold ReserveEstimate units of
	// a rate or quota policy on the same key for as long as the lease
	// lives: acquired together or not at all. Release charges the whole
	// estimate, ReleaseWith the work's real cost (ReleaseOptions.ActualCost);
	// a lease that expires gives the units back.
	ReservePolicy   string
	ReserveEstimate int64
}

// ReleaseOptions are ReleaseWith's options.
type ReleaseOptions struct {
	// RequestID identifies the release for retries; empty means a fresh
	// one. Releasing again with the ID of a release whose outcome is
	// unknown gets its recorded answer (Duplicate) if it was applied, where
	// a fresh ID would be refused (FailedPrecondition: the token holds no
	// slot).
	RequestID string
	// ActualCost is the work's real cost, for a lease acquired with a
	// reservation: charged as Commit charges it. Nil charges the whole
	// estimate; set for a lease without a reservation, the release is
	// refused (InvalidArgument).
	ActualCost *int64
}

// LeaseAnswer is the cluster's answer to a lease call that changed state
// (a renewal or a release).
type LeaseAnswer struct {
	// RequestID is the call's request ID.
	RequestID string
	// DecidedAt is the log time at which the call was decided.
	DecidedAt time.Time
	// ExpiresAt is the log time at which the lease ends unless renewed
	// (zero for a release).
	ExpiresAt time.Time
	// Duplicate: the answer is the recorded one of an earlier call with
	// the same request ID, which was applied; nothing changed now.
	Duplicate bool
	// Settled is, for the release of a lease acquired with a reservation,
	// what the release charged of it (Duplicate as the answer's); nil
	// otherwise.
	Settled *CommitResult
}

// FenceCheck is CheckFence's answer.
type FenceCheck struct {
	// Held says whether the token holds a live lease of the key.
	Held bool
	// ExpiresAt is, when held, the lease's end in log time.
	ExpiresAt time.Time
	// DecidedAt is the log time of the check.
	DecidedAt time.Time
}

// Lease is a slot of a concurrency policy, held until Release or until it
// cannot be renewed in time. Unless acquired with LeaseOptions.ManualRenew,
// the client renews it at about a third of its ttl.
type Lease struct {
	c           *Client
	policy, key string
	id          string
	token       int64
	ttl         time.Duration
	acquired    LeaseAnswer // the acquire's answer
	waited      time.Duration
	reservation string // the reservation held with the lease, if any
	ctx         context.Context
	cancel      context.CancelCauseFunc
	done        chan struct{} // closed when the renewal loop ends (at once for a manual lease)

	mu        sync.Mutex
	local     time.Time // local estimate of the expiry: never later than the cluster's
	decidedAt time.Time // log time of the latest answer that showed the lease live
	expiresAt time.Time // log time of expiry in that answer
	renewed   int
}

// AcquireLease takes a slot of the concurrency policy on key, for ttl (0:
// the policy's lease_ttl), retried with one request ID like Admit. A denial
// (every slot held) is a *LeaseDeniedError. The lease renews itself until
// Release; its Context ends when it is lost or released.
func (c *Client) AcquireLease(ctx context.Context, policy, key string, ttl time.Duration) (*Lease, error) {
	return c.AcquireLeaseWith(ctx, policy, key, LeaseOptions{TTL: ttl})
}

// AcquireLeaseWith is AcquireLease with options: the caller's request ID,
// and renewals left to the caller (ManualRenew). A Duplicate answer's lease
// was granted by the earlier acquire, so its end may be nearer than its
// ttl: the client renews such a lease at once, unless ManualRenew.
func (c *Client) AcquireLeaseWith(ctx context.Context, policy, key string, opts LeaseOptions) (*Lease, error) {
	parent := ctx
	switch {
	case opts.TTL < 0:
		return nil, fmt.Errorf("client: LeaseOptions.TTL must not be negative (got %v)", opts.TTL)
	case opts.MaxWait < 0:
		return nil, fmt.Errorf("client: LeaseOptions.MaxWait must not be negative (got %v)", opts.MaxWait)
	}
	ctx, cancel, err := c.beginWaiting(ctx, opts.MaxWait)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if opts.RequestID == "" {
		opts.RequestID = NewRequestID()
	}
	req := &quoratev1.AcquireLeaseRequest{Policy: policy, Key: key, RequestId: opts.RequestID, Caller: c.cfg.Caller,
		ReservePolicy: opts.ReservePolicy, ReserveEstimate: opts.ReserveEstimate}
	if opts.TTL > 0 {
		req.Ttl = durationpb.New(opts.TTL)
	}
	if opts.MaxWait > 0 {
		req.MaxWait = durationpb.New(opts.MaxWait)
	}
	sent := time.Now()
	m, err := call(ctx, c, callSpec{procedure: "AcquireLease", key: key, requestID: req.RequestId},
		func(ctx context.Context, server string) (*quoratev1.AcquireLeaseResponse, http.Header, error) {
			return unary(ctx, req, c.conn(server).lease.AcquireLease)
		})
	if err != nil {
		return nil, publicError(err, req.RequestId)
	}
	if !m.GetAllowed() {
		return nil, &LeaseDeniedError{Policy: policy, Key: key, Limit: m.GetLimit(), Held: m.GetHeld(),
			RetryAfter: m.GetRetryAfter().AsDuration(), DecidedAt: logTime(m.GetDecidedAt())}
	}
	ttl := opts.TTL
	if ttl <= 0 {
		ttl = m.GetExpiresAt().AsTime().Sub(m.GetDecidedAt().AsTime())
	}
	a := LeaseAnswer{RequestID: req.RequestId, DecidedAt: logTime(m.GetDecidedAt()), ExpiresAt: logTime(m.GetExpiresAt()), Duplicate: m.GetDuplicate()}
	// The slot was granted at least waited after the request left: the
	// local expiry stays no later than the cluster's.
	waited := m.GetWaited().AsDuration()
	l := &Lease{c: c, policy: policy, key: key, id: m.GetLeaseId(), token: m.GetFencingToken(), ttl: ttl, acquired: a,
		waited: waited, reservation: m.GetReservationId(),
		done: make(chan struct{}), local: sent.Add(waited + ttl), decidedAt: a.DecidedAt, expiresAt: a.ExpiresAt}
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(parent))
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		l.cancel(ErrClosed)
		close(l.done)
		return l, nil
	}
	c.leases[l] = struct{}{}
	if opts.ManualRenew {
		c.mu.Unlock()
		close(l.done)
		return l, nil
	}
	c.wg.Add(1)
	c.mu.Unlock()
	first := ttl / 3
	if a.Duplicate {
		// Granted by an earlier acquire with this request ID: its end may
		// be nearer than ttl from now.
		first = 0
	}
	go l.renewLoop(first)
	return l, nil
}

// logTime is a log time of an answer; zero when the answer has none.
func logTime(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// Policy is the lease's policy.
func (l *Lease) Policy() string { return l.policy }

// Key is the key the lease holds a slot of.
func (l *Lease) Key() string { return l.key }

// ID is the lease's ID.
func (l *Lease) ID() string { return l.id }

// Token is the lease's fencing token: it strictly increases per key. Hand it
// to the resource the guarded work writes to.
func (l *Lease) Token() int64 { return l.token }

// RequestID is the acquire's request ID.
func (l *Lease) RequestID() string { return l.acquired.RequestID }

// DecidedAt is the log time at which the lease was granted (by the first
// acquire with its request ID, when Duplicate).
func (l *Lease) DecidedAt() time.Time { return l.acquired.DecidedAt }

// Waited is how long the acquire waited for a slot (LeaseOptions.MaxWait).
func (l *Lease) Waited() time.Duration { return l.waited }

// ReservationID names the reservation held with the lease
// (LeaseOptions.ReservePolicy); empty when it holds none.
func (l *Lease) ReservationID() string { return l.reservation }

// Duplicate says the acquire's answer was the recorded one of an earlier
// acquire with the same request ID: the lease was granted then, not now.
func (l *Lease) Duplicate() bool { return l.acquired.Duplicate }

// ExpiresAt is the log time at which the lease ends unless renewed, as of
// the latest (in log time) answer of its acquire or a renewal. A leader
// change only ever moves a live lease's end later.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// Context ends when the lease is lost (cause ErrLeaseLost), released
// (ErrLeaseReleased), abandoned (ErrLeaseAbandoned) or its client closed
// (ErrClosed).
func (l *Lease) Context() context.Context { return l.ctx }

// Renewals is how many times the lease was renewed (by the client or by
// Renew).
func (l *Lease) Renewals() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewed
}

// stop ends the lease's context with cause and forgets it.
func (l *Lease) stop(cause error) {
	l.cancel(cause)
	l.c.mu.Lock()
	delete(l.c.leases, l)
	l.c.mu.Unlock()
}

// renewLoop renews the lease after first, then every third of its ttl; a
// renewal not answered before the lease's (local) expiry, or refused, loses
// the lease.
func (l *Lease) renewLoop(first time.Duration) {
	defer l.c.wg.Done()
	defer close(l.done)
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		local := l.local
		l.mu.Unlock()
		ctx, cancel := context.WithDeadline(l.ctx, local)
		_, err := l.renew(ctx, NewRequestID())
		cancel()
		if l.ctx.Err() != nil {
			return
		}
		if err != nil {
			l.c.cfg.Logger.Debug("lease lost", "policy", l.policy, "key", l.key, "lease_id", l.id, "error", err)
			if !errors.Is(err, ErrLeaseLost) {
				err = fmt.Errorf("%w: %w", ErrLeaseLost, err)
			}
			l.stop(err)
			return
		}
		t.Reset(l.ttl / 3)
	}
}

// Renew renews the lease now for its ttl, with a fresh request ID, retried
// like Admit, and returns the answer. A renewal the cluster refuses because
// the token no longer holds a slot (FailedPrecondition: expired or
// released) also matches ErrLeaseLost, and ends the lease's Context. Any
// lease may be renewed so; one acquired with LeaseOptions.ManualRenew must
// be.
func (l *Lease) Renew(ctx context.Context) (LeaseAnswer, error) {
	return l.RenewWithID(ctx, "")
}

// RenewWithID is Renew with the caller's request ID (a fresh one when
// empty): renewing again with the ID of a renewal whose outcome is unknown
// gets its recorded answer (Duplicate) if it was applied.
func (l *Lease) RenewWithID(ctx context.Context, requestID string) (LeaseAnswer, error) {
	ctx, cancel, err := l.c.begin(ctx)
	if err != nil {
		return LeaseAnswer{RequestID: requestID}, err
	}
	defer cancel()
	if requestID == "" {
		requestID = NewRequestID()
	}
	return l.renew(ctx, requestID)
}

// renew sends one renewal (with the client's retries) and notes its
// answer.
func (l *Lease) renew(ctx context.Context, requestID string) (LeaseAnswer, error) {
	req := &quoratev1.RenewLeaseRequest{LeaseId: l.id, FencingToken: l.token, Ttl: durationpb.New(l.ttl),
		RequestId: requestID, Caller: l.c.cfg.Caller}
	sent := time.Now()
	m, err := call(ctx, l.c, callSpec{procedure: "RenewLease", key: l.key, requestID: requestID},
		func(ctx context.Context, server string) (*quoratev1.RenewLeaseResponse, http.Header, error) {
			return unary(ctx, req, l.c.conn(server).lease.RenewLease)
		})
	if err != nil {
		err = publicError(err, requestID)
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			// The last attempt found the token holding no slot: whatever an
			// earlier attempt did, the lease is not held now.
			var ou *OutcomeUnknownError
			if !errors.As(err, &ou) {
				err = fmt.Errorf("%w: %w", ErrLeaseLost, err)
			}
			l.stop(err)
		}
		return LeaseAnswer{RequestID: requestID}, err
	}
	a := LeaseAnswer{RequestID: requestID, DecidedAt: logTime(m.GetDecidedAt()), ExpiresAt: logTime(m.GetExpiresAt()), Duplicate: m.GetDuplicate()}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewed++
	if !a.Duplicate {
		// A duplicate may answer a renewal sent long before this one: it
		// does not move the local estimate.
		l.local = sent.Add(l.ttl)
	}
	if !a.DecidedAt.Before(l.decidedAt) {
		l.decidedAt, l.expiresAt = a.DecidedAt, a.ExpiresAt
	}
	return a, nil
}

// Abandon stops the renewals and ends the lease's context (cause
// ErrLeaseAbandoned) without releasing the lease: its slot stays held until
// it expires, at ExpiresAt or the end a renewal in flight gave it. It
// returns once no renewal of the client's is in flight.
func (l *Lease) Abandon() {
	l.stop(ErrLeaseAbandoned)
	<-l.done
}

// Release stops the renewals, ends the lease's context and frees its slot,
// retried with one request ID like Admit.
func (l *Lease) Release(ctx context.Context) error {
	_, err := l.ReleaseWith(ctx, ReleaseOptions{})
	return err
}

// ReleaseWith is Release with options (the caller's request ID, the work's
// real cost), returning the answer.
func (l *Lease) ReleaseWith(ctx context.Context, opts ReleaseOptions) (LeaseAnswer, error) {
	requestID := opts.RequestID
	l.stop(ErrLeaseReleased)
	<-l.done
	ctx, cancel, err := l.c.begin(ctx)
	if err != nil {
		return LeaseAnswer{RequestID: requestID}, err
	}
	defer cancel()
	if requestID == "" {
		requestID = NewRequestID()
	}
	req := &quoratev1.ReleaseLeaseRequest{LeaseId: l.id, FencingToken: l.token, RequestId: requestID, Caller: l.c.cfg.Caller,
		ActualCost: opts.ActualCost}
	m, err := call(ctx, l.c, callSpec{procedure: "ReleaseLease", key: l.key, requestID: req.RequestId},
		func(ctx context.Context, server string) (*quoratev1.ReleaseLeaseResponse, http.Header, error) {
			return unary(ctx, req, l.c.conn(server).lease.ReleaseLease)
		})
	if err != nil {
		return LeaseAnswer{RequestID: requestID}, publicError(err, req.RequestId)
	}
	a := LeaseAnswer{RequestID: requestID, DecidedAt: logTime(m.GetDecidedAt()), Duplicate: m.GetDuplicate()}
	if l.reservation != "" {
		a.Settled = &CommitResult{Charged: m.GetCharged(), Released: m.GetReleasedUnits(), Over: m.GetOver(), Duplicate: m.GetDuplicate()}
	}
	return a, nil
}

// CheckFence asks whether the lease still holds its slot (and until when),
// through the key's log. It changes nothing, and only the lease's holder
// may ask: the lease ID carries its secret, and the cluster answers
// another caller that it holds nothing.
func (l *Lease) CheckFence(ctx context.Context) (FenceCheck, error) {
	c := l.c
	ctx, cancel, err := c.begin(ctx)
	if err != nil {
		return FenceCheck{}, err
	}
	defer cancel()
	req := &quoratev1.CheckFenceRequest{LeaseId: l.id, FencingToken: l.token, Caller: c.cfg.Caller}
	m, err := call(ctx, c, callSpec{procedure: "CheckFence", key: l.key, readOnly: true},
		func(ctx context.Context, server string) (*quoratev1.CheckFenceResponse, http.Header, error) {
			return unary(ctx, req, c.conn(server).lease.CheckFence)
		})
	if err != nil {
		return FenceCheck{}, publicError(err, "")
	}
	return FenceCheck{Held: m.GetHeld(), ExpiresAt: logTime(m.GetExpiresAt()), DecidedAt: logTime(m.GetDecidedAt())}, nil
}
