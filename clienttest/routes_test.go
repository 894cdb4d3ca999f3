package clienttest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// keysIn returns n keys whose slots lie in r.
func keysIn(r shard.SlotRange, n int) []string {
	var out []string
	for k := 0; len(out) < n; k++ {
		if key := fmt.Sprintf("key-%d", k); r.Contains(shard.SlotOf(key)) {
			out = append(out, key)
		}
	}
	return out
}

// admitAll admits once on every key, failing the test on any error.
func admitAll(t *testing.T, cl *client.Client, keys []string) {
	t.Helper()
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := cl.Admit(ctx, client.Request{Policy: "p", Key: k, NoFallback: true})
		cancel()
		if err != nil || !d.Allowed {
			t.Fatalf("admit %s: %+v, %v", k, d, err)
		}
	}
}

// layout is what the routes depend on: the shard map's epoch and every
// group's leader.
func layout(c *nodetest.Cluster) string {
	out := ""
	for i := range c.Len() {
		if nd := c.Node(i); nd != nil {
			var epoch uint64
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			if r, err := c.Admission(i).Routes(ctx, connect.NewRequest(&quoratev1.RoutesRequest{})); err == nil {
				epoch = r.Msg.GetEpoch()
			}
			cancel()
			out += fmt.Sprintf("node%d epoch %d:", i+1, epoch)
			for _, g := range nd.Status().GetGroups() {
				if g.GetRole() == "leader" {
					out += fmt.Sprintf(" g%d", g.GetId())
				}
			}
			out += "; "
		}
	}
	return out
}

// steadyNoForwards checks that once the client learnt the routes, no call
// on keys is forwarded by any node: after a round that lets the client
// learn, three more rounds must not be forwarded at all, unless the map or a
// group's leader changed meanwhile (then it tries again).
func steadyNoForwards(t *testing.T, c *nodetest.Cluster, cl *client.Client, keys []string) {
	t.Helper()
	c.Eventually(t, 30*time.Second, "a steady layout", func() error {
		was := layout(c)
		admitAll(t, cl, keys)
		before := forwarded(c)
		for range 3 {
			admitAll(t, cl, keys)
		}
		n := forwarded(c) - before
		if now := layout(c); now != was {
			return fmt.Errorf("the layout changed: %s → %s", was, now)
		}
		if n != 0 {
			t.Fatalf("steady state (%s): %d of %d calls forwarded", was, n, 3*len(keys))
		}
		return nil
	})
}

// TestRoutesToLeadersAndFollowsSlotMove: with two data groups the client
// sends every call straight to its group's leader (no node forwards
// anything), and a slot move under traffic costs no error beyond retries,
// after which the calls go straight to the new owner's leader.
func TestRoutesToLeadersAndFollowsSlotMove(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
	}})
	var g1 shard.SlotRange
	c.Eventually(t, 30*time.Second, "two data groups formed", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return err
		}
		groups := resp.Msg.GetShardMap().GetGroups()
		if len(groups) != 2 {
			return fmt.Errorf("%d groups", len(groups))
		}
		for _, g := range groups {
			if g.GetForming() {
				return fmt.Errorf("group %d forming", g.GetId())
			}
			if g.GetId() == 1 {
				g1 = shard.SlotRange{Start: 0, End: shard.Slot(g.GetSlots())}
			}
		}
		return nil
	})
	const capacity = 1_000_000
	applyPolicies(t, c, longBucket("p", capacity))
	cl := newClient(t, c, client.Config{})
	keys := keysIn(shard.AllSlots(), 32)
	steadyNoForwards(t, c, cl, keys)

	// Traffic on the moving slots while they move from group 1 to 2.
	moving := shard.SlotRange{Start: g1.End - 64, End: g1.End}
	movingKeys := keysIn(moving, 4)
	stop := make(chan struct{})
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(movingKeys))
	for _, k := range movingKeys {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				d, err := cl.Admit(ctx, client.Request{Policy: "p", Key: k, NoFallback: true})
				cancel()
				if err != nil || !d.Allowed {
					errs <- fmt.Errorf("admit %s during the move: %+v, %v", k, d, err)
					return
				}
				n.Add(1)
			}
		})
	}
	var plan uint64
	c.Eventually(t, 20*time.Second, "move started", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.Admin(1).MoveSlots(ctx, connect.NewRequest(&quoratev1.MoveSlotsRequest{
			From: 1, To: 2, Start: uint32(moving.Start), End: uint32(moving.End)}))
		if err != nil {
			return err
		}
		plan = resp.Msg.GetPlan().GetId()
		return nil
	})
	c.Eventually(t, 60*time.Second, "move done", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := c.Admin(0).ListPlans(ctx, connect.NewRequest(&quoratev1.ListPlansRequest{}))
		if err != nil {
			return err
		}
		for _, p := range resp.Msg.GetPlans() {
			if p.GetId() == plan {
				switch p.GetState() {
				case "done":
					return nil
				case "failed", "cancelled":
					t.Fatalf("plan %d %s: %s", plan, p.GetState(), p.GetError())
				}
				return fmt.Errorf("plan %s", p.GetState())
			}
		}
		return fmt.Errorf("plan %d not listed", plan)
	})
	after := n.Load()
	c.Eventually(t, 20*time.Second, "traffic after the move", func() error {
		if n.Load() < after+20 {
			return fmt.Errorf("%d admitted since the move", n.Load()-after)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d admissions during the move", n.Load())
	steadyNoForwards(t, c, cl, append(keys, movingKeys...))
}

// TestTLSCluster: over TLS the routes name https members and the calls go
// straight to the leader.
func TestTLSCluster(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{TLS: true})
	applyPolicies(t, c, longBucket("p", 1_000_000))
	cl := newClient(t, c, client.Config{})
	steadyNoForwards(t, c, cl, keysIn(shard.AllSlots(), 8))
}
