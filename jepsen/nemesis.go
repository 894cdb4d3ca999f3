package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// Fault is one injected fault.
type Fault struct {
	Kind  string    `json:"kind"` // "kill", "pause" or "clock±N", with "-leader" when aimed at the leader
	Node  string    `json:"node"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"` // when the node was restarted or resumed
	Error string    `json:"error,omitempty"`
}

// NemesisOptions configures RunNemesis.
type NemesisOptions struct {
	Seed     uint64
	Interval time.Duration // quiet time between faults; default 2s
	Duration time.Duration // how long a node stays down or paused; default 1.5s
}

// Nemesis records the faults it injected.
type Nemesis struct {
	mu     sync.Mutex
	faults []Fault
}

// Faults returns the faults injected so far.
func (n *Nemesis) Faults() []Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Fault(nil), n.faults...)
}

// RunNemesis injects one fault at a time on a seeded schedule until ctx ends:
// kill -9 and restart, SIGSTOP and SIGCONT, or a restart with the clock
// jumped ±1..5s (and back), of a random node or the leader.
// Every fault is undone before it returns.
func (n *Nemesis) Run(ctx context.Context, c *Cluster, opts NemesisOptions) {
	if opts.Interval == 0 {
		opts.Interval = 2 * time.Second
	}
	if opts.Duration == 0 {
		opts.Duration = 1500 * time.Millisecond
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x6e656d65))
	for {
		if !sleepCtx(ctx, opts.Interval/2+time.Duration(rng.Int64N(int64(opts.Interval)))) {
			return
		}
		var kind string
		var offset time.Duration
		switch rng.IntN(3) {
		case 0:
			kind = "kill"
		case 1:
			kind = "pause"
		default:
			// A clock jump of ±1..5s: the node restarts with its clock
			// shifted, and back again when the fault ends.
			offset = time.Duration(1+rng.IntN(5)) * time.Second
			if rng.IntN(2) == 0 {
				offset = -offset
			}
			kind = "clock" + fmt.Sprintf("%+v", offset)
		}
		target := rng.IntN(len(c.Nodes))
		if rng.IntN(2) == 0 {
			if l, err := c.Leader(ctx); err == nil {
				target, kind = l, kind+"-leader"
			}
		}
		f := Fault{Kind: kind, Node: c.Nodes[target].ID, Start: time.Now()}
		var err error
		switch {
		case strings.HasPrefix(kind, "pause"):
			err = c.Pause(target)
		case strings.HasPrefix(kind, "clock"):
			err = c.RestartWithClockOffset(target, offset)
		default:
			err = c.Kill(target)
		}
		sleepCtx(ctx, opts.Duration) // undo the fault even when ctx has ended
		switch {
		case strings.HasPrefix(kind, "pause"):
			err = joinErr(err, c.Resume(target))
		case strings.HasPrefix(kind, "clock"):
			err = joinErr(err, c.RestartWithClockOffset(target, 0))
		default:
			err = joinErr(err, c.Restart(target))
		}
		f.End = time.Now()
		if err != nil {
			f.Error = err.Error()
		}
		n.mu.Lock()
		n.faults = append(n.faults, f)
		n.mu.Unlock()
	}
}

func joinErr(a, b error) error {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return fmt.Errorf("%v; %v", a, b)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
