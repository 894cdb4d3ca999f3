package client

import (
	"context"
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
	sum := func(key string) int64 {
		g := state(key)
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.avail.sum()
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

	// Take b's units away, as its local deadline would: the request is
	// decided by the cluster and a keeps every unit.
	g := state("b")
	g.mu.Lock()
	g.expireLocked()
	g.mu.Unlock()
	a := sum("a")
	var into Decision
	if err := c.AdmitInto(context.Background(), &both, &into); err != nil || into.Outcome != Verified {
		t.Fatalf("with b short: %+v, %v; want a verified decision", into, err)
	}
	if got := sum("a"); got != a {
		t.Fatalf("a's grant held %d before the request b was short for, %d after: want no unit of a spent", a, got)
	}
}
