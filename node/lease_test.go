package node_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func applyConcurrency(tb testing.TB, c *nodetest.Cluster, name string, slots int64, ttl time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{{
		Name: name, Algorithm: "concurrency", Limit: slots, LeaseTtl: durationpb.New(ttl),
	}}}))
	if err != nil {
		tb.Fatalf("apply concurrency policy %s: %v", name, err)
	}
}

func acquire(ctx context.Context, c *nodetest.Cluster, i int, policy, key, id string) (*quoratev1.AcquireLeaseResponse, error) {
	resp, err := c.Lease(i).AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{
		Policy: policy, Key: key, Caller: "worker", RequestId: id}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// checkFence asks node i whether l, a lease acquire answered to caller
// "worker", still holds its slot.
func checkFence(ctx context.Context, c *nodetest.Cluster, i int, l *quoratev1.AcquireLeaseResponse) (bool, error) {
	resp, err := c.Lease(i).CheckFence(ctx, connect.NewRequest(&quoratev1.CheckFenceRequest{
		LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Caller: "worker"}))
	if err != nil {
		return false, err
	}
	return resp.Msg.GetHeld(), nil
}

// Never more than limit unexpired leases per key under concurrent Acquire
// over all nodes, across a leader kill; tokens are unique and increase in
// real-time order (an acquire answered before another began has the
// smaller token).
func TestLeasesNeverExceedLimitAcrossLeaderKill(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	const slots = 3
	applyConcurrency(t, c, "active", slots, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// held is when a lease was certainly live: from its acquire's answer to
	// the start of its release (the lease itself was granted somewhere in
	// the acquire call and freed somewhere in the release call).
	type held struct {
		token          int64
		acqStart, from time.Time
		to             time.Time
	}
	var (
		mu       sync.Mutex
		leases   []held
		killedAt time.Time
	)
	leader := c.Leader(t)
	var wg sync.WaitGroup
	// Workers acquire until 30 leases were granted (at least 10 after the
	// kill), however slow the machine: most acquires are denied while 3 of
	// the 12 workers hold the slots.
	granted := func() (all, afterKill int) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range leases {
			if !killedAt.IsZero() && l.acqStart.After(killedAt) {
				afterKill++
			}
		}
		return len(leases), afterKill
	}
	for w := range 12 {
		wg.Go(func() {
			for j := 0; ctx.Err() == nil; j++ {
				if all, after := granted(); all >= 30 && after >= 10 {
					return
				}
				if w == 0 && j == 5 {
					mu.Lock()
					killedAt = time.Now()
					mu.Unlock()
					c.Kill(leader)
				}
				target := (w + j) % c.Len()
				if !c.Running(target) {
					target = (target + 1) % c.Len()
				}
				id := fmt.Sprintf("acq-%d-%d", w, j)
				start := time.Now()
				resp, err := acquire(ctx, c, target, "active", "tenant", id)
				if err != nil {
					t.Logf("acquire failed (allowed under a leader kill): %v", err)
					continue
				}
				got := time.Now()
				if !resp.GetAllowed() {
					continue
				}
				relStart := time.Now()
				// Retried with the same request ID until it is answered, so
				// the lease is certainly freed by the end.
				for {
					_, err = c.Lease((target+1)%c.Len()).ReleaseLease(ctx, connect.NewRequest(&quoratev1.ReleaseLeaseRequest{
						LeaseId: resp.GetLeaseId(), FencingToken: resp.GetFencingToken(), Caller: "worker", RequestId: "rel-" + id}))
					if err == nil || ctx.Err() != nil || connect.CodeOf(err) == connect.CodeFailedPrecondition {
						break
					}
					target++
				}
				if err != nil {
					t.Errorf("release of token %d: %v", resp.GetFencingToken(), err)
				}
				mu.Lock()
				leases = append(leases, held{token: resp.GetFencingToken(), acqStart: start, from: got, to: relStart})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if all, after := granted(); all < 30 || after < 10 {
		t.Fatalf("only %d leases granted, %d after the kill, before the deadline", all, after)
	}
	seen := map[int64]bool{}
	for i, a := range leases {
		if seen[a.token] {
			t.Errorf("token %d granted twice", a.token)
		}
		seen[a.token] = true
		live := 0
		for j, b := range leases {
			// Real-time order: a answered before b was asked.
			if i != j && a.from.Before(b.acqStart) && a.token >= b.token {
				t.Errorf("token %d was answered before token %d was asked", a.token, b.token)
			}
			// Leases certainly live at the moment a was answered.
			if !b.from.After(a.from) && b.to.After(a.from) {
				live++
			}
		}
		if live > slots {
			t.Errorf("%d leases were certainly live at once, limit %d", live, slots)
		}
	}
}

// A stale holder — its lease released or expired — is refused by Renew and
// Release with FailedPrecondition and CheckFence says it holds nothing.
// A resource that checks tokens refuses the late write of a worker that
// paused past its TTL while a second worker took over.
func TestStaleHolderIsFencedOff(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyConcurrency(t, c, "exports", 1, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The fenced resource: it accepts a write only with a token at least as
	// high as any it has seen.
	var res struct {
		sync.Mutex
		highest int64
		writes  []string
	}
	write := func(who string, token int64) error {
		res.Lock()
		defer res.Unlock()
		if token < res.highest {
			return fmt.Errorf("%s: token %d is older than %d", who, token, res.highest)
		}
		res.highest = token
		res.writes = append(res.writes, who)
		return nil
	}

	first, err := acquire(ctx, c, 0, "exports", "report-7", "w1")
	if err != nil || !first.GetAllowed() {
		t.Fatalf("first worker: %v, %v", first, err)
	}
	if err := write("first", first.GetFencingToken()); err != nil {
		t.Fatal(err)
	}
	// The first worker pauses; its lease expires in log time.
	c.Eventually(t, 20*time.Second, "the first lease to expire", func() error {
		held, err := checkFence(ctx, c, 1, first)
		if err != nil {
			return err
		}
		if held {
			return errors.New("still held")
		}
		return nil
	})
	var second *quoratev1.AcquireLeaseResponse
	c.Eventually(t, 10*time.Second, "the second worker's lease", func() error {
		second, err = acquire(ctx, c, 2, "exports", "report-7", fmt.Sprintf("w2-%d", time.Now().UnixNano()))
		if err == nil && !second.GetAllowed() {
			err = errors.New("denied")
		}
		return err
	})
	if second.GetFencingToken() <= first.GetFencingToken() {
		t.Fatalf("second token %d is not above the first %d", second.GetFencingToken(), first.GetFencingToken())
	}
	if err := write("second", second.GetFencingToken()); err != nil {
		t.Fatal(err)
	}
	// The first worker wakes up and writes late: refused.
	if err := write("first", first.GetFencingToken()); err == nil {
		t.Fatal("the resource accepted the stale worker's late write")
	}
	// Quorate refuses the stale holder too.
	_, err = c.Lease(0).RenewLease(ctx, connect.NewRequest(&quoratev1.RenewLeaseRequest{
		LeaseId: first.GetLeaseId(), FencingToken: first.GetFencingToken()}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("renew of an expired lease: %v, want FailedPrecondition", err)
	}
	_, err = c.Lease(1).ReleaseLease(ctx, connect.NewRequest(&quoratev1.ReleaseLeaseRequest{
		LeaseId: first.GetLeaseId(), FencingToken: first.GetFencingToken()}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("release of an expired lease: %v, want FailedPrecondition", err)
	}
	// Released leases are stale as well.
	if _, err := c.Lease(2).ReleaseLease(ctx, connect.NewRequest(&quoratev1.ReleaseLeaseRequest{
		LeaseId: second.GetLeaseId(), FencingToken: second.GetFencingToken(), RequestId: "rel-2", Caller: "worker"})); err != nil {
		t.Fatal(err)
	}
	if held, err := checkFence(ctx, c, 0, second); err != nil || held {
		t.Fatalf("released token: held=%v, %v", held, err)
	}
	_, err = c.Lease(0).RenewLease(ctx, connect.NewRequest(&quoratev1.RenewLeaseRequest{
		LeaseId: second.GetLeaseId(), FencingToken: second.GetFencingToken()}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("renew of a released lease: %v, want FailedPrecondition", err)
	}
	// A token that does not match its lease ID does not hold the lease.
	_, err = c.Lease(0).RenewLease(ctx, connect.NewRequest(&quoratev1.RenewLeaseRequest{
		LeaseId: second.GetLeaseId(), FencingToken: second.GetFencingToken() + 1}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("mismatched token: %v, want FailedPrecondition", err)
	}
}

// Leases survive a full crash and restart: the holder still holds, tokens
// keep increasing.
func TestLeasesSurviveFullRestart(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyConcurrency(t, c, "jobs", 2, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := acquire(ctx, c, 1, "jobs", "k", "before-1")
	if err != nil || !a.GetAllowed() {
		t.Fatalf("acquire: %v, %v", a, err)
	}
	for i := range c.Len() {
		c.Kill(i)
	}
	for i := range c.Len() {
		c.Start(i)
	}
	c.WaitReady(t)
	if held, err := checkFence(ctx, c, 2, a); err != nil || !held {
		t.Fatalf("after restart the lease is held=%v, %v", held, err)
	}
	again, err := acquire(ctx, c, 0, "jobs", "k", "before-1")
	if err != nil || !again.GetDuplicate() || again.GetFencingToken() != a.GetFencingToken() {
		t.Fatalf("retry of the acquire after restart: %v, %v", again, err)
	}
	b, err := acquire(ctx, c, 0, "jobs", "k", "after-1")
	if err != nil || !b.GetAllowed() || b.GetFencingToken() <= a.GetFencingToken() {
		t.Fatalf("new acquire after restart: %v, %v (first token %d)", b, err, a.GetFencingToken())
	}
	full, err := acquire(ctx, c, 2, "jobs", "k", "after-2")
	if err != nil || full.GetAllowed() || full.GetRetryAfter().AsDuration() <= 0 {
		t.Fatalf("third lease of two slots: %v, %v", full, err)
	}
}

// AcquireLease with max_wait parks until a slot frees (a release on the
// leader wakes it), or answers allowed=false once the wait is over.
func TestAcquireWaitsForAFreeSlot(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyConcurrency(t, c, "gpu", 1, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := acquire(ctx, c, 0, "gpu", "model-a", "first")
	if err != nil || !first.GetAllowed() {
		t.Fatalf("first: %v, %v", first, err)
	}
	got := make(chan *quoratev1.AcquireLeaseResponse, 1)
	go func() {
		resp, err := c.Lease(1).AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{
			Policy: "gpu", Key: "model-a", Caller: "worker", RequestId: "second", MaxWait: durationpb.New(30 * time.Second)}))
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		got <- resp.Msg
	}()
	if _, err := c.Lease(2).ReleaseLease(ctx, connect.NewRequest(&quoratev1.ReleaseLeaseRequest{
		LeaseId: first.GetLeaseId(), FencingToken: first.GetFencingToken(), Caller: "worker", RequestId: "rel-first"})); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil || !second.GetAllowed() || second.GetFencingToken() <= first.GetFencingToken() {
		t.Fatalf("the waiting acquire: %v", second)
	}
	// While the second holds the only slot, a short wait ends denied.
	resp, err := c.Lease(2).AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{
		Policy: "gpu", Key: "model-a", MaxWait: durationpb.New(300 * time.Millisecond)}))
	if err != nil || resp.Msg.GetAllowed() || resp.Msg.GetWaited().AsDuration() <= 0 || resp.Msg.GetRetryAfter().AsDuration() <= 0 {
		t.Fatalf("a wait that ran out: %v, %v", resp, err)
	}
}
