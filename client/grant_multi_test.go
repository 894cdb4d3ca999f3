package client

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A request with Also whose checks all hold grants is decided locally,
// charging each check's grant; when one of them is short, the request goes
// to the cluster and no grant is charged.
func TestGrantMultiCheckAllOrNothing(t *testing.T) {
	s := newGrantServer("p", 100_000, 1000, 10*time.Second)
	c := grantClient(t, s, nil)
	holdGrant(t, c, "p", "a")
	holdGrant(t, c, "p", "b")
	both := Request{Policy: "p", Key: "a", Cost: 2, Also: []Check{{Policy: "p", Key: "b", Cost: 3}}}
	state := func(key string) *grantState { return (*c.grants.states.Load())[bucketKey{"p", key}] }
	// spent is the units local decisions took from key's grants: renewals
	// and expiry move base and avail together, so it stays put under them.
	spent := func(key string) int64 {
		g := state(key)
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.spentBefore + g.base - g.avail.sum()
	}
	before := c.Stats().LocalGrant
	var d *Decision
	eventually(t, 10*time.Second, "a local multi-check decision", func() bool {
		var err error
		if d, err = c.Admit(context.Background(), both); err != nil {
			t.Fatal(err)
		}
		return d.Outcome == LocalGrant
	})
	if !d.Allowed || d.DeniedCheck != -1 || len(d.Checks) != 2 || d.Checks[0].Key != "a" || d.Checks[1].Key != "b" ||
		!d.Checks[0].Allowed || !d.Checks[1].Allowed {
		t.Fatalf("local multi-check decision %+v", d)
	}
	if got := c.Stats().LocalGrant - before; got != 1 {
		t.Errorf("one multi-check decision counted as %d local decisions", got)
	}

	// Take b's units away, as its local deadline would, with the grants'
	// renewals failing so that b stays short: the request is decided by
	// the cluster and a keeps every unit.
	s.unavailable.Store(true)
	g := state("b")
	g.mu.Lock()
	g.expireLocked()
	g.mu.Unlock()
	a := spent("a")
	var into Decision
	if err := c.AdmitInto(context.Background(), &both, &into); err != nil || into.Outcome != Verified {
		t.Fatalf("with b short: %+v, %v; want a verified decision", into, err)
	}
	if got := spent("a"); got != a {
		t.Fatalf("%d units of a spent locally before the request b was short for, %d after: want no unit of a spent", a, got)
	}
	s.unavailable.Store(false) // the client's Close gives the grants back
}

// Multi-check spends race single-check spends of one of their keys and
// that key's grant expiring: every unit granted is still spent locally
// (a multi-check decision spending from both grants), given back or
// wasted, and each local decision is counted once.
func TestGrantMultiCheckConcurrent(t *testing.T) {
	s := newGrantServer("p", 1_000_000, 200, 10*time.Second)
	c := grantClient(t, s, nil)
	holdGrant(t, c, "p", "a")
	holdGrant(t, c, "p", "b")
	held := c.Stats().LocalGrant // holdGrant's decisions, a unit each
	var multi, single atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			r := Request{Policy: "p", Key: "b"}
			counter := &single
			if i%2 == 0 {
				r.Key, r.Also, counter = "a", []Check{{Policy: "p", Key: "b"}}, &multi
			}
			var d Decision
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := c.AdmitInto(context.Background(), &r, &d); err != nil {
					t.Error(err)
					return
				}
				if d.Outcome == LocalGrant {
					counter.Add(1)
				}
			}
		})
	}
	// b's grant expires now and then under the spends.
	g := (*c.grants.states.Load())[bucketKey{"p", "b"}]
	for range 20 {
		eventually(t, 10*time.Second, "local decisions", func() bool { return multi.Load() > 0 && single.Load() > 0 })
		time.Sleep(5 * time.Millisecond) // lets the spends run between expiries, not synchronization
		g.mu.Lock()
		g.expireLocked()
		g.mu.Unlock()
	}
	close(stop)
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	m, sg := uint64(multi.Load()), uint64(single.Load())+held
	if st.LocalGrant != m+sg {
		t.Errorf("Stats.LocalGrant %d, want %d multi-check + %d single-check ones", st.LocalGrant, m, sg)
	}
	if st.UnitsGranted != 2*m+sg+st.UnitsReturned+st.UnitsWasted {
		t.Errorf("granted %d != 2 × %d multi + %d single + returned %d + wasted %d", st.UnitsGranted, m, sg, st.UnitsReturned, st.UnitsWasted)
	}
	t.Logf("multi %d, single %d local decisions; granted %d, returned %d, wasted %d", m, sg, st.UnitsGranted, st.UnitsReturned, st.UnitsWasted)
}
