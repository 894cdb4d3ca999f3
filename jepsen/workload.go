package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// refillNegligiblePeriod is the longest period a policy may have; with
// limit = capacity the bucket refills by capacity per 366 days, so over a run
// of seconds the bound on admits is exactly capacity.
const refillNegligiblePeriod = 366 * 24 * time.Hour

// TokenBucketPolicy is a token_bucket policy with limit = burst = capacity
// over 366 days: over a run of minutes the bound on admits is exactly capacity.
func TokenBucketPolicy(name string, capacity int64) *quoratev1.Policy {
	return &quoratev1.Policy{Name: name, Algorithm: "token_bucket", Limit: capacity, Burst: proto.Int64(capacity),
		Period: durationpb.New(refillNegligiblePeriod), DedupeRetention: durationpb.New(time.Hour)}
}

// FixedWindowPolicy is a fixed_window policy of limit units per window
// (a whole number of seconds), windows aligned to the Unix epoch in log time.
func FixedWindowPolicy(name string, limit int64, window time.Duration) *quoratev1.Policy {
	return &quoratev1.Policy{Name: name, Algorithm: "fixed_window", Limit: limit,
		Period: durationpb.New(window), DedupeRetention: durationpb.New(time.Hour)}
}

// ConcurrencyPolicy is a concurrency policy: at most limit leases per key,
// each living ttl unless renewed.
func ConcurrencyPolicy(name string, limit int64, ttl time.Duration) *quoratev1.Policy {
	return &quoratev1.Policy{Name: name, Algorithm: "concurrency", Limit: limit,
		LeaseTtl: durationpb.New(ttl), DedupeRetention: durationpb.New(time.Hour)}
}

// ApplyPolicy applies p, retrying across nodes until ctx ends.
func ApplyPolicy(ctx context.Context, c *Cluster, p *quoratev1.Policy) error {
	req := &quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{p}}
	var err error
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		live := c.Live()
		_, err = c.Admin(live[attempt%len(live)]).ApplyPolicies(cctx, connect.NewRequest(req))
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("jepsen: apply policy %s: %w", p.GetName(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// WorkloadOptions configures RunWorkload.
type WorkloadOptions struct {
	Policy   string
	Keys     []string
	Clients  int
	Seed     uint64
	Timeout  time.Duration // per call, the client's retries included; default 1.5s
	RepeatOK float64       // fraction of answered requests sent once more with the same request ID (exercises dedupe); default 0.05
	KeyEvery time.Duration // open Keys[i] only after i×KeyEvery, so fresh buckets drain throughout the run; 0 opens all at once
	// ClientBase: worker numbers start here, so workloads running together
	// never share a request ID; it also names the workload's caller.
	ClientBase int
	// BatchFraction of requests are sent together with up to two fresh
	// requests for other open keys, so that the client coalesces them into
	// one AdmitBatch call; each is recorded and checked as its own
	// operation. Default 0.3; negative: none.
	BatchFraction float64
}

// RunWorkload runs opts.Clients goroutines sending Admit through one
// client.Client until ctx ends, recording into h one op per call. Every
// request has a request ID; the client retries it with that ID until the
// call's deadline (Request.NoFallback: a fallback decision is never taken
// for the cluster's). It returns an error only when the client cannot be
// made.
func RunWorkload(ctx context.Context, c *Cluster, opts WorkloadOptions, h *History) error {
	setDefault(&opts.Timeout, 1500*time.Millisecond)
	setDefault(&opts.RepeatOK, 0.05)
	setDefault(&opts.BatchFraction, 0.3)
	caller := fmt.Sprintf("jepsen-admit-%d", opts.ClientBase)
	cc, err := c.NewClient(caller)
	if err != nil {
		return fmt.Errorf("jepsen: workload %s: %w", opts.Policy, err)
	}
	defer cc.Close()
	w := &admitWorkload{cc: cc, opts: opts, h: h, caller: caller}
	began := time.Now()
	var wg sync.WaitGroup
	for i := range opts.Clients {
		cl := opts.ClientBase + i
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(opts.Seed, uint64(cl)+1))
			for seq := 0; ctx.Err() == nil; seq++ {
				open := len(opts.Keys)
				if opts.KeyEvery > 0 {
					open = min(open, 1+int(time.Since(began)/opts.KeyEvery))
				}
				key := opts.Keys[rng.IntN(open)]
				if opts.KeyEvery > 0 {
					key = opts.Keys[open-1-rng.IntN(open)/2] // mostly the newest open keys
				}
				reqID := fmt.Sprintf("c%d-r%d", cl, seq)
				var out Outcome
				if rng.Float64() < opts.BatchFraction {
					var extra []string
					for range rng.IntN(3) {
						extra = append(extra, opts.Keys[rng.IntN(open)])
					}
					out = w.admitTogether(ctx, cl, reqID, key, extra)
				} else {
					out = w.admit(ctx, cl, reqID, key, 0)
				}
				if out.OK() && rng.Float64() < opts.RepeatOK { // must be answered as a duplicate
					w.admit(ctx, cl, reqID, key, 1)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

func otherNode(rng *rand.Rand, node, n int) int {
	if n < 2 {
		return node
	}
	return (node + 1 + rng.IntN(n-1)) % n
}

// admitWorkload is what the workers of one RunWorkload share.
type admitWorkload struct {
	cc     *client.Client
	opts   WorkloadOptions
	h      *History
	caller string
}

// admitTogether sends reqID for key, and one fresh request for each of
// extra (request IDs reqID-x0, reqID-x1), at once, and returns reqID's
// outcome. The client coalesces those bound for one leader.
func (w *admitWorkload) admitTogether(ctx context.Context, cl int, reqID, key string, extra []string) Outcome {
	var wg sync.WaitGroup
	for j, k := range extra {
		wg.Go(func() { w.admit(ctx, cl, fmt.Sprintf("%s-x%d", reqID, j), k, 0) })
	}
	out := w.admit(ctx, cl, reqID, key, 0)
	wg.Wait()
	return out
}

// admit sends reqID for key in one client call with the workload's
// deadline and records it; n is 0 for the first call with reqID, 1 for the
// dedupe probe.
func (w *admitWorkload) admit(ctx context.Context, cl int, reqID, key string, n int) Outcome {
	op := Op{Kind: KindAdmit, Policy: w.opts.Policy, Client: cl, RequestID: reqID, Caller: w.caller, Key: key, Attempt: n}
	tr := &trail{}
	cctx, cancel := context.WithTimeout(withTrail(ctx, tr), w.opts.Timeout)
	op.Start = time.Now()
	d, err := w.cc.Admit(cctx, clientRequest(w.opts.Policy, key, reqID))
	op.End = time.Now()
	cancel()
	tr.record(&op)
	recordDecision(&op, d, err)
	w.h.Add(op)
	return op.Outcome
}

// FinalPeek returns remaining per key, read through a client (Peek goes
// through the key's Raft log) after healing: each key's Peek is retried by
// the client for up to 30 s.
func FinalPeek(ctx context.Context, c *Cluster, policy string, keys []string) (map[string]int64, error) {
	cc, err := c.NewClient("jepsen-final-peek")
	if err != nil {
		return nil, fmt.Errorf("jepsen: final peek: %w", err)
	}
	defer cc.Close()
	out := map[string]int64{}
	for _, key := range keys {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		p, err := cc.Peek(pctx, policy, key)
		cancel()
		if err != nil {
			return out, fmt.Errorf("jepsen: final peek %q: %w", key, err)
		}
		out[key] = p.Remaining
	}
	return out, nil
}
