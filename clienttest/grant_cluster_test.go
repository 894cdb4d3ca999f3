package clienttest

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Budget leases against a real 3-node cluster: four clients with eight
// goroutines each admit on one key until they are denied, on a fixed
// window and on a token bucket that does not refill within the test. Most
// decisions are made in memory from grants, every denial comes from the
// cluster, and once the clients close (releasing their grants) what they
// admitted plus what the key has left is exactly the limit, less what the
// clients counted as wasted.
func TestGrantsOnACluster(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	const limit = 3000
	local := &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(200), Ttl: durationpb.New(10 * time.Second)}
	applyPolicies(t, c,
		&quoratev1.Policy{Name: "window", Algorithm: "fixed_window", Limit: limit, Period: durationpb.New(24 * time.Hour), Local: local},
		// limit = burst over 366 days: not a unit refills in the test.
		&quoratev1.Policy{Name: "bucket", Algorithm: "token_bucket", Limit: limit, Burst: proto.Int64(limit),
			Period: durationpb.New(366 * 24 * time.Hour), Local: local})
	for _, policy := range []string{"window", "bucket"} {
		t.Run(policy, func(t *testing.T) { grantUntilDenied(t, c, policy, limit) })
	}
}

func grantUntilDenied(t *testing.T, c *nodetest.Cluster, policy string, limit int64) {
	var clients []*client.Client
	for range 4 {
		clients = append(clients, newClient(t, c, client.Config{}))
	}
	var allowed, local, denied atomic.Int64
	admitFrom(t, clients, 8, client.Request{Policy: policy, Key: "{k}"}, func(d *client.Decision) bool {
		switch {
		case !d.Allowed:
			denied.Add(1)
			return false
		case d.Outcome == client.LocalGrant:
			local.Add(1)
		}
		allowed.Add(1)
		return true
	})
	var wasted, granted, returned int64
	for _, cl := range clients {
		if err := cl.Close(); err != nil {
			t.Fatal(err)
		}
		s := cl.Stats()
		wasted += int64(s.UnitsWasted)
		granted += int64(s.UnitsGranted)
		returned += int64(s.UnitsReturned)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	peek, err := c.Admission(0).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: policy, Key: "{k}"}))
	if err != nil {
		t.Fatal(err)
	}
	left := peek.Msg.GetRemaining()
	t.Logf("allowed %d (%d locally), denied %d, granted %d, returned %d, wasted %d, left %d",
		allowed.Load(), local.Load(), denied.Load(), granted, returned, wasted, left)
	if got := allowed.Load() + left + wasted; got != limit {
		t.Errorf("allowed %d + left %d + wasted %d = %d, want the limit %d", allowed.Load(), left, wasted, got, limit)
	}
	if allowed.Load() > limit {
		t.Errorf("allowed %d > limit %d", allowed.Load(), limit)
	}
	if local.Load() < allowed.Load()/2 {
		t.Errorf("only %d of %d decisions were local", local.Load(), allowed.Load())
	}
}

// The local-plus-global mode against a real 3-node cluster: three clients
// with four goroutines each offer far more than a fixed window's limit
// (1000 a second, sync_interval 100ms, so the bound is 100) for several
// windows. Counting every admit in the window of its DecidedAt (a local
// one's is the log time of the allowance it was admitted from), no window
// admits more than limit + bound; the measured overshoot and the fraction
// of decisions made locally are logged.
func TestSyncOnACluster(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	const limit, bound, period = 1000, 100, time.Second
	applyPolicies(t, c, &quoratev1.Policy{Name: "sync", Algorithm: "fixed_window", Limit: limit, Period: durationpb.New(period),
		Local: &quoratev1.LocalDecisions{Mode: "sync", SyncInterval: durationpb.New(100 * time.Millisecond)}})
	var clients []*client.Client
	for range 3 {
		clients = append(clients, newClient(t, c, client.Config{}))
	}
	// Admits by window of their DecidedAt, from the window the test
	// starts in.
	var perWindow [8]atomic.Int64
	first := time.Now().UnixNano() / int64(period)
	var local, strict, denied atomic.Int64
	end := time.Now().Add(4500 * time.Millisecond)
	admitFrom(t, clients, 4, client.Request{Policy: "sync", Key: "{k}"}, func(d *client.Decision) bool {
		switch {
		case !d.Allowed:
			denied.Add(1)
			return time.Now().Before(end)
		case d.Outcome == client.LocalGrant:
			local.Add(1)
		default:
			strict.Add(1)
		}
		w := d.DecidedAt.UnixNano()/int64(period) - first
		if w < 0 || w >= int64(len(perWindow)) {
			t.Errorf("an admit decided at %v, outside the test's windows", d.DecidedAt)
			return false
		}
		perWindow[w].Add(1)
		return time.Now().Before(end)
	})
	for _, cl := range clients {
		if err := cl.Close(); err != nil {
			t.Fatal(err)
		}
	}
	overshoot, windows := int64(math.MinInt64), 0
	for w := range perWindow {
		n := perWindow[w].Load()
		if n == 0 {
			continue
		}
		windows++
		t.Logf("window %d: admitted %d (limit %d, bound %d)", w, n, limit, bound)
		overshoot = max(overshoot, n-limit)
		if n > limit+bound {
			t.Errorf("window %d admitted %d > limit %d + bound %d", w, n, limit, bound)
		}
	}
	allowed := local.Load() + strict.Load()
	t.Logf("measured overshoot %d (bound %d) over %d windows; allowed %d, %.1f%% locally; denied %d",
		overshoot, bound, windows, allowed, 100*float64(local.Load())/float64(max(allowed, 1)), denied.Load())
	if local.Load() < allowed/2 {
		t.Errorf("only %d of %d admits were local", local.Load(), allowed)
	}
}

// admitFrom admits r from goroutines goroutines of each client, each
// calling AdmitInto until seen, given each decision, returns false. A
// denial not from the cluster, or an error, fails t.
func admitFrom(t *testing.T, clients []*client.Client, goroutines int, r client.Request, seen func(*client.Decision) bool) {
	var wg sync.WaitGroup
	for _, cl := range clients {
		for range goroutines {
			wg.Go(func() {
				r := r
				var d client.Decision
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					err := cl.AdmitInto(ctx, &r, &d)
					cancel()
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed && d.Outcome != client.Verified {
						t.Errorf("a denial not from the cluster: %v", d.Outcome)
					}
					if !seen(&d) {
						return
					}
				}
			})
		}
	}
	wg.Wait()
}
