package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorate/quorate/node/nodetest"
)

// SetClockOffset moves the time a leader stamps into entries while it runs;
// time in the replicated state still never goes backwards.
func TestSetClockOffsetChangesStampedTime(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicy(t, c, "clock", 1000, time.Hour, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Every node gets the offset, so it applies whichever node leads.
	setOffset := func(d time.Duration) {
		t.Helper()
		for i := range c.Len() {
			n := c.Node(i)
			n.SetClockOffset(d)
			if got := n.ClockOffset(); got != d {
				t.Fatalf("node %d: ClockOffset %v after SetClockOffset(%v)", i, got, d)
			}
		}
	}
	decide := func(i int) (before, at, after time.Time) {
		t.Helper()
		before = time.Now()
		resp, err := admit(ctx, c, i, "clock", "k", 0)
		if err != nil {
			t.Fatal(err)
		}
		return before, resp.GetDecidedAt().AsTime(), time.Now()
	}

	for i, offset := range []time.Duration{0, time.Hour, 2 * time.Hour} {
		setOffset(offset)
		before, at, after := decide(i % c.Len())
		if at.Before(before.Add(offset)) || at.After(after.Add(offset)) {
			t.Fatalf("offset %v: decided_at %v, want within [%v, %v]", offset, at, before.Add(offset), after.Add(offset))
		}
	}

	// Back to the real clock: the stamp goes back, the state's time does not.
	_, ahead, _ := decide(0)
	setOffset(0)
	if _, at, _ := decide(1); at.Before(ahead) {
		t.Fatalf("decided_at went backwards from %v to %v after the clock jumped back", ahead, at)
	}
}
