package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// ErrLeaseLost is the cause (context.Cause) of a lease's context ended
// because the lease could not be renewed before it expired: another holder
// may own its slot now, and the work it guarded must stop.
var ErrLeaseLost = errors.New("client: lease lost")

// ErrLeaseReleased is the cause of a lease's context ended by Release.
var ErrLeaseReleased = errors.New("client: lease released")

// LeaseDeniedError is AcquireLease's error when every slot of the key is
// held.
type LeaseDeniedError struct {
	Policy, Key string
	Limit, Held int64
	// RetryAfter is the time until the earliest lease expires.
	RetryAfter time.Duration
}

func (e *LeaseDeniedError) Error() string {
	return fmt.Sprintf("lease of %q on %q denied: %d of %d slots held; retry after %v", e.Policy, e.Key, e.Held, e.Limit, e.RetryAfter)
}

// Lease is a slot of a concurrency policy, held until Release or until it
// cannot be renewed in time. The client renews it at about a third of its
// ttl.
type Lease struct {
	c           *Client
	policy, key string
	id          string
	token       int64
	ttl         time.Duration
	ctx         context.Context
	cancel      context.CancelCauseFunc
	done        chan struct{} // closed when the renewal loop ends

	mu      sync.Mutex
	expires time.Time // local estimate: never later than the cluster's
	renewed int
}

// AcquireLease takes a slot of the concurrency policy on key, for ttl (0:
// the policy's lease_ttl), retried with one request ID like Admit. A denial
// (every slot held) is a *LeaseDeniedError. The lease renews itself until
// Release; its Context ends when it is lost or released.
func (c *Client) AcquireLease(ctx context.Context, policy, key string, ttl time.Duration) (*Lease, error) {
	parent := ctx
	ctx, cancel, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	req := &quoratev1.AcquireLeaseRequest{Policy: policy, Key: key, RequestId: NewRequestID(), Caller: c.cfg.Caller}
	if ttl > 0 {
		req.Ttl = durationpb.New(ttl)
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
		return nil, &LeaseDeniedError{Policy: policy, Key: key, Limit: m.GetLimit(), Held: m.GetHeld(), RetryAfter: m.GetRetryAfter().AsDuration()}
	}
	if ttl <= 0 {
		ttl = m.GetExpiresAt().AsTime().Sub(m.GetDecidedAt().AsTime())
	}
	l := &Lease{c: c, policy: policy, key: key, id: m.GetLeaseId(), token: m.GetFencingToken(), ttl: ttl,
		done: make(chan struct{}), expires: sent.Add(ttl)}
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(parent))
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		l.cancel(ErrClosed)
		close(l.done)
		return l, nil
	}
	c.leases[l] = struct{}{}
	c.wg.Add(1)
	c.mu.Unlock()
	go l.renewLoop()
	return l, nil
}

// ID is the lease's ID.
func (l *Lease) ID() string { return l.id }

// Token is the lease's fencing token: it strictly increases per key. Hand it
// to the resource the guarded work writes to.
func (l *Lease) Token() int64 { return l.token }

// Context ends when the lease is lost (cause ErrLeaseLost), released
// (ErrLeaseReleased) or its client closed (ErrClosed).
func (l *Lease) Context() context.Context { return l.ctx }

// Renewals is how many times the lease was renewed.
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

// renewLoop renews the lease every third of its ttl; a renewal not answered
// before the lease's (local) expiry, or refused, loses the lease.
func (l *Lease) renewLoop() {
	defer l.c.wg.Done()
	defer close(l.done)
	t := time.NewTimer(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		expires := l.expires
		l.mu.Unlock()
		ctx, cancel := context.WithDeadline(l.ctx, expires)
		req := &quoratev1.RenewLeaseRequest{LeaseId: l.id, FencingToken: l.token, Ttl: durationpb.New(l.ttl),
			RequestId: NewRequestID(), Caller: l.c.cfg.Caller}
		sent := time.Now()
		_, err := call(ctx, l.c, callSpec{procedure: "RenewLease", key: l.key, requestID: req.RequestId},
			func(ctx context.Context, server string) (*quoratev1.RenewLeaseResponse, http.Header, error) {
				return unary(ctx, req, l.c.conn(server).lease.RenewLease)
			})
		cancel()
		if l.ctx.Err() != nil {
			return
		}
		if err != nil {
			l.c.cfg.Logger.Debug("lease lost", "policy", l.policy, "key", l.key, "lease_id", l.id, "error", err)
			l.stop(fmt.Errorf("%w: %w", ErrLeaseLost, publicError(err, req.RequestId)))
			return
		}
		l.mu.Lock()
		l.expires = sent.Add(l.ttl)
		l.renewed++
		l.mu.Unlock()
		t.Reset(l.ttl / 3)
	}
}

// Release stops the renewals, ends the lease's context and frees its slot,
// retried with one request ID like Admit.
func (l *Lease) Release(ctx context.Context) error {
	l.stop(ErrLeaseReleased)
	<-l.done
	ctx, cancel, err := l.c.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	req := &quoratev1.ReleaseLeaseRequest{LeaseId: l.id, FencingToken: l.token, RequestId: NewRequestID(), Caller: l.c.cfg.Caller}
	_, err = call(ctx, l.c, callSpec{procedure: "ReleaseLease", key: l.key, requestID: req.RequestId},
		func(ctx context.Context, server string) (*quoratev1.ReleaseLeaseResponse, http.Header, error) {
			return unary(ctx, req, l.c.conn(server).lease.ReleaseLease)
		})
	return publicError(err, req.RequestId)
}

// CheckFence asks whether token still holds a slot of policy on key (and
// until when). It changes nothing.
func (c *Client) CheckFence(ctx context.Context, policy, key string, token int64) (held bool, expiresAt time.Time, _ error) {
	ctx, cancel, err := c.begin(ctx)
	if err != nil {
		return false, time.Time{}, err
	}
	defer cancel()
	req := &quoratev1.CheckFenceRequest{Policy: policy, Key: key, FencingToken: token}
	m, err := call(ctx, c, callSpec{procedure: "CheckFence", key: key, readOnly: true},
		func(ctx context.Context, server string) (*quoratev1.CheckFenceResponse, http.Header, error) {
			return unary(ctx, req, c.conn(server).lease.CheckFence)
		})
	if err != nil {
		return false, time.Time{}, publicError(err, "")
	}
	return m.GetHeld(), m.GetExpiresAt().AsTime(), nil
}
