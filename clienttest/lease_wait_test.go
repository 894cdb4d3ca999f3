package clienttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// leaseWaiters is how many AcquireLease callers of policy the cluster's
// nodes hold parked for a slot, and the oldest one's wait so far.
func leaseWaiters(t *testing.T, c *nodetest.Cluster, policy string) (n, oldest float64) {
	t.Helper()
	for i := range c.Len() {
		if !c.Running(i) {
			continue
		}
		mfs, err := c.Node(i).Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["policy"] != policy || labels["kind"] != "lease" {
					continue
				}
				switch mf.GetName() {
				case "quorate_pacing_waiting":
					n += m.GetGauge().GetValue()
				case "quorate_pacing_oldest_wait_seconds":
					oldest = max(oldest, m.GetGauge().GetValue())
				}
			}
		}
	}
	return n, oldest
}

// remaining is what policy leaves key now.
func remaining(t *testing.T, cl *client.Client, policy, key string) int64 {
	t.Helper()
	p, err := cl.Peek(context.Background(), policy, key)
	if err != nil {
		t.Fatal(err)
	}
	return p.Remaining
}

// TestLeaseWaitsAndHoldsAReservation: an acquire with MaxWait waits, past
// the client's Timeout, for the slot a release frees; a lease acquired
// with a reservation holds its estimate while it lives, and its release
// charges the real cost (ReleaseOptions.ActualCost) or, without one, the
// whole estimate.
func TestLeaseWaitsAndHoldsAReservation(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c,
		&quoratev1.Policy{Name: "jobs", Algorithm: "concurrency", Limit: 1, LeaseTtl: durationpb.New(time.Minute)},
		longBucket("spend", 100))
	// A short Timeout: the parked acquire outlives it only by its MaxWait.
	cl := newClient(t, c, client.Config{Timeout: 300 * time.Millisecond})
	ctx := context.Background()

	first, err := cl.AcquireLeaseWith(ctx, "jobs", "k", client.LeaseOptions{ManualRenew: true, ReservePolicy: "spend", ReserveEstimate: 30})
	if err != nil {
		t.Fatal(err)
	}
	if first.ReservationID() == "" || first.Waited() != 0 {
		t.Fatalf("first lease: reservation %q, waited %v; want a reservation, no wait", first.ReservationID(), first.Waited())
	}
	if r := remaining(t, cl, "spend", "k"); r != 70 {
		t.Fatalf("spend left %d with the first lease's 30 held, want 70", r)
	}

	type acquired struct {
		l   *client.Lease
		err error
	}
	got := make(chan acquired, 1)
	go func() {
		l, err := cl.AcquireLeaseWith(ctx, "jobs", "k", client.LeaseOptions{MaxWait: 30 * time.Second, ReservePolicy: "spend", ReserveEstimate: 50})
		got <- acquired{l, err}
	}()
	// Parked for longer than the client's Timeout before the slot frees.
	c.Eventually(t, 20*time.Second, "the second acquire parked past the client's Timeout", func() error {
		if n, oldest := leaseWaiters(t, c, "jobs"); n != 1 || oldest < 0.6 {
			return fmt.Errorf("%v lease callers waiting, the oldest for %vs; want 1 for > 0.6s", n, oldest)
		}
		return nil
	})
	actual := int64(10)
	rel, err := first.ReleaseWith(ctx, client.ReleaseOptions{ActualCost: &actual})
	if err != nil {
		t.Fatal(err)
	}
	if s := rel.Settled; s == nil || s.Charged != 10 || s.Released != 20 || s.Over != 0 || s.Duplicate {
		t.Fatalf("release with actual cost 10 of an estimate of 30 settled %+v, want 10 charged, 20 released", s)
	}
	var second acquired
	select {
	case second = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the parked acquire was not answered after the slot freed")
	}
	if second.err != nil {
		t.Fatalf("the parked acquire: %v", second.err)
	}
	l := second.l
	if l.Waited() < 600*time.Millisecond || l.ReservationID() == "" || l.DecidedAt().Before(rel.DecidedAt) {
		t.Fatalf("the parked acquire: waited %v, reservation %q, decided %v (release decided %v); want > 600ms, a reservation, after the release",
			l.Waited(), l.ReservationID(), l.DecidedAt(), rel.DecidedAt)
	}
	if r := remaining(t, cl, "spend", "k"); r != 40 {
		t.Fatalf("spend left %d after 10 charged and 50 held, want 40", r)
	}
	if err := l.Context().Err(); err != nil {
		t.Fatalf("the waited lease's context ended: %v", context.Cause(l.Context()))
	}
	// Without an actual cost, the release charges the whole estimate.
	rel, err = l.ReleaseWith(ctx, client.ReleaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := rel.Settled; s == nil || s.Charged != 50 || s.Released != 0 {
		t.Fatalf("release without an actual cost settled %+v, want the estimate of 50 charged", s)
	}
	if r := remaining(t, cl, "spend", "k"); r != 40 {
		t.Fatalf("spend left %d after 10 and 50 charged, want 40", r)
	}

	// A lease without a reservation: no settlement, an actual cost refused.
	plain, err := cl.AcquireLeaseWith(ctx, "jobs", "k", client.LeaseOptions{ManualRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	if plain.ReservationID() != "" {
		t.Fatalf("a lease without a reservation names one: %q", plain.ReservationID())
	}
	if _, err := plain.ReleaseWith(ctx, client.ReleaseOptions{ActualCost: &actual}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("an actual cost for a lease without a reservation: %v, want InvalidArgument", err)
	}
}

// TestLeaseOptionsRefused: bad LeaseOptions are refused, each naming its
// field, and hold nothing.
func TestLeaseOptionsRefused(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c,
		&quoratev1.Policy{Name: "jobs", Algorithm: "concurrency", Limit: 1, LeaseTtl: durationpb.New(time.Minute)},
		longBucket("spend", 100))
	cl := newClient(t, c, client.Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		opts  client.LeaseOptions
		field string
	}{
		{"negative wait", client.LeaseOptions{MaxWait: -time.Second}, "MaxWait"},
		{"wait over a minute", client.LeaseOptions{MaxWait: 2 * time.Minute}, "max_wait"},
		{"estimate without a policy", client.LeaseOptions{ReserveEstimate: 5}, "reserve_policy"},
		{"policy without an estimate", client.LeaseOptions{ReservePolicy: "spend"}, "reserve_estimate"},
		{"a concurrency policy to reserve", client.LeaseOptions{ReservePolicy: "jobs", ReserveEstimate: 1}, "reserve_policy"},
		{"an estimate over the limit", client.LeaseOptions{ReservePolicy: "spend", ReserveEstimate: 1000}, "reserve_estimate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cl.AcquireLeaseWith(ctx, "jobs", "k", tc.opts)
			var denied *client.LeaseDeniedError
			if err == nil || errors.As(err, &denied) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("%+v: %v, want an error naming %s", tc.opts, err, tc.field)
			}
		})
	}
	// Nothing was held: the one slot and the whole bucket are free.
	l, err := cl.AcquireLeaseWith(ctx, "jobs", "k", client.LeaseOptions{ManualRenew: true})
	if err != nil {
		t.Fatalf("the slot after the refusals: %v", err)
	}
	if r := remaining(t, cl, "spend", "k"); r != 100 {
		t.Fatalf("spend left %d after the refusals, want 100", r)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
