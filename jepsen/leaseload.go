package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// LeaseWorkloadOptions configures RunLeaseWorkload.
type LeaseWorkloadOptions struct {
	Policy        string // a concurrency policy
	Keys          []string
	Clients       int
	Seed          uint64
	TTL           time.Duration // asked on acquire and renew; default 2s
	Timeout       time.Duration // per attempt; default 1.5s
	RetryFraction float64       // fraction of unanswered calls retried with the same request ID; default 0.5
	MaxRetries    int           // retries per request ID; default 3
	Abandon       float64       // fraction of leases never released (they expire); default 0.15
	StaleProbe    float64       // fraction of released leases probed afterwards with the old token; default 0.3
	ClientBase    int           // client numbers start here, so workloads running together never share a caller
}

// RunLeaseWorkload runs opts.Clients workers until ctx ends. Each takes a
// lease on a random key (retrying an unanswered acquire with the same
// request ID), renews it 0–2 times, checks its fence, then releases it — or
// abandons it to expire. After an acknowledged release it sometimes renews or
// checks the old token again, which must be refused as stale.
//
// Unlike the admission workloads it calls LeaseService itself, one node per
// attempt, not through package client: CheckLeases needs each answer's log
// times (decided_at, expires_at) and duplicate flag, renews it sends and
// records itself, and leases abandoned to expire, while the client's Lease
// renews itself and exposes only its ID and token. Its re-sends of an
// unanswered call with the same request ID are what exercises the lease
// calls' dedupe.
func RunLeaseWorkload(ctx context.Context, c *Cluster, opts LeaseWorkloadOptions, h *History) {
	setDefault(&opts.TTL, 2*time.Second)
	setDefault(&opts.Timeout, 1500*time.Millisecond)
	setDefault(&opts.RetryFraction, 0.5)
	setDefault(&opts.MaxRetries, 3)
	setDefault(&opts.Abandon, 0.15)
	setDefault(&opts.StaleProbe, 0.3)
	var wg sync.WaitGroup
	for i := range opts.Clients {
		cl := opts.ClientBase + i
		wg.Go(func() {
			w := &leaseWorker{c: c, opts: opts, h: h, client: cl, caller: fmt.Sprintf("jepsen-lease-%d", cl),
				rng: rand.New(rand.NewPCG(opts.Seed, 0x1ea5e+uint64(cl)))}
			for seq := 0; ctx.Err() == nil; seq++ {
				w.session(ctx, seq)
			}
		})
	}
	wg.Wait()
}

type leaseWorker struct {
	c      *Cluster
	opts   LeaseWorkloadOptions
	h      *History
	client int
	caller string
	rng    *rand.Rand
}

// session is one lease's life on one key.
func (w *leaseWorker) session(ctx context.Context, seq int) {
	key := w.opts.Keys[w.rng.IntN(len(w.opts.Keys))]
	acq := w.call(ctx, Op{Kind: KindAcquire, Key: key, RequestID: fmt.Sprintf("c%d-l%d-acquire", w.client, seq)})
	switch acq.Outcome {
	case OutcomeAllowed:
	case OutcomeDenied:
		w.pause(ctx, 50, 200)
		return
	default:
		return
	}
	lease := Op{Key: key, LeaseID: acq.LeaseID, Token: acq.Token}
	for r := range w.rng.IntN(3) {
		w.pause(ctx, 100, 500)
		op := lease
		op.Kind, op.RequestID = KindRenew, fmt.Sprintf("c%d-l%d-renew%d", w.client, seq, r)
		if w.call(ctx, op).Outcome != OutcomeAllowed {
			return // lost (or not sure of) the lease: a careful worker stops here
		}
	}
	op := lease
	op.Kind = KindCheck
	w.call(ctx, op)
	w.pause(ctx, 50, 300)
	if w.rng.Float64() < w.opts.Abandon {
		return
	}
	op = lease
	op.Kind, op.RequestID = KindRelease, fmt.Sprintf("c%d-l%d-release", w.client, seq)
	if w.call(ctx, op).Outcome != OutcomeAllowed || w.rng.Float64() >= w.opts.StaleProbe {
		return
	}
	// A late write with the old token: it must be refused.
	op = lease
	if w.rng.IntN(2) == 0 {
		op.Kind = KindCheck
	} else {
		op.Kind, op.RequestID = KindRenew, fmt.Sprintf("c%d-l%d-stale", w.client, seq)
	}
	w.call(ctx, op)
}

// pause waits a random lo..hi milliseconds (pacing, not synchronization).
func (w *leaseWorker) pause(ctx context.Context, lo, hi int) {
	sleepCtx(ctx, time.Duration(lo+w.rng.IntN(hi-lo+1))*time.Millisecond)
}

// call sends op to a random node; an unanswered call carrying a request ID
// is retried (with that ID, on other nodes) for opts.RetryFraction of them.
// It returns the last attempt.
func (w *leaseWorker) call(ctx context.Context, op Op) Op {
	op.Policy, op.Client, op.Caller = w.opts.Policy, w.client, w.caller
	node := w.c.pick(w.rng)
	out := w.attempt(ctx, op, node)
	if out.Outcome.OK() || op.RequestID == "" || w.rng.Float64() >= w.opts.RetryFraction {
		return out
	}
	for a := 1; a <= w.opts.MaxRetries && ctx.Err() == nil; a++ {
		node = w.c.other(w.rng, node)
		op.Attempt = a
		if out = w.attempt(ctx, op, node); out.Outcome.OK() {
			break
		}
	}
	return out
}

func (w *leaseWorker) attempt(ctx context.Context, op Op, node int) Op {
	op.Node, op.Start = w.c.Nodes[node].ID, time.Now()
	cctx, cancel := context.WithTimeout(ctx, w.opts.Timeout)
	defer cancel()
	lc := w.c.Lease(node)
	ttl := durationpb.New(w.opts.TTL)
	var err error
	granted := false
	switch op.Kind {
	case KindAcquire:
		var resp *connect.Response[quoratev1.AcquireLeaseResponse]
		resp, err = lc.AcquireLease(cctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{
			Policy: op.Policy, Key: op.Key, RequestId: op.RequestID, Caller: op.Caller, Ttl: ttl}))
		if err == nil {
			m := resp.Msg
			granted, op.LeaseID, op.Token, op.Duplicate = m.GetAllowed(), m.GetLeaseId(), m.GetFencingToken(), m.GetDuplicate()
			op.DecidedAt, op.ExpiresAt = nanos(m.GetDecidedAt().AsTime(), m.DecidedAt != nil), nanos(m.GetExpiresAt().AsTime(), m.ExpiresAt != nil)
		}
	case KindRenew:
		var resp *connect.Response[quoratev1.RenewLeaseResponse]
		resp, err = lc.RenewLease(cctx, connect.NewRequest(&quoratev1.RenewLeaseRequest{
			LeaseId: op.LeaseID, FencingToken: op.Token, Ttl: ttl, RequestId: op.RequestID, Caller: op.Caller}))
		if err == nil {
			m := resp.Msg
			granted, op.Duplicate = true, m.GetDuplicate()
			op.DecidedAt, op.ExpiresAt = nanos(m.GetDecidedAt().AsTime(), m.DecidedAt != nil), nanos(m.GetExpiresAt().AsTime(), m.ExpiresAt != nil)
		}
	case KindRelease:
		var resp *connect.Response[quoratev1.ReleaseLeaseResponse]
		resp, err = lc.ReleaseLease(cctx, connect.NewRequest(&quoratev1.ReleaseLeaseRequest{
			LeaseId: op.LeaseID, FencingToken: op.Token, RequestId: op.RequestID, Caller: op.Caller}))
		if err == nil {
			granted, op.Duplicate = true, resp.Msg.GetDuplicate()
			op.DecidedAt = nanos(resp.Msg.GetDecidedAt().AsTime(), resp.Msg.DecidedAt != nil)
		}
	case KindCheck:
		var resp *connect.Response[quoratev1.CheckFenceResponse]
		resp, err = lc.CheckFence(cctx, connect.NewRequest(&quoratev1.CheckFenceRequest{
			Policy: op.Policy, Key: op.Key, FencingToken: op.Token}))
		if err == nil {
			m := resp.Msg
			granted = m.GetHeld()
			op.DecidedAt, op.ExpiresAt = nanos(m.GetDecidedAt().AsTime(), m.DecidedAt != nil), nanos(m.GetExpiresAt().AsTime(), m.ExpiresAt != nil)
		}
	}
	op.End = time.Now()
	var ce *connect.Error
	switch {
	case err != nil && errors.As(err, &ce) && ce.Code() == connect.CodeFailedPrecondition:
		op.Outcome, op.Stale, op.Error = OutcomeDenied, true, err.Error()
	case err != nil:
		op.Outcome, op.Error = classify(err), err.Error()
	case granted:
		op.Outcome = OutcomeAllowed
	default:
		op.Outcome = OutcomeDenied
	}
	w.h.Add(op)
	return op
}

func nanos(t time.Time, set bool) int64 {
	if !set {
		return 0
	}
	return t.UnixNano()
}
