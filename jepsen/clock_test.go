package jepsen

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// SetClockOffset reaches a running node without a restart (clock file +
// SIGUSR1), and a node started later takes the offset it was given.
func TestSetClockOffset(t *testing.T) {
	start := time.Now()
	c := startNetCluster(t, "") // whichever mode Run would pick here
	t.Logf("network faults via %s", c.NetMode())

	// aheadBy polls until an admit is stamped at least d ahead of the local
	// clock (every node has the offset, so whichever leads stamps it).
	aheadBy := func(d time.Duration) {
		t.Helper()
		eventually(t, 15*time.Second, fmt.Sprintf("decisions stamped %v ahead", d), func() error {
			before := time.Now()
			resp, err := admit(c, 0, 3*time.Second)
			if err != nil {
				return err
			}
			ahead := resp.GetDecidedAt().AsTime().Sub(before)
			if ahead < d {
				return fmt.Errorf("decided %v ahead", ahead)
			}
			if ahead > d+time.Minute {
				t.Fatalf("decided %v ahead of the clock, want about %v", ahead, d)
			}
			return nil
		})
	}

	// Stopped nodes take the offset when they start.
	for i := range c.Nodes {
		if err := c.Kill(i); err != nil {
			t.Fatal(err)
		}
		if err := c.SetClockOffset(i, 2*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	aheadBy(2 * time.Hour)

	// Running nodes take it at once, with no restart — even one that has
	// only just been started (SetClockOffset waits until its process
	// handles SIGUSR1, which would otherwise kill it).
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	pids := make([]int, len(c.Nodes))
	for i, n := range c.Nodes {
		n.mu.Lock()
		pids[i] = n.cmd.Process.Pid
		n.mu.Unlock()
		if err := c.SetClockOffset(i, 4*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	aheadBy(4 * time.Hour)
	for i, n := range c.Nodes {
		n.mu.Lock()
		pid := n.cmd.Process.Pid
		n.mu.Unlock()
		if pid != pids[i] || !c.Running(i) {
			t.Errorf("%s restarted (pid %d, was %d) for a live clock change", n.ID, pid, pids[i])
		}
		b, _ := os.ReadFile(n.LogPath)
		// Node 0 may have read 4h at its start already: no change to log.
		if i > 0 && !strings.Contains(string(b), "clock offset changed") {
			t.Errorf("%s did not log the clock change", n.ID)
		}
	}
	t.Logf("took %v", time.Since(start))
}
