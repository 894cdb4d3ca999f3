package node_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// forwardedStep is one data call and how many forwarded calls it counts
// when a follower forwards it.
type forwardedStep struct {
	name  string
	items uint64
	call  func(ctx context.Context, i int) (http.Header, error)
}

// Data calls sent to the leader leave every node's forwarded_calls as they
// were and carry no Quorate-Leader header; the same calls sent to a
// follower count on it (each item of an AdmitBatch once) and carry the
// header naming the leader, an error answer too.
func TestForwardedCallsCountedAndMarked(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c, tbPolicy("fw", 1_000_000, longPeriod, 1_000_000))
	applyConcurrency(t, c, "fw-sem", 1000, time.Minute)
	seq := 0
	rid := func() string { seq++; return fmt.Sprintf("fw-%d", seq) }
	steps := []forwardedStep{
		{"admit", 1, func(ctx context.Context, i int) (http.Header, error) {
			r, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "fw", Key: "k", Caller: "t", RequestId: rid()}))
			return header(r, err)
		}},
		{"admit without request ID", 1, func(ctx context.Context, i int) (http.Header, error) {
			r, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "fw", Key: "k"}))
			return header(r, err)
		}},
		{"admit batch", 3, func(ctx context.Context, i int) (http.Header, error) {
			r, err := c.Admission(i).AdmitBatch(ctx, connect.NewRequest(&quoratev1.AdmitBatchRequest{Requests: []*quoratev1.AdmitRequest{
				{Policy: "fw", Key: "a"}, {Policy: "fw", Key: "b"}, {Policy: "fw", Key: "c"}}}))
			return header(r, err)
		}},
		{"peek", 1, func(ctx context.Context, i int) (http.Header, error) {
			r, err := c.Admission(i).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: "fw", Key: "k"}))
			return header(r, err)
		}},
		{"reserve", 1, func(ctx context.Context, i int) (http.Header, error) {
			r, err := c.Admission(i).Reserve(ctx, connect.NewRequest(&quoratev1.ReserveRequest{Policy: "fw", Key: "k", Estimate: 1, Ttl: durationpb.New(time.Minute)}))
			return header(r, err)
		}},
		{"acquire lease", 1, func(ctx context.Context, i int) (http.Header, error) {
			r, err := c.Lease(i).AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{Policy: "fw-sem", Key: "k", Ttl: durationpb.New(time.Minute)}))
			return header(r, err)
		}},
		{"refund (refused by the leader)", 1, func(ctx context.Context, i int) (http.Header, error) {
			_, err := c.Admission(i).Refund(ctx, connect.NewRequest(&quoratev1.RefundRequest{Key: "k", Caller: "t", RequestId: "never-admitted"}))
			var ce *connect.Error
			if !errors.As(err, &ce) || connect.CodeOf(err) == connect.CodeUnavailable {
				return nil, fmt.Errorf("refund of nothing: %v, want the leader's refusal", err)
			}
			return ce.Meta(), nil
		}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, s := range steps {
		// Retried if the leader changes meanwhile (nothing does that here,
		// but an election would not be a bug).
		c.Eventually(t, 30*time.Second, s.name, func() error {
			leader := c.Leader(t)
			follower := (leader + 1) % c.Len()
			leaderID := c.Config(leader).ID
			before := forwardedCalls(t, c)
			h, err := s.call(ctx, leader)
			if err != nil {
				return err
			}
			if v := h.Values("Quorate-Leader"); len(v) > 0 {
				return fmt.Errorf("%s on the leader: Quorate-Leader %q", s.name, v)
			}
			h, err = s.call(ctx, follower)
			if err != nil {
				return err
			}
			after := forwardedCalls(t, c)
			if c.Leader(t) != leader {
				return errors.New("the leader changed")
			}
			for i := range c.Len() {
				want := before[i]
				if i == follower {
					want += s.items
				}
				if after[i] != want {
					t.Fatalf("%s: node %d forwarded_calls %d → %d, want %d", s.name, i, before[i], after[i], want)
				}
			}
			if v := h.Values("Quorate-Leader"); len(v) != 1 || v[0] != leaderID {
				t.Fatalf("%s on a follower: Quorate-Leader %q, want [%s]", s.name, v, leaderID)
			}
			return nil
		})
	}
}

// header is the response header of a unary call's answer.
func header[T any](r *connect.Response[T], err error) (http.Header, error) {
	if err != nil {
		return nil, err
	}
	return r.Header(), nil
}
