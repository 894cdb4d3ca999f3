package client

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestSyncLocalDecisionsExact: 16 goroutines admit on one key of a sync
// policy; most decisions are local, every report's used is what the client
// admitted locally by then, and after Close the final report (release)
// tells the server exactly the local decisions made.
func TestSyncLocalDecisionsExact(t *testing.T) {
	s := newSyncServer("p", 1_000_000_000, 200*time.Millisecond)
	c := grantClient(t, s, nil)
	var local, strict atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d Decision
			for range 3000 {
				if err := c.AdmitInto(context.Background(), &Request{Policy: "p", Key: "k"}, &d); err != nil {
					t.Error(err)
					return
				}
				switch {
				case !d.Allowed:
					t.Error("denied")
					return
				case d.Outcome == LocalGrant:
					local.Add(1)
				default:
					strict.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	counts, calls := s.syncSnapshot()
	st := c.Stats()
	t.Logf("local %d, strict %d, reports %d, server: reported %d, charged whole %d; stats %+v",
		local.Load(), strict.Load(), len(calls), counts.reported, counts.whole, st)
	if local.Load() < 16*3000/2 {
		t.Errorf("only %d of %d decisions were local", local.Load(), 16*3000)
	}
	if int64(st.LocalGrant) != local.Load() || int64(st.UnitsReported) != local.Load() {
		t.Errorf("stats: LocalGrant %d, UnitsReported %d, want %d", st.LocalGrant, st.UnitsReported, local.Load())
	}
	if st.UnitsGranted != 0 || st.UnitsReturned != 0 || st.UnitsWasted != 0 {
		t.Errorf("grant counters in sync mode: %+v", st)
	}
	last := calls[len(calls)-1]
	if !last.GetRelease() || last.GetUsed() != local.Load() {
		t.Errorf("last call: release %v, used %d; want a release reporting %d", last.GetRelease(), last.GetUsed(), local.Load())
	}
	if counts.whole == 0 && counts.reported != local.Load() {
		t.Errorf("server charged %d from reports, the client admitted %d locally", counts.reported, local.Load())
	}
	if counts.reported > local.Load() {
		t.Errorf("server charged %d from reports, more than the %d admitted locally", counts.reported, local.Load())
	}
	if counts.boundBroken != 0 {
		t.Errorf("allowances above the bound %d times", counts.boundBroken)
	}
	var prev int64
	for i, r := range calls {
		if r.GetUsed() < prev {
			t.Errorf("call %d reports used %d below %d", i, r.GetUsed(), prev)
		}
		prev = r.GetUsed()
	}
}

// TestSyncInFlightCountsAgainstTheNewAllowance: units admitted while a
// report is in flight come out of the allowance its answer gives, so that
// between two reports a holder admits at most one allowance, and used =
// base − avail counts every local decision, with 16 goroutines spending.
func TestSyncInFlightCountsAgainstTheNewAllowance(t *testing.T) {
	s := newSyncServer("p", 1000, time.Second)
	c := grantClient(t, s, nil)
	m := c.grants
	spec, _ := grantSpecOf(s.clientPolicy())
	k := bucketKey{"p", "k"}
	g := newGrantState(m, k, spec)
	g.running = true // no loop
	m.states.Store(&map[bucketKey]*grantState{k: g})
	started := time.Now()
	answer := func(allowance int64) *quoratev1.GrantResponse {
		now := time.Now()
		return &quoratev1.GrantResponse{Total: allowance, Added: allowance, StartedAt: timestamppb.New(started),
			DecidedAt: timestamppb.New(now), ExpiresAt: timestamppb.New(now.Add(time.Hour)), Limit: 1000}
	}
	report := func() int64 {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.base - g.avail.sum()
	}
	apply := func(allowance, usedSent int64) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.applySync(answer(allowance), time.Now(), usedSent)
	}
	r := &Request{Policy: "p", Key: "k"}
	spendN := func(n int) (ok int64) {
		for range n {
			if _, _, yes := m.spend(r); yes {
				ok++
			}
		}
		return ok
	}

	// One goroutine: 3 admitted while the report of used 0 is in flight.
	apply(10, 0)
	u := report()
	if got := spendN(3); got != 3 {
		t.Fatalf("spent %d of 3", got)
	}
	apply(10, u)
	if a := g.avail.sum(); a != 7 {
		t.Fatalf("avail %d after an allowance of 10 with 3 admitted in flight, want 7", a)
	}
	// More admitted in flight than the new allowance: nothing until the
	// next one.
	u = report()
	spendN(7)
	apply(4, u)
	if got := spendN(5); got != 0 || report() != 10 {
		t.Fatalf("spent %d past an allowance used up in flight (used %d)", got, report())
	}

	// 16 goroutines spend while reports are answered.
	const allowance = 50
	var stop atomic.Bool
	var spent atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				spent.Add(spendN(1))
			}
		}()
	}
	before := report()
	prev := before
	for range 300 {
		u := report()
		if u-prev > allowance {
			t.Errorf("admitted %d between two reports, above the allowance %d", u-prev, allowance)
		}
		prev = u
		apply(allowance, u)
	}
	stop.Store(true)
	wg.Wait()
	if got := report() - before; got != spent.Load() {
		t.Errorf("used grew by %d, %d were admitted", got, spent.Load())
	}
	if got := report() - prev; got > allowance {
		t.Errorf("admitted %d after the last report, above the allowance %d", got, allowance)
	}
}

// TestSyncEarlyReportWhenExhausted: a holder whose allowance runs out
// reports before its sync interval, but no sooner than a quarter of it
// after its last call.
func TestSyncEarlyReportWhenExhausted(t *testing.T) {
	const iv = 2 * time.Second
	s := newSyncServer("p", 1_000_000_000, iv)
	c := grantClient(t, s, nil)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var d Decision
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := c.AdmitInto(context.Background(), &Request{Policy: "p", Key: "k"}, &d); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	eventually(t, 10*time.Second, "three reports", func() bool {
		counts, _ := s.syncSnapshot()
		return len(counts.at) >= 3
	})
	close(stop)
	<-done
	counts, calls := s.syncSnapshot()
	if gap := counts.at[1].Sub(counts.at[0]); gap >= iv {
		t.Errorf("second report %v after the first, not before the sync interval %v", gap, iv)
	}
	for i := 1; i < 3; i++ {
		if gap := counts.at[i].Sub(counts.at[i-1]); gap < iv/4-10*time.Millisecond {
			t.Errorf("report %d came %v after the last, sooner than a quarter interval", i, gap)
		}
	}
	if calls[0].GetWant() != 1 || calls[2].GetWant() <= 1 || calls[2].GetDemand() <= 0 {
		t.Errorf("wants %d, %d, demand %v: the want should follow the demand", calls[0].GetWant(), calls[2].GetWant(), calls[2].GetDemand())
	}
}

// TestSyncIdleReleased: a key unused for two sync intervals sends its final
// report (release) and holds nothing.
func TestSyncIdleReleased(t *testing.T) {
	s := newSyncServer("p", 1000, 50*time.Millisecond)
	c := grantClient(t, s, nil)
	for range 5 {
		if _, err := c.Admit(context.Background(), Request{Policy: "p", Key: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "the release", func() bool { return c.Stats().GrantsReleased > 0 })
	_, calls := s.syncSnapshot()
	st := c.Stats()
	if last := calls[len(calls)-1]; last.GetUsed() != int64(st.LocalGrant) || st.GrantsReleased != 1 {
		t.Errorf("release reports used %d, %d local decisions; stats %+v", last.GetUsed(), st.LocalGrant, st)
	}
}
