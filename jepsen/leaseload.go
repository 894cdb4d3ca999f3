package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/client"
)

// LeaseWorkloadOptions configures RunLeaseWorkload.
type LeaseWorkloadOptions struct {
	Policy  string // a concurrency policy
	Keys    []string
	Clients int
	Seed    uint64
	TTL     time.Duration // the leases' ttl; default 2s
	Timeout time.Duration // per call, the client's retries included; default 1.5s
	// Learn is the fraction of acquires with an unknown outcome sent once
	// more with the same request ID, to learn it (a duplicate answer if the
	// first was applied); default 0.5.
	Learn float64
	// RepeatOK is the fraction of answered acquires, renewals and releases
	// sent once more with the same request ID: they must come back as
	// duplicates of the first answer; default 0.05.
	RepeatOK   float64
	Abandon    float64 // fraction of leases never released (they expire); default 0.15
	StaleProbe float64 // fraction of released leases probed afterwards with the old token; default 0.3
	// ClientBase: worker numbers start here, so workloads running together
	// never share a request ID; it also names the workload's caller.
	ClientBase int
}

// RunLeaseWorkload runs opts.Clients workers until ctx ends, sending
// through one client.Client. Each takes a lease on a random key, renews it
// 0–2 times, checks its fence, then releases it — or abandons it to expire.
// After an acknowledged release it sometimes renews or checks the old token
// again, which must be refused as stale. The leases are acquired with
// client.LeaseOptions.ManualRenew: the worker renews them itself, so that
// each renewal is an op of the history with its answer's log times. It
// returns an error only when the client cannot be made.
func RunLeaseWorkload(ctx context.Context, c *Cluster, opts LeaseWorkloadOptions, h *History) error {
	setDefault(&opts.TTL, 2*time.Second)
	setDefault(&opts.Timeout, 1500*time.Millisecond)
	setDefault(&opts.Learn, 0.5)
	setDefault(&opts.RepeatOK, 0.05)
	setDefault(&opts.Abandon, 0.15)
	setDefault(&opts.StaleProbe, 0.3)
	caller := fmt.Sprintf("jepsen-lease-%d", opts.ClientBase)
	cc, err := c.NewClient(caller)
	if err != nil {
		return fmt.Errorf("jepsen: lease workload %s: %w", opts.Policy, err)
	}
	defer cc.Close()
	var wg sync.WaitGroup
	for i := range opts.Clients {
		cl := opts.ClientBase + i
		wg.Go(func() {
			w := &leaseWorker{cc: cc, opts: opts, h: h, client: cl, caller: caller,
				rng: rand.New(rand.NewPCG(opts.Seed, 0x1ea5e+uint64(cl)))}
			for seq := 0; ctx.Err() == nil; seq++ {
				w.session(ctx, seq)
			}
		})
	}
	wg.Wait()
	return nil
}

type leaseWorker struct {
	cc     *client.Client
	opts   LeaseWorkloadOptions
	h      *History
	client int
	caller string
	rng    *rand.Rand
}

// session is one lease's life on one key.
func (w *leaseWorker) session(ctx context.Context, seq int) {
	key := w.opts.Keys[w.rng.IntN(len(w.opts.Keys))]
	reqID := fmt.Sprintf("c%d-l%d-acquire", w.client, seq)
	l, out := w.acquire(ctx, key, reqID, 0)
	sends := 1
	if out == OutcomeUnknown && w.rng.Float64() < w.opts.Learn {
		l, out = w.acquire(ctx, key, reqID, sends)
		sends++
	}
	switch out {
	case OutcomeAllowed:
	case OutcomeDenied:
		w.pause(ctx, 50, 200)
		return
	default:
		return // the lease, if granted, expires
	}
	if w.repeat() {
		if dup, _ := w.acquire(ctx, key, reqID, sends); dup != nil {
			dup.Abandon() // the same lease: l goes on with it
		}
	}
	for r := range w.rng.IntN(3) {
		w.pause(ctx, 100, 500)
		id := fmt.Sprintf("c%d-l%d-renew%d", w.client, seq, r)
		out := w.renew(ctx, l, id, 0)
		if out != OutcomeAllowed {
			l.Abandon()
			return // lost (or not sure of) the lease: a careful worker stops here
		}
		if w.repeat() {
			w.renew(ctx, l, id, 1)
		}
	}
	w.check(ctx, l)
	w.pause(ctx, 50, 300)
	if w.rng.Float64() < w.opts.Abandon {
		l.Abandon()
		return
	}
	id := fmt.Sprintf("c%d-l%d-release", w.client, seq)
	if w.release(ctx, l, id, 0) != OutcomeAllowed {
		return
	}
	if w.repeat() {
		w.release(ctx, l, id, 1)
	}
	if w.rng.Float64() >= w.opts.StaleProbe {
		return
	}
	// A late write with the old token: it must be refused.
	if w.rng.IntN(2) == 0 {
		w.check(ctx, l)
	} else {
		w.renew(ctx, l, fmt.Sprintf("c%d-l%d-stale", w.client, seq), 0)
	}
}

// repeat draws whether an answered request is sent once more.
func (w *leaseWorker) repeat() bool { return w.rng.Float64() < w.opts.RepeatOK }

// pause waits a random lo..hi milliseconds (pacing, not synchronization).
func (w *leaseWorker) pause(ctx context.Context, lo, hi int) {
	sleepCtx(ctx, time.Duration(lo+w.rng.IntN(hi-lo+1))*time.Millisecond)
}

// do makes one client call with the workload's deadline, recording it as
// op (n is the how-many-th send of its request ID) once f has filled in
// the answer; it returns op's outcome.
func (w *leaseWorker) do(ctx context.Context, op Op, n int, f func(ctx context.Context, op *Op) error) Outcome {
	op.Policy, op.Client, op.Caller, op.Attempt = w.opts.Policy, w.client, w.caller, n
	tr := &trail{}
	cctx, cancel := context.WithTimeout(withTrail(ctx, tr), w.opts.Timeout)
	op.Start = time.Now()
	err := f(cctx, &op)
	op.End = time.Now()
	cancel()
	tr.record(&op)
	if err != nil {
		op.Outcome, op.Stale, op.Error = leaseOutcome(err), isStale(err), err.Error()
	}
	w.h.Add(op)
	return op.Outcome
}

// acquire acquires a lease (ManualRenew) with request ID reqID; the lease
// is nil unless granted.
func (w *leaseWorker) acquire(ctx context.Context, key, reqID string, n int) (*client.Lease, Outcome) {
	var l *client.Lease
	out := w.do(ctx, Op{Kind: KindAcquire, Key: key, RequestID: reqID}, n, func(ctx context.Context, op *Op) error {
		var err error
		l, err = w.cc.AcquireLeaseWith(ctx, w.opts.Policy, key, client.LeaseOptions{TTL: w.opts.TTL, RequestID: reqID, ManualRenew: true})
		var denied *client.LeaseDeniedError
		switch {
		case errors.As(err, &denied):
			op.Outcome, op.DecidedAt = OutcomeDenied, nanos(denied.DecidedAt)
			return nil
		case err != nil:
			return err
		}
		op.Outcome, op.LeaseID, op.Token, op.Duplicate = OutcomeAllowed, l.ID(), l.Token(), l.Duplicate()
		op.DecidedAt, op.ExpiresAt = nanos(l.DecidedAt()), nanos(l.ExpiresAt())
		return nil
	})
	return l, out
}

// renew renews l with request ID id.
func (w *leaseWorker) renew(ctx context.Context, l *client.Lease, id string, n int) Outcome {
	return w.do(ctx, leaseOp(KindRenew, l, id), n, func(ctx context.Context, op *Op) error {
		a, err := l.RenewWithID(ctx, id)
		if err == nil {
			op.Outcome, op.Duplicate, op.DecidedAt, op.ExpiresAt = OutcomeAllowed, a.Duplicate, nanos(a.DecidedAt), nanos(a.ExpiresAt)
		}
		return err
	})
}

// release releases l with request ID id.
func (w *leaseWorker) release(ctx context.Context, l *client.Lease, id string, n int) Outcome {
	return w.do(ctx, leaseOp(KindRelease, l, id), n, func(ctx context.Context, op *Op) error {
		a, err := l.ReleaseWith(ctx, client.ReleaseOptions{RequestID: id})
		if err == nil {
			op.Outcome, op.Duplicate, op.DecidedAt = OutcomeAllowed, a.Duplicate, nanos(a.DecidedAt)
		}
		return err
	})
}

// check asks whether l's token still holds its slot.
func (w *leaseWorker) check(ctx context.Context, l *client.Lease) Outcome {
	return w.do(ctx, leaseOp(KindCheck, l, ""), 0, func(ctx context.Context, op *Op) error {
		f, err := l.CheckFence(ctx)
		if err != nil {
			return err
		}
		op.Outcome = OutcomeDenied
		if f.Held {
			op.Outcome = OutcomeAllowed
		}
		op.DecidedAt, op.ExpiresAt = nanos(f.DecidedAt), nanos(f.ExpiresAt)
		return nil
	})
}

// leaseOp is an op of kind on l.
func leaseOp(kind OpKind, l *client.Lease, reqID string) Op {
	return Op{Kind: kind, Key: l.Key(), LeaseID: l.ID(), Token: l.Token(), RequestID: reqID}
}

// leaseOutcome is the outcome of a failed lease call: a refusal because the
// token holds no slot (FailedPrecondition, Stale) is an answer, denied;
// otherwise as classify says. An *client.OutcomeUnknownError is unknown
// whatever its last attempt's answer: an earlier attempt may have been
// applied.
func leaseOutcome(err error) Outcome {
	if isStale(err) {
		return OutcomeDenied
	}
	return classify(err)
}

// isStale reports whether err is the cluster's answer that the token holds
// no slot (and not an unknown outcome ending with that answer).
func isStale(err error) bool {
	var ou *client.OutcomeUnknownError
	return !errors.As(err, &ou) && connect.CodeOf(err) == connect.CodeFailedPrecondition
}

// nanos is a log time in unix nanoseconds; 0 for none.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
