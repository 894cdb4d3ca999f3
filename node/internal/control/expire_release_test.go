package control

import (
	"testing"
	"time"
)

// TestMemoryReleaseDue checks when a node hands reclaimed memory back: once
// its replicas hold releaseEntries fewer entries than their most since the
// last release, or releaseSettled fewer once a tick reclaimed nothing, and
// never twice within releaseEvery.
func TestMemoryReleaseDue(t *testing.T) {
	var r memoryRelease
	t0 := time.Unix(1_700_000_000, 0)
	steps := []struct {
		held int
		at   time.Duration
		want bool
	}{
		{0, 0, false},
		{500_000, time.Second, false}, // growing
		{500_000 - releaseEntries + 1, 2 * time.Second, false}, // reclaiming, not enough yet
		{500_000 - releaseEntries, 3 * time.Second, true},      // enough: release
		{200_000, 4 * time.Second, false},                      // within releaseEvery of it
		{200_000, 3*time.Second + releaseEvery, true},          // reclaimed since, and time passed
		{200_000, 4*time.Second + 2*releaseEvery, false},       // nothing reclaimed since
		{300_000, 5*time.Second + 3*releaseEvery, false},       // grew again
		{300_000 - releaseEntries, 6*time.Second + 3*releaseEvery, true},
		// A small wave: released only once it has settled.
		{210_000, 7*time.Second + 4*releaseEvery, false},
		{210_000 - releaseSettled, 8*time.Second + 4*releaseEvery, false}, // still reclaiming
		{210_000 - releaseSettled, 9*time.Second + 4*releaseEvery, true},  // settled
		// Too little to bother, even settled.
		{210_000 - releaseSettled - releaseSettled/2, 10*time.Second + 5*releaseEvery, false},
		{210_000 - releaseSettled - releaseSettled/2, 11*time.Second + 5*releaseEvery, false},
	}
	for i, s := range steps {
		if got := r.due(s.held, t0.Add(s.at)); got != s.want {
			t.Fatalf("step %d (held %d at +%v): due %v, want %v", i, s.held, s.at, got, s.want)
		}
	}
}
