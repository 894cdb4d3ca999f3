package node_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// applyPolicy stores one token-bucket policy through node 0.
func applyPolicy(tb testing.TB, c *nodetest.Cluster, name string, limit int64, period time.Duration, burst int64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{
		Policies: []*quoratev1.Policy{{
			Name: name, Algorithm: "token_bucket", Limit: limit, Period: durationpb.New(period), Burst: nonZero(burst),
		}},
	}))
	if err != nil {
		tb.Fatalf("apply policy %s: %v", name, err)
	}
}

// admitSeq numbers the request IDs admit gives its requests.
var admitSeq atomic.Int64

// admit asks node i for cost units (0: unset) as a careful client does: with
// a fresh request ID, retried with that same ID on the next node while the
// answer is Unavailable, so a leader change under load neither loses nor
// doubles the request.
func admit(ctx context.Context, c *nodetest.Cluster, i int, policy, key string, cost int64) (*quoratev1.AdmitResponse, error) {
	req := &quoratev1.AdmitRequest{Policy: policy, Key: key, Caller: "test", RequestId: fmt.Sprintf("admit-%d", admitSeq.Add(1))}
	if cost != 0 {
		req.Cost = &cost
	}
	for try := 0; ; try++ {
		resp, err := c.Admission((i+try)%c.Len()).Admit(ctx, connect.NewRequest(req))
		if err == nil {
			return resp.Msg, nil
		}
		if connect.CodeOf(err) != connect.CodeUnavailable || ctx.Err() != nil {
			return nil, err
		}
	}
}

// The seed's concurrency test: capacity 20, 100 concurrent Admits spread over
// all three nodes → exactly 20 allowed, for every algorithm.
func TestConcurrentAdmitsAcrossNodesAllowExactlyCapacity(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Periods so long that neither refill nor a window boundary can fall
	// inside the test (fixed windows align to the epoch: a 366-day window
	// ends once a year; a calendar year once a year).
	policies := []*quoratev1.Policy{
		{Name: "tb", Algorithm: "token_bucket", Limit: 20, Period: durationpb.New(24 * time.Hour), Burst: proto.Int64(20)},
		{Name: "fw", Algorithm: "fixed_window", Limit: 20, Period: durationpb.New(366 * 24 * time.Hour)},
		{Name: "sw", Algorithm: "sliding_window", Limit: 20, Period: durationpb.New(366 * 24 * time.Hour)},
		{Name: "sl", Algorithm: "sliding_log", Limit: 20, Period: durationpb.New(24 * time.Hour)},
		{Name: "q", Algorithm: "quota", Limit: 20, Calendar: "year"},
	}
	if _, err := c.Admin(1).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: policies})); err != nil {
		t.Fatal(err)
	}
	for _, p := range policies {
		t.Run(p.GetAlgorithm(), func(t *testing.T) {
			var allowed, denied atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 100)
			for i := range 100 {
				wg.Go(func() {
					// As a client would: retry an unanswered request with the
					// same request ID (on the next node) until it is answered,
					// so a leader change under load cannot lose or double it.
					id := fmt.Sprintf("%s-%d", p.GetName(), i)
					resp, err := admitID(ctx, c, i%3, p.GetName(), "tenant:acme", "test", id)
					for try := 1; err != nil && connect.CodeOf(err) == connect.CodeUnavailable && ctx.Err() == nil; try++ {
						resp, err = admitID(ctx, c, (i+try)%3, p.GetName(), "tenant:acme", "test", id)
					}
					if err != nil {
						errs <- err
						return
					}
					if resp.GetAllowed() {
						allowed.Add(1)
					} else {
						denied.Add(1)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("admit: %v", err)
			}
			if allowed.Load() != 20 || denied.Load() != 80 {
				t.Fatalf("allowed %d, denied %d; want exactly 20 and 80", allowed.Load(), denied.Load())
			}
			// The next decision on any node sees nothing left.
			for i := range 3 {
				id := fmt.Sprintf("%s-after-%d", p.GetName(), i)
				resp, err := admitID(ctx, c, i, p.GetName(), "tenant:acme", "test", id)
				for try := 1; err != nil && connect.CodeOf(err) == connect.CodeUnavailable && ctx.Err() == nil; try++ {
					resp, err = admitID(ctx, c, (i+try)%3, p.GetName(), "tenant:acme", "test", id)
				}
				if err != nil {
					t.Fatal(err)
				}
				if resp.GetAllowed() || resp.GetRemaining() != 0 || resp.GetLimit() != 20 || resp.GetRetryAfter().AsDuration() <= 0 {
					t.Fatalf("node %d after the burst: %v", i, resp)
				}
			}
		})
	}
}
