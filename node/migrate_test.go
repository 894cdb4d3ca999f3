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

// waitGroups waits until node 0's shard map has want data groups, all
// formed, and returns it.
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
		for _, g := range resp.Msg.GetShardMap().GetGroups() {
			if g.GetForming() {
				return fmt.Errorf("group %d still forming", g.GetId())
			}
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
	if ok, err := checkFence(ctx, c, 1, held); err != nil || !ok {
		t.Fatalf("the lease taken before the moves is not held after them (%v, %v)", ok, err)
	}
	if _, err := c.Lease(0).RenewLease(ctx, connect.NewRequest(&quoratev1.RenewLeaseRequest{LeaseId: held.GetLeaseId(), FencingToken: held.GetFencingToken(), Caller: "worker"})); err != nil {
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

// startCopyingMove starts a plan moving slots moving from group 1 to group
// 2 (through node 1) and waits until its copy is under way: two chunks
// copied, as node 0 sees the plan.
func startCopyingMove(ctx context.Context, t *testing.T, c *nodetest.Cluster, moving shard.SlotRange) *quoratev1.PlanStatus {
	t.Helper()
	p := startPlan(t, c, func(ctx context.Context) (*connect.Response[quoratev1.PlanResponse], error) {
		return c.Admin(1).MoveSlots(ctx, connect.NewRequest(&quoratev1.MoveSlotsRequest{From: 1, To: 2, Start: uint32(moving.Start), End: uint32(moving.End)}))
	})
	c.Eventually(t, 30*time.Second, "copying under way", func() error {
		st, err := planNow(ctx, c, 0, p.GetId())
		if err != nil {
			return err
		}
		if s := st.GetSteps()[0]; s.GetPhase() != "copying" || s.GetChunks() < 2 {
			return fmt.Errorf("step %s, %d chunks", s.GetPhase(), s.GetChunks())
		}
		return nil
	})
	return p
}

// planNow returns plan id as node via lists it.
func planNow(ctx context.Context, c *nodetest.Cluster, via int, id uint64) (*quoratev1.PlanStatus, error) {
	resp, err := c.Admin(via).ListPlans(ctx, connect.NewRequest(&quoratev1.ListPlansRequest{}))
	if err != nil {
		return nil, err
	}
	for _, p := range resp.Msg.GetPlans() {
		if p.GetId() == id {
			return p, nil
		}
	}
	return nil, fmt.Errorf("plan %d not listed", id)
}

// fillKeys admits once, with a request ID, on each of keys (retrying
// through the nodes while unavailable).
func fillKeys(ctx context.Context, t *testing.T, c *nodetest.Cluster, policy string, keys []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < len(keys); i += 8 {
				if _, err := admit(ctx, c, i, policy, keys[i], 0); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// migrationCluster starts 3 nodes and 2 data groups whose migrations copy
// in small chunks, with policy "p" applied, and returns the slots of group
// 1's upper 128 slots and keys in them, admitted once each.
func migrationCluster(t *testing.T, ctx context.Context, keys int) (*nodetest.Cluster, shard.SlotRange, []string) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
		cfg.MigrationChunkBytes = 1024
		cfg.MigrationProgressInterval = time.Millisecond
	}})
	sm := waitGroups(t, c, 2)
	applyLongBucket(t, c, "p", 1_000_000)
	end := shard.Slot(sm.GetGroups()[0].GetSlots())
	moving := shard.SlotRange{Start: end - 128, End: end}
	ks := keysOf(moving, keys)
	fillKeys(ctx, t, c, "p", ks)
	return c, moving, ks
}

// The meta leader — the plan's coordinator — is killed while it copies a
// slot move's state chunk by chunk: the next leader starts a new copy
// attempt (the old attempt's chunks are refused from then on) and
// completes the move; every unit acknowledged before and during it stays
// spent.
func TestMoveSlotsCoordinatorKilledMidCopy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, moving, keys := migrationCluster(t, ctx, 400)
	tr := startTraffic(ctx, c, "p", keys[:8], 4)
	p := startPlan(t, c, func(ctx context.Context) (*connect.Response[quoratev1.PlanResponse], error) {
		return c.Admin(0).MoveSlots(ctx, connect.NewRequest(&quoratev1.MoveSlotsRequest{From: 1, To: 2, Start: uint32(moving.Start), End: uint32(moving.End)}))
	})
	leader := c.Leader(t)
	c.Eventually(t, 30*time.Second, "copying under way", func() error {
		st, err := planNow(ctx, c, leader, p.GetId())
		if err != nil {
			return err
		}
		if s := st.GetSteps()[0]; s.GetPhase() != "copying" || s.GetChunks() < 3 {
			return fmt.Errorf("step %s, %d chunks", s.GetPhase(), s.GetChunks())
		}
		return nil
	})
	c.Kill(leader)
	done := waitPlan(t, c, (leader+1)%c.Len(), p.GetId(), "done", 90*time.Second)
	s := done.GetSteps()[0]
	t.Logf("%s: attempt %d, %d records, %d bytes, %d chunks", s.GetAction(), s.GetAttempt(), s.GetRecords(), s.GetBytes(), s.GetChunks())
	if s.GetAttempt() < 2 {
		t.Fatalf("the move finished at attempt %d: the killed coordinator's copy was not restarted", s.GetAttempt())
	}
	if s.GetRecords() < uint64(len(keys)) {
		t.Fatalf("%d records copied for %d keys", s.GetRecords(), len(keys))
	}
	before := tr.total()
	c.Eventually(t, 20*time.Second, "traffic flows after the move", func() error {
		if tr.total() < before+20 {
			return fmt.Errorf("%d admits since", tr.total()-before)
		}
		return nil
	})
	tr.finish()
	via := (leader + 1) % c.Len()
	for i, k := range keys {
		spent := int64(1)
		if a, ok := tr.allowed[k]; ok {
			spent += a.Load()
		}
		if i < 8 || i%40 == 0 {
			wantRemaining(t, c, via, "p", k, 1_000_000-spent)
		}
	}
}

// A slot move cancelled while it copies rolls back: the source admits the
// slots again with their state intact, and the target drops its copy.
func TestCancelSlotMoveRollsBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, moving, keys := migrationCluster(t, ctx, 400)
	p := startCopyingMove(ctx, t, c, moving)
	if _, err := c.Admin(2).CancelPlan(ctx, connect.NewRequest(&quoratev1.CancelPlanRequest{Id: p.GetId()})); err != nil {
		t.Fatalf("CancelPlan: %v", err)
	}
	done := waitPlan(t, c, 0, p.GetId(), "cancelled", 60*time.Second)
	if ph := done.GetSteps()[0].GetPhase(); ph != "rolled back" {
		t.Fatalf("step phase %q after the cancel", ph)
	}
	for i := range c.Len() {
		if g, _ := node.GroupOf(c.Node(i), keys[0]); g != 1 {
			t.Fatalf("node %d routes the slots to group %d after the rollback", i, g)
		}
		c.Eventually(t, 10*time.Second, "the target drops the import", func() error {
			if b, _, d, ok := node.GroupStateCounts(c.Node(i), 2); ok && (b > 0 || d > 0) {
				return fmt.Errorf("node %d: the target still holds %d buckets, %d request IDs of the rolled-back import", i, b, d)
			}
			return nil
		})
	}
	for _, k := range keys[:20] {
		wantRemaining(t, c, 0, "p", k, 1_000_000-1)
	}
	if _, err := admit(ctx, c, 1, "p", keys[0], 0); err != nil {
		t.Fatalf("admit on a rolled-back slot: %v", err)
	}
	wantRemaining(t, c, 2, "p", keys[0], 1_000_000-2)
	// After the flip, cancelling is refused.
	p2 := startPlan(t, c, func(ctx context.Context) (*connect.Response[quoratev1.PlanResponse], error) {
		return c.Admin(0).MoveSlots(ctx, connect.NewRequest(&quoratev1.MoveSlotsRequest{From: 1, To: 2, Count: 4}))
	})
	waitPlan(t, c, 0, p2.GetId(), "done", 60*time.Second)
	_, err := c.Admin(0).CancelPlan(ctx, connect.NewRequest(&quoratev1.CancelPlanRequest{Id: p2.GetId()}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("cancelling a finished plan: %v, want failed_precondition", err)
	}
}

// A group splits under traffic: a new group on three nodes takes the upper
// half of its slots with their state, and no acknowledged unit is lost.
func TestSplitGroupUnderTraffic(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 1, 3
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitGroups(t, c, 1)
	const capacity = 100_000
	applyLongBucket(t, c, "p", capacity)
	keys := append(keysOf(shard.SlotRange{Start: 0, End: 2048}, 4), keysOf(shard.SlotRange{Start: 2048, End: shard.SlotCount}, 4)...)
	tr := startTraffic(ctx, c, "p", keys, 6)
	c.Eventually(t, 10*time.Second, "traffic flowing", func() error {
		if tr.total() < 30 {
			return fmt.Errorf("%d admitted", tr.total())
		}
		return nil
	})
	p := startPlan(t, c, func(ctx context.Context) (*connect.Response[quoratev1.PlanResponse], error) {
		return c.Admin(2).SplitGroup(ctx, connect.NewRequest(&quoratev1.SplitGroupRequest{Group: 1}))
	})
	done := waitPlan(t, c, 0, p.GetId(), "done", 90*time.Second)
	t.Logf("%s: %v", done.GetSummary(), done.GetSteps())
	sm := waitGroups(t, c, 2)
	if s := sm.GetGroups()[1].GetSlots(); s != shard.SlotCount/2 {
		t.Fatalf("the new group owns %d slots, want %d", s, shard.SlotCount/2)
	}
	for i := range c.Len() {
		c.Eventually(t, 10*time.Second, "routes", func() error {
			if g, _ := node.GroupOf(c.Node(i), keys[7]); g != 2 {
				return fmt.Errorf("node %d routes %s to group %d", i, keys[7], g)
			}
			return nil
		})
	}
	before := tr.total()
	c.Eventually(t, 20*time.Second, "traffic flows after the split", func() error {
		if tr.total() < before+30 {
			return fmt.Errorf("%d admitted since", tr.total()-before)
		}
		return nil
	})
	tr.finish()
	if tr.errs.Load() > 0 {
		t.Errorf("%d admits failed", tr.errs.Load())
	}
	for _, k := range keys {
		wantRemaining(t, c, 1, "p", k, capacity-tr.allowed[k].Load())
	}
}
