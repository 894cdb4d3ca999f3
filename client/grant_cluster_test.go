package client_test

import (
	"context"
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
// goroutines each admit on one key of a fixed window until they are
// denied. Most decisions are made in memory from grants, every denial
// comes from the cluster, and once the clients close (releasing their
// grants) what they admitted plus what the key has left is exactly the
// limit, less what the clients counted as wasted.
func TestGrantsOnACluster(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	const limit = 3000
	applyPolicies(t, c, &quoratev1.Policy{Name: "hot", Algorithm: "fixed_window", Limit: limit, Period: durationpb.New(24 * time.Hour),
		Local: &quoratev1.LocalDecisions{Mode: "reserve", MaxGrant: proto.Int64(200), Ttl: durationpb.New(10 * time.Second)}})
	var clients []*client.Client
	for range 4 {
		clients = append(clients, newClient(t, c, client.Config{}))
	}
	var allowed, local, denied atomic.Int64
	var wg sync.WaitGroup
	for _, cl := range clients {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var d client.Decision
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					err := cl.AdmitInto(ctx, &client.Request{Policy: "hot", Key: "{k}"}, &d)
					cancel()
					if err != nil {
						t.Error(err)
						return
					}
					switch {
					case !d.Allowed:
						if d.Outcome != client.Verified {
							t.Errorf("a denial not from the cluster: %v", d.Outcome)
						}
						denied.Add(1)
						return
					case d.Outcome == client.LocalGrant:
						local.Add(1)
					}
					allowed.Add(1)
				}
			}()
		}
	}
	wg.Wait()
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
	peek, err := c.Admission(0).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: "hot", Key: "{k}"}))
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
