package clienttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
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
	if f, err := l.CheckFence(ctx); err != nil || !f.Held || f.DecidedAt.IsZero() || !f.ExpiresAt.After(f.DecidedAt) {
		t.Fatalf("fence of a renewed lease: %+v, %v", f, err)
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
	if f, err := l.CheckFence(ctx); err != nil || f.Held || f.DecidedAt.IsZero() || !f.ExpiresAt.IsZero() {
		t.Fatalf("fence of a released lease: %+v, %v", f, err)
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

// TestManualRenew: a lease acquired with ManualRenew is renewed only by
// Renew, whose answers carry log times that only move forward and update
// ExpiresAt; left alone, it expires, and a Renew then finds it lost.
func TestManualRenew(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c, &quoratev1.Policy{Name: "jobs", Algorithm: "concurrency", Limit: 1, LeaseTtl: durationpb.New(time.Minute)})
	cl := newClient(t, c, client.Config{})
	ctx := context.Background()

	l, err := cl.AcquireLeaseWith(ctx, "jobs", "m", client.LeaseOptions{TTL: time.Second, ManualRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	if l.Duplicate() || l.DecidedAt().IsZero() || l.ExpiresAt().Sub(l.DecidedAt()) != time.Second || len(l.RequestID()) != 32 {
		t.Fatalf("acquired: duplicate %v, decided %v, expires %v, request ID %q", l.Duplicate(), l.DecidedAt(), l.ExpiresAt(), l.RequestID())
	}
	decided, expires := l.DecidedAt(), l.ExpiresAt()
	for i := range 3 {
		a, err := l.Renew(ctx)
		if err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
		if a.Duplicate || a.DecidedAt.Before(decided) || a.ExpiresAt.Before(expires) || a.ExpiresAt.Sub(a.DecidedAt) != time.Second {
			t.Fatalf("renewal %d: %+v after decided %v expires %v", i, a, decided, expires)
		}
		if !l.ExpiresAt().Equal(a.ExpiresAt) {
			t.Fatalf("renewal %d: ExpiresAt %v, the answer's %v", i, l.ExpiresAt(), a.ExpiresAt)
		}
		decided, expires = a.DecidedAt, a.ExpiresAt
	}
	if n := l.Renewals(); n != 3 {
		t.Fatalf("%d renewals, want the 3 of Renew", n)
	}
	f, err := l.CheckFence(ctx)
	if err != nil || !f.Held || !f.ExpiresAt.Equal(expires) || f.DecidedAt.Before(decided) {
		t.Fatalf("fence after the renewals: %+v, %v; want held until %v", f, err, expires)
	}

	// Nobody renews it: it expires.
	c.Eventually(t, 10*time.Second, "the manual lease expired", func() error {
		f, err := l.CheckFence(ctx)
		if err != nil || f.Held {
			return fmt.Errorf("fence %+v, %v", f, err)
		}
		return nil
	})
	if l.Context().Err() != nil {
		t.Fatalf("the context of a manual lease ended before a Renew found it lost: %v", context.Cause(l.Context()))
	}
	_, err = l.Renew(ctx)
	if !errors.Is(err, client.ErrLeaseLost) || connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("renewal of an expired lease: %v, want ErrLeaseLost (FailedPrecondition)", err)
	}
	if !errors.Is(context.Cause(l.Context()), client.ErrLeaseLost) {
		t.Fatalf("after a refused renewal: cause %v", context.Cause(l.Context()))
	}
	if next, err := cl.AcquireLeaseWith(ctx, "jobs", "m", client.LeaseOptions{TTL: time.Second, ManualRenew: true}); err != nil || next.Token() <= l.Token() {
		t.Fatalf("after expiry: %v; token must exceed %d", err, l.Token())
	}
}

// TestAbandon: an abandoned lease is no longer renewed nor released; its
// slot frees when it expires.
func TestAbandon(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c, &quoratev1.Policy{Name: "jobs", Algorithm: "concurrency", Limit: 1, LeaseTtl: durationpb.New(time.Second)})
	cl := newClient(t, c, client.Config{})
	ctx := context.Background()

	l, err := cl.AcquireLease(ctx, "jobs", "x", 0)
	if err != nil {
		t.Fatal(err)
	}
	first := l.ExpiresAt()
	c.Eventually(t, 10*time.Second, "renewed", func() error {
		if n := l.Renewals(); n < 1 {
			return fmt.Errorf("%d renewals", n)
		}
		return nil
	})
	if !l.ExpiresAt().After(first) {
		t.Fatalf("ExpiresAt %v after a renewal, not after the acquire's %v", l.ExpiresAt(), first)
	}
	l.Abandon()
	if !errors.Is(context.Cause(l.Context()), client.ErrLeaseAbandoned) {
		t.Fatalf("after Abandon: cause %v", context.Cause(l.Context()))
	}
	renewals := l.Renewals()
	c.Eventually(t, 10*time.Second, "the abandoned lease expired", func() error {
		f, err := l.CheckFence(ctx)
		if err != nil || f.Held {
			return fmt.Errorf("fence %+v, %v", f, err)
		}
		if f.DecidedAt.Before(l.ExpiresAt()) {
			return fmt.Errorf("not held at %v, before the expiry %v the lease was given", f.DecidedAt, l.ExpiresAt())
		}
		return nil
	})
	if n := l.Renewals(); n != renewals {
		t.Fatalf("renewed %d times after Abandon", n-renewals)
	}
	next, err := cl.AcquireLease(ctx, "jobs", "x", 0)
	if err != nil {
		t.Fatalf("the slot did not free on expiry: %v", err)
	}
	if next.Token() <= l.Token() {
		t.Fatalf("token %d after %d", next.Token(), l.Token())
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseSameIDIsDuplicate: an acquire, renewal or release sent again
// with the request ID of one that was applied gets the recorded answer,
// marked duplicate, and spends no slot.
func TestLeaseSameIDIsDuplicate(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c, &quoratev1.Policy{Name: "jobs", Algorithm: "concurrency", Limit: 1, LeaseTtl: durationpb.New(time.Minute)})
	cl := newClient(t, c, client.Config{})
	ctx := context.Background()
	opts := client.LeaseOptions{RequestID: "acq-1", ManualRenew: true}

	l, err := cl.AcquireLeaseWith(ctx, "jobs", "d", opts)
	if err != nil || l.Duplicate() || l.RequestID() != "acq-1" {
		t.Fatalf("first acquire: %v, duplicate %v", err, l != nil && l.Duplicate())
	}
	again, err := cl.AcquireLeaseWith(ctx, "jobs", "d", opts)
	if err != nil {
		t.Fatalf("the same acquire again, on a one-slot key: %v, want its recorded answer", err)
	}
	if !again.Duplicate() || again.ID() != l.ID() || again.Token() != l.Token() || !again.DecidedAt().Equal(l.DecidedAt()) {
		t.Fatalf("the same acquire again: lease %s token %d decided %v duplicate %v; want lease %s token %d decided %v, duplicate",
			again.ID(), again.Token(), again.DecidedAt(), again.Duplicate(), l.ID(), l.Token(), l.DecidedAt())
	}
	again.Abandon()

	r1, err := l.RenewWithID(ctx, "renew-1")
	if err != nil || r1.Duplicate || r1.RequestID != "renew-1" {
		t.Fatalf("renewal: %+v, %v", r1, err)
	}
	r2, err := l.RenewWithID(ctx, "renew-1")
	if err != nil || !r2.Duplicate || !r2.DecidedAt.Equal(r1.DecidedAt) || !r2.ExpiresAt.Equal(r1.ExpiresAt) {
		t.Fatalf("the same renewal again: %+v, %v; want the recorded %+v, duplicate", r2, err, r1)
	}

	rel1, err := l.ReleaseWith(ctx, client.ReleaseOptions{RequestID: "release-1"})
	if err != nil || rel1.Duplicate || rel1.DecidedAt.Before(r1.DecidedAt) {
		t.Fatalf("release: %+v, %v", rel1, err)
	}
	rel2, err := l.ReleaseWith(ctx, client.ReleaseOptions{RequestID: "release-1"})
	if err != nil || !rel2.Duplicate || !rel2.DecidedAt.Equal(rel1.DecidedAt) {
		t.Fatalf("the same release again: %+v, %v; want the recorded %+v, duplicate", rel2, err, rel1)
	}
	if _, err := l.ReleaseWith(ctx, client.ReleaseOptions{RequestID: "release-2"}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("a second release: %v, want FailedPrecondition", err)
	}
	if _, err := l.RenewWithID(ctx, "renew-2"); !errors.Is(err, client.ErrLeaseLost) || connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("a renewal of the released lease: %v, want ErrLeaseLost (FailedPrecondition)", err)
	}
}
