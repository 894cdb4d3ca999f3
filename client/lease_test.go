package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestLease: a lease renews itself past its ttl, holds its fence, ends its
// context when released, and when lost (the cluster stopped).
func TestLease(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c, &quoratev1.Policy{Name: "jobs", Algorithm: "concurrency", Limit: 1, LeaseTtl: durationpb.New(time.Second)})
	cl := newClient(t, c, client.Config{})
	ctx := context.Background()

	l, err := cl.AcquireLease(ctx, "jobs", "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	var denied *client.LeaseDeniedError
	if _, err := cl.AcquireLease(ctx, "jobs", "a", 0); !errors.As(err, &denied) {
		t.Fatalf("second lease of a one-slot key: %v, want a denial", err)
	}
	c.Eventually(t, 10*time.Second, "renewed past its ttl", func() error {
		if n := l.Renewals(); n < 3 || time.Since(acquired) < 1500*time.Millisecond {
			return fmt.Errorf("%d renewals", n)
		}
		return nil
	})
	if held, _, err := cl.CheckFence(ctx, "jobs", "a", l.Token()); err != nil || !held {
		t.Fatalf("fence of a renewed lease: held %v, %v", held, err)
	}
	if l.Context().Err() != nil {
		t.Fatalf("lease context ended: %v", context.Cause(l.Context()))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(l.Context()), client.ErrLeaseReleased) {
		t.Fatalf("after release: cause %v", context.Cause(l.Context()))
	}
	if held, _, err := cl.CheckFence(ctx, "jobs", "a", l.Token()); err != nil || held {
		t.Fatalf("fence of a released lease: held %v, %v", held, err)
	}

	lost, err := cl.AcquireLease(ctx, "jobs", "b", 0)
	if err != nil {
		t.Fatal(err)
	}
	if lost.Token() <= 0 {
		t.Fatalf("token %d", lost.Token())
	}
	for i := range c.Len() {
		c.Stop(i)
	}
	select {
	case <-lost.Context().Done():
		if !errors.Is(context.Cause(lost.Context()), client.ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", context.Cause(lost.Context()))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lease context outlived the cluster by 10s")
	}
}
