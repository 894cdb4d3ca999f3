package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/node/internal/engine"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// outcomeUnknown reports whether err carries the OutcomeUnknown detail.
func outcomeUnknown(err error) bool { return engine.IsOutcomeUnknown(err) }

// tally counts a key's acknowledged decisions and the calls whose outcome the
// client cannot know (any error: the strictest reading).
type tally struct {
	mu                     sync.Mutex
	allowed, denied, maybe int
}

func (t *tally) add(resp *quoratev1.AdmitResponse, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err != nil:
		t.maybe++
	case resp.GetAllowed():
		t.allowed++
	default:
		t.denied++
	}
}

// A leader killed mid-traffic: a new leader is elected, decisions resume, the
// total allowed never exceeds the budget, and no decision acknowledged before
// the kill is lost. The killed node then restarts and catches up.
func TestLeaderKilledMidTraffic(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	const budget = 200
	// One unit per 1.83 days: refill during the test is far below one unit,
	// so budget is the exact bound.
	applyPolicy(t, c, "budget", budget, 366*24*time.Hour, budget)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// "exact" gets fewer attempts than its budget, so its final state tells
	// exactly how much was spent; "exhaust" gets twice its budget.
	keys := []struct {
		name     string
		attempts int
	}{{"exact", budget * 3 / 4}, {"exhaust", budget * 2}}
	tallies := make([]tally, len(keys))
	var schedule []int // key index of each request, interleaved
	for k, key := range keys {
		for range key.attempts {
			schedule = append(schedule, k)
		}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(schedule), func(i, j int) { schedule[i], schedule[j] = schedule[j], schedule[i] })

	var (
		mu        sync.Mutex
		sent      int
		killed    = make(chan struct{})
		killOnce  sync.Once
		afterKill int // acknowledged decisions that started after the kill
	)
	const workers = 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for j := 0; ; j++ {
				mu.Lock()
				i := sent
				sent++
				mu.Unlock()
				if i >= len(schedule) {
					return
				}
				k := schedule[i]
				if i == 150 {
					killOnce.Do(func() {
						leader := c.Leader(t)
						t.Logf("killing leader node%d after %d requests", leader+1, i)
						c.Kill(leader)
						close(killed)
					})
				}
				var wasKilled bool
				select {
				case <-killed:
					wasKilled = true
				default:
				}
				target := (w + j) % c.Len()
				if !c.Running(target) {
					target = (target + 1) % c.Len()
				}
				resp, err := admit(ctx, c, target, "budget", keys[k].name, 0)
				tallies[k].add(resp, err)
				if err == nil && wasKilled {
					mu.Lock()
					afterKill++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()

	for k, key := range keys {
		tl := &tallies[k]
		t.Logf("%s: allowed %d, denied %d, errors %d", key.name, tl.allowed, tl.denied, tl.maybe)
		if tl.allowed > budget {
			t.Errorf("%s: %d allowed, budget is %d", key.name, tl.allowed, budget)
		}
	}
	if afterKill == 0 {
		t.Fatal("no decision succeeded after the leader was killed")
	}
	ex := &tallies[1]
	if ex.allowed+ex.maybe < budget {
		t.Errorf("exhaust: only %d allowed (+%d unknown) of %d: budget not reached", ex.allowed, ex.maybe, budget)
	}

	// The killed node restarts and catches up with the others.
	for i := range c.Len() {
		if !c.Running(i) {
			c.Start(i)
		}
	}
	c.WaitReady(t)
	leader := c.Leader(t)
	commit := c.Node(leader).Status().GetCommitIndex()
	c.Eventually(t, 30*time.Second, "every replica applying the leader's commit index", func() error {
		for i := range c.Len() {
			if got := c.Node(i).Status().GetLastAppliedIndex(); got < commit {
				return fmt.Errorf("node%d applied %d < %d", i+1, got, commit)
			}
		}
		return nil
	})

	// Every acknowledged allow of "exact" is in the bucket, and nothing beyond
	// the calls that might have been applied. Ask every node, the restarted
	// one included: each decision spends one more.
	tl := &tallies[0]
	for i := range c.Len() {
		resp, err := admit(ctx, c, i, "budget", "exact", 0)
		if err != nil {
			t.Fatalf("final admit on node%d: %v", i+1, err)
		}
		if !resp.GetAllowed() {
			t.Fatalf("final admit on node%d denied: %v", i+1, resp)
		}
		spentBefore := budget - int(resp.GetRemaining()) - 1 - i
		if spentBefore < tl.allowed || spentBefore > tl.allowed+tl.maybe {
			t.Fatalf("exact: bucket shows %d spent before the check; acknowledged %d allowed and %d unknown outcomes",
				spentBefore, tl.allowed, tl.maybe)
		}
	}
}

// A full cluster crash and restart from disk keeps bucket state, policies
// and the monotonicity of decided_at — even when every node's clock is now
// an hour behind.
func TestFullClusterRestartPreservesState(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicy(t, c, "restart", 10, 366*24*time.Hour, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last *quoratev1.AdmitResponse
	for i := range 4 {
		resp, err := admit(ctx, c, i%3, "restart", "k", 0)
		if err != nil {
			t.Fatal(err)
		}
		last = resp
	}
	if last.GetRemaining() != 6 {
		t.Fatalf("before restart: remaining %d, want 6", last.GetRemaining())
	}

	for i := range c.Len() {
		c.Kill(i)
	}
	for i := range c.Len() {
		c.Config(i).ClockOffset = -time.Hour
		c.Start(i)
	}
	c.WaitReady(t)

	for i := range c.Len() {
		resp, err := admit(ctx, c, i, "restart", "k", 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(5 - i); resp.GetRemaining() != want || !resp.GetAllowed() {
			t.Fatalf("after restart, admit %d on node%d: allowed=%v remaining %d, want %d", i, i+1, resp.GetAllowed(), resp.GetRemaining(), want)
		}
		if resp.GetPolicyVersion() != last.GetPolicyVersion() {
			t.Fatalf("policy version %d after restart, was %d", resp.GetPolicyVersion(), last.GetPolicyVersion())
		}
		if resp.GetDecidedAt().AsTime().Before(last.GetDecidedAt().AsTime()) {
			t.Fatalf("decided_at went backwards: %v after %v", resp.GetDecidedAt().AsTime(), last.GetDecidedAt().AsTime())
		}
		last = resp
	}
}
