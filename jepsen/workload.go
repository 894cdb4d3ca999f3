package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

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
	Policy        string
	Keys          []string
	Clients       int
	Seed          uint64
	Timeout       time.Duration // per attempt; default 1.5s
	RetryFraction float64       // fraction of errored requests retried with the same request ID; default 0.5
	MaxRetries    int           // retries per request ID; default 3
	RepeatOK      float64       // fraction of answered requests re-sent once to another node (exercises dedupe); default 0.05
	KeyEvery      time.Duration // open Keys[i] only after i×KeyEvery, so fresh buckets drain throughout the run; 0 opens all at once
	ClientBase    int           // client numbers start here, so workloads running together never share a caller
	// BatchFraction of attempts go through AdmitBatch instead of Admit; a
	// first attempt sent so carries up to two more fresh requests for other
	// open keys (never retried). Default 0.3; negative: none.
	BatchFraction float64
}

// RunWorkload runs opts.Clients goroutines sending Admit until ctx ends, recording into h.
func RunWorkload(ctx context.Context, c *Cluster, opts WorkloadOptions, h *History) {
	setDefault(&opts.Timeout, 1500*time.Millisecond)
	setDefault(&opts.RetryFraction, 0.5)
	setDefault(&opts.MaxRetries, 3)
	setDefault(&opts.RepeatOK, 0.05)
	setDefault(&opts.BatchFraction, 0.3)
	began := time.Now()
	var wg sync.WaitGroup
	for i := range opts.Clients {
		cl := opts.ClientBase + i
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(opts.Seed, uint64(cl)+1))
			caller := fmt.Sprintf("jepsen-client-%d", cl)
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
				node := c.pick(rng)
				attempt := func(reqID, key string, node, n int) Outcome {
					if rng.Float64() >= opts.BatchFraction {
						return attemptAdmit(ctx, c, opts, h, cl, caller, reqID, key, node, n)
					}
					var extra []string
					if n == 0 {
						for range rng.IntN(3) {
							extra = append(extra, opts.Keys[rng.IntN(open)])
						}
					}
					return attemptBatch(ctx, c, opts, h, cl, caller, reqID, key, extra, node, n)
				}
				out := attempt(reqID, key, node, 0)
				if out.OK() {
					if rng.Float64() < opts.RepeatOK { // re-send an answered request: must be a duplicate
						attempt(reqID, key, c.other(rng, node), 1)
					}
					continue
				}
				if rng.Float64() >= opts.RetryFraction {
					continue // leave this unknown outcome unresolved
				}
				for a := 1; a <= opts.MaxRetries && ctx.Err() == nil; a++ {
					node = c.other(rng, node)
					if attempt(reqID, key, node, a).OK() {
						break
					}
				}
			}
		})
	}
	wg.Wait()
}

func otherNode(rng *rand.Rand, node, n int) int {
	if n < 2 {
		return node
	}
	return (node + 1 + rng.IntN(n-1)) % n
}

// attemptBatch sends reqID for key, and one fresh request for each of
// extra (request IDs reqID-x0, reqID-x1), in one AdmitBatch to node, and
// records each as its own op; it returns reqID's outcome.
func attemptBatch(ctx context.Context, c *Cluster, opts WorkloadOptions, h *History, client int, caller, reqID, key string, extra []string, node, n int) Outcome {
	ops := []Op{{Kind: KindAdmit, Policy: opts.Policy, Client: client, RequestID: reqID, Caller: caller, Key: key, Node: c.Nodes[node].ID, Attempt: n, Start: time.Now()}}
	for j, k := range extra {
		o := ops[0]
		o.RequestID, o.Key, o.Attempt = fmt.Sprintf("%s-x%d", reqID, j), k, 0
		ops = append(ops, o)
	}
	req := &quoratev1.AdmitBatchRequest{}
	for _, o := range ops {
		req.Requests = append(req.Requests, &quoratev1.AdmitRequest{Policy: o.Policy, Key: o.Key, RequestId: o.RequestID, Caller: caller})
	}
	cctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	resp, err := c.Admission(node).AdmitBatch(cctx, connect.NewRequest(req))
	cancel()
	end := time.Now()
	if err == nil && len(resp.Msg.GetResults()) != len(ops) {
		err = fmt.Errorf("jepsen: %d results for %d requests", len(resp.Msg.GetResults()), len(ops))
	}
	for i := range ops {
		op := &ops[i]
		op.End = end
		if err != nil {
			op.Outcome, op.Error = classify(err), err.Error()
			h.Add(*op)
			continue
		}
		r := resp.Msg.GetResults()[i]
		if e := r.GetError(); e != nil {
			op.Outcome, op.Error = OutcomeUnknown, e.GetCode()+": "+e.GetMessage()
			if e.GetCode() == connect.CodeInvalidArgument.String() {
				op.Outcome = OutcomeFail
			}
			h.Add(*op)
			continue
		}
		a := r.GetResponse()
		op.Outcome = OutcomeDenied
		if a.GetAllowed() {
			op.Outcome = OutcomeAllowed
		}
		op.Remaining, op.DecidedAt, op.Duplicate = a.GetRemaining(), a.GetDecidedAt().AsTime().UnixNano(), a.GetDuplicate()
		h.Add(*op)
	}
	return ops[0].Outcome
}

// attemptAdmit sends reqID for key in one Admit to node and records it.
func attemptAdmit(ctx context.Context, c *Cluster, opts WorkloadOptions, h *History, client int, caller, reqID, key string, node, n int) Outcome {
	op := Op{Kind: KindAdmit, Policy: opts.Policy, Client: client, RequestID: reqID, Caller: caller, Key: key, Node: c.Nodes[node].ID, Attempt: n, Start: time.Now()}
	cctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	resp, err := c.Admission(node).Admit(cctx, connect.NewRequest(&quoratev1.AdmitRequest{
		Policy: opts.Policy, Key: key, RequestId: reqID, Caller: caller,
	}))
	cancel()
	op.End = time.Now()
	switch {
	case err != nil:
		op.Outcome, op.Error = classify(err), err.Error()
	case resp.Msg.GetAllowed():
		op.Outcome = OutcomeAllowed
	default:
		op.Outcome = OutcomeDenied
	}
	if err == nil {
		op.Remaining = resp.Msg.GetRemaining()
		op.DecidedAt = resp.Msg.GetDecidedAt().AsTime().UnixNano()
		op.Duplicate = resp.Msg.GetDuplicate()
	}
	h.Add(op)
	return op.Outcome
}

// classify tells errors that prove the request never reached a server (fail)
// from those that leave the outcome unknown. Checkers treat both as unknown.
// It reads the Connect code and the error chain, never the message: a refused
// dial of the client's own connection (ECONNREFUSED in the chain; a node's
// answer carries no chain, only its code, even when its forwarding dial was
// refused) and an InvalidArgument answer are failures.
func classify(err error) Outcome {
	if errors.Is(err, syscall.ECONNREFUSED) || connect.CodeOf(err) == connect.CodeInvalidArgument {
		return OutcomeFail
	}
	return OutcomeUnknown
}

// FinalPeek returns remaining per key, read through the leader after healing.
func FinalPeek(ctx context.Context, c *Cluster, policy string, keys []string) (map[string]int64, error) {
	out := map[string]int64{}
	deadline := time.Now().Add(30 * time.Second)
	for _, key := range keys {
		for {
			leader, err := c.Leader(ctx)
			if err == nil {
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				var resp *connect.Response[quoratev1.PeekResponse]
				resp, err = c.Admission(leader).Peek(cctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: policy, Key: key}))
				cancel()
				if err == nil {
					out[key] = resp.Msg.GetRemaining()
					break
				}
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return out, fmt.Errorf("jepsen: final peek %q: %w", key, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return out, nil
}
