package node_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// waitGroups waits until every node's shard map has want data groups and
// returns node 0's view of it.
func waitGroups(t *testing.T, c *nodetest.Cluster, want int) *quoratev1.ShardMapStatus {
	t.Helper()
	var sm *quoratev1.ShardMapStatus
	c.Eventually(t, 30*time.Second, fmt.Sprintf("a shard map with %d groups", want), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return err
		}
		if got := len(resp.Msg.GetShardMap().GetGroups()); got != want {
			return fmt.Errorf("%d groups", got)
		}
		sm = resp.Msg.GetShardMap()
		return nil
	})
	return sm
}

// keysOf returns n keys whose slots lie in r.
func keysOf(r shard.SlotRange, n int) []string {
	var out []string
	for k := 0; len(out) < n; k++ {
		key := fmt.Sprintf("key-%d", k)
		if r.Contains(shard.SlotOf(key)) {
			out = append(out, key)
		}
	}
	return out
}

// waitPlan polls ListPlans until plan id is no longer running and returns
// it; it fails the test unless it ended in state want.
func waitPlan(t *testing.T, c *nodetest.Cluster, via int, id uint64, want string, timeout time.Duration) *quoratev1.PlanStatus {
	t.Helper()
	var got *quoratev1.PlanStatus
	c.Eventually(t, timeout, fmt.Sprintf("plan %d finished", id), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		i := via
		for !c.Running(i) {
			i = (i + 1) % c.Len()
		}
		resp, err := c.Admin(i).ListPlans(ctx, connect.NewRequest(&quoratev1.ListPlansRequest{}))
		if err != nil {
			return err
		}
		for _, p := range resp.Msg.GetPlans() {
			if p.GetId() == id {
				if p.GetState() == "running" || p.GetState() == "cancelling" {
					return fmt.Errorf("plan %d is %s at step %d: %v", id, p.GetState(), p.GetStepsDone(), p.GetSteps())
				}
				got = p
				return nil
			}
		}
		return fmt.Errorf("plan %d not listed", id)
	})
	if got.GetState() != want {
		t.Fatalf("plan %d ended %s (error %q), want %s", id, got.GetState(), got.GetError(), want)
	}
	return got
}

// startPlan retries a plan-starting call while the cluster answers
// "unavailable" (a meta election).
func startPlan(t *testing.T, c *nodetest.Cluster, call func(ctx context.Context) (*connect.Response[quoratev1.PlanResponse], error)) *quoratev1.PlanStatus {
	t.Helper()
	var p *quoratev1.PlanStatus
	c.Eventually(t, 20*time.Second, "plan started", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := call(ctx)
		if err != nil {
			if connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("starting a plan: %v", err)
			}
			return err
		}
		p = resp.Msg.GetPlan()
		return nil
	})
	return p
}

// traffic admits through every running node on keys until stopped,
// counting what was allowed per key.
type traffic struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	allowed map[string]*atomic.Int64
	errs    atomic.Int64
}

func startTraffic(ctx context.Context, c *nodetest.Cluster, policy string, keys []string, workers int) *traffic {
	tr := &traffic{stop: make(chan struct{}), allowed: map[string]*atomic.Int64{}}
	for _, k := range keys {
		tr.allowed[k] = new(atomic.Int64)
	}
	for w := range workers {
		tr.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-tr.stop:
					return
				default:
				}
				via := (w + i) % c.Len()
				for !c.Running(via) {
					via = (via + 1) % c.Len()
				}
				key := keys[(w*7+i)%len(keys)]
				r, err := admit(ctx, c, via, policy, key, 0)
				switch {
				case err != nil:
					tr.errs.Add(1)
				case r.GetAllowed():
					tr.allowed[key].Add(1)
				}
			}
		})
	}
	return tr
}

func (tr *traffic) total() int64 {
	var n int64
	for _, a := range tr.allowed {
		n += a.Load()
	}
	return n
}

func (tr *traffic) finish() {
	close(tr.stop)
	tr.wg.Wait()
}

// Slots move from group 1 to group 2, back, and over again under admit
// traffic through every node: every unit acknowledged stays spent (exactly
// capacity − acknowledged remains per key), a request ID answered before a
// move gets the same answer after it, a lease acquired before the moves is
// still held and renewable after them and new tokens are above it, and the
// group the slots left holds none of their state.
func TestMoveSlotsBackAndForthUnderTraffic(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sm := waitGroups(t, c, 2)
	const capacity = 100_000
	applyLongBucket(t, c, "p", capacity)
	applyConcurrency(t, c, "jobs", 2, time.Hour)

	// The upper 64 slots of group 1.
	var g1 shard.SlotRange
	for _, r := range sm.GetGroups() {
		if r.GetId() == 1 {
			g1 = shard.SlotRange{Start: shard.Slot(0), End: shard.Slot(r.GetSlots())}
		}
	}
	moving := shard.SlotRange{Start: g1.End - 64, End: g1.End}
	keys := keysOf(moving, 6)
	stay := keysOf(shard.SlotRange{Start: 0, End: 64}, 2)

	// Before any move: a recorded admit and a lease.
	first, err := c.Admission(1).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "p", Key: keys[0], Caller: "test", RequestId: "before-the-moves"}))
	if err != nil {
		t.Fatal(err)
	}
	held, err := acquire(ctx, c, 2, "jobs", keys[1], "lease-before")
	if err != nil || !held.GetAllowed() {
		t.Fatalf("acquire before the moves: %v %v", held, err)
	}

	tr := startTraffic(ctx, c, "p", append(append([]string(nil), keys...), stay...), 6)
	c.Eventually(t, 10*time.Second, "traffic flowing", func() error {
		if tr.total() < 30 {
			return fmt.Errorf("%d admitted", tr.total())
		}
		return nil
	})
	for round, dir := range [][2]uint32{{1, 2}, {2, 1}, {1, 2}} {
		before := tr.total()
		p := startPlan(t, c, func(ctx context.Context) (*connect.Response[quoratev1.PlanResponse], error) {
			return c.Admin(round%3).MoveSlots(ctx, connect.NewRequest(&quoratev1.MoveSlotsRequest{
				From: dir[0], To: dir[1], Start: uint32(moving.Start), End: uint32(moving.End)}))
		})
		done := waitPlan(t, c, round, p.GetId(), "done", 60*time.Second)
		t.Logf("round %d: %s: %d records, %d bytes, %d chunks, attempt %d", round, done.GetSteps()[0].GetAction(),
			done.GetSteps()[0].GetRecords(), done.GetSteps()[0].GetBytes(), done.GetSteps()[0].GetChunks(), done.GetSteps()[0].GetAttempt())
		for i := range c.Len() {
			c.Eventually(t, 10*time.Second, "the map routes to the target", func() error {
				if g, _ := node.GroupOf(c.Node(i), keys[0]); g != dir[1] {
					return fmt.Errorf("node %d routes %s to group %d", i, keys[0], g)
				}
				return nil
			})
		}
		c.Eventually(t, 20*time.Second, "traffic flows after the move", func() error {
			if tr.total() < before+30 {
				return fmt.Errorf("%d admitted since the move began", tr.total()-before)
			}
			return nil
		})
		// The group the slots left deletes their state.
		c.Eventually(t, 10*time.Second, "the source forgets the moved keys", func() error {
			for i := range c.Len() {
				if b, s, _, ok := node.GroupStateCounts(c.Node(i), dir[0]); ok && (b > len(stay)*int(dir[0]%2) || s > 0) {
					return fmt.Errorf("node %d: group %d still holds %d buckets, %d semaphores", i, dir[0], b, s)
				}
			}
			return nil
		})
	}
	tr.finish()
	t.Logf("%d admits allowed, %d calls failed", tr.total(), tr.errs.Load())
	if tr.errs.Load() > 0 {
		t.Errorf("%d admits failed (each retried on unavailable with its request ID)", tr.errs.Load())
	}
	for _, k := range keys {
		spent := tr.allowed[k].Load()
		if k == keys[0] {
			spent++
		}
		wantRemaining(t, c, 0, "p", k, capacity-spent)
	}

	// The recorded admit answers the same, moved three times.
	again, err := c.Admission(0).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "p", Key: keys[0], Caller: "test", RequestId: "before-the-moves"}))
	if err != nil {
		t.Fatal(err)
	}
	if !again.Msg.GetDuplicate() || again.Msg.GetRemaining() != first.Msg.GetRemaining() || again.Msg.GetAllowed() != first.Msg.GetAllowed() {
		t.Fatalf("retry after the moves: duplicate=%v remaining=%d allowed=%v, first answer remaining=%d allowed=%v",
			again.Msg.GetDuplicate(), again.Msg.GetRemaining(), again.Msg.GetAllowed(), first.Msg.GetRemaining(), first.Msg.GetAllowed())
	}
	// The lease moved with its fencing counter.
	if ok, err := checkFence(ctx, c, 1, "jobs", keys[1], held.GetFencingToken()); err != nil || !ok {
		t.Fatalf("the lease taken before the moves is not held after them (%v, %v)", ok, err)
	}
	if _, err := c.Lease(0).RenewLease(ctx, connect.NewRequest(&quoratev1.RenewLeaseRequest{LeaseId: held.GetLeaseId(), FencingToken: held.GetFencingToken()})); err != nil {
		t.Fatalf("renewing the moved lease: %v", err)
	}
	next, err := acquire(ctx, c, 0, "jobs", keys[1], "lease-after")
	if err != nil || !next.GetAllowed() {
		t.Fatalf("acquire after the moves: %v %v", next, err)
	}
	if next.GetFencingToken() <= held.GetFencingToken() {
		t.Fatalf("fencing token %d after the moves, %d before: tokens went back", next.GetFencingToken(), held.GetFencingToken())
	}
	third, err := acquire(ctx, c, 1, "jobs", keys[1], "lease-third")
	if err != nil {
		t.Fatal(err)
	}
	if third.GetAllowed() {
		t.Fatal("a third lease was granted on a key with limit 2 after the moves: the moved semaphore lost its holders")
	}
}
