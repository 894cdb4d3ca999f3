package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Fault is one injected fault.
type Fault struct {
	Kind  string    `json:"kind"` // e.g. "kill", "pause-leader", "clock+3s", "partition-split", "rolling-restart"
	Node  string    `json:"node"` // the node(s) it hit; for partitions the sides, e.g. "n1 | n2 n3"
	Start time.Time `json:"start"`
	End   time.Time `json:"end"` // when it was undone
	Error string    `json:"error,omitempty"`
	// Plan is how the plan a slots or scale fault started ended.
	Plan *PlanOutcome `json:"plan,omitempty"`
}

// Fault families the nemesis draws from.
const (
	FamilyKill      = "kill"      // kill -9 a random node or the leader, restart it from the same data dir
	FamilyPause     = "pause"     // SIGSTOP a random node or the leader, SIGCONT it
	FamilyClock     = "clock"     // jump a node's clock ±1..5s while it runs (or across a restart), and back
	FamilyPartition = "partition" // isolate the leader, majority/minority split, majorities ring, bridge, one-way loss
	FamilyRestart   = "restart"   // rolling restart: every node in turn, one at a time
)

// Families lists every fault family; "mixed" means all of them.
var Families = []string{FamilyKill, FamilyPause, FamilyClock, FamilyPartition, FamilyRestart}

// NamedFamilies are the families only ever named, never part of "mixed":
// they need data groups (and FamilyMove more nodes than replicas).
var NamedFamilies = []string{FamilyMove, FamilySlots}

// ParseFamilies parses a comma-separated list of families ("mixed" = all
// of Families, "none" = no faults; NamedFamilies only by name).
func ParseFamilies(s string) ([]string, error) {
	var parts []string
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "mixed" {
			parts = append(parts, Families...)
		} else {
			parts = append(parts, f)
		}
	}
	return parseList(strings.Join(parts, ","), "fault family", append(slices.Clone(Families), NamedFamilies...), "mixed", "none")
}

// parseList parses a comma-separated subset of known, where all names every
// one and none (when not empty) names nothing; the result is sorted.
func parseList(s, what string, known []string, all, none string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == all:
			out = append(out, known...)
		case none != "" && (f == none || f == ""):
		case slices.Contains(known, f):
			out = append(out, f)
		default:
			alts := all
			if none != "" {
				alts += " or " + none
			}
			return nil, fmt.Errorf("unknown %s %q (want %s, %s)", what, f, strings.Join(known, ", "), alts)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// NemesisOptions configures Nemesis.Run.
type NemesisOptions struct {
	Seed     uint64
	Families []string      // none: no faults
	Interval time.Duration // quiet time between faults; default 2s
	Duration time.Duration // how long a fault lasts; default 1.5s (partitions 2×)
	// Keys are the workloads' keys: FamilySlots aims two moves in three at
	// a slot holding one of them, so their state moves.
	Keys []string
}

// Nemesis records the faults it injected.
type Nemesis struct {
	mu     sync.Mutex
	faults []Fault

	// FamilySlots, on Run's goroutine only: the shard map's ranges, and
	// the turn of the next fault (0: not drawn yet).
	slotMap   slotModel
	slotsTurn int
}

// Faults returns the faults injected so far.
func (n *Nemesis) Faults() []Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Fault(nil), n.faults...)
}

// Run injects one fault at a time on a seeded schedule until ctx ends,
// drawing from opts.Families (none: no faults). Every fault is undone before it returns.
func (n *Nemesis) Run(ctx context.Context, c *Cluster, opts NemesisOptions) {
	if opts.Interval == 0 {
		opts.Interval = 2 * time.Second
	}
	if opts.Duration == 0 {
		opts.Duration = 1500 * time.Millisecond
	}
	if len(opts.Families) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x6e656d65))
	for {
		if !sleepCtx(ctx, opts.Interval/2+time.Duration(rng.Int64N(int64(opts.Interval)))) {
			return
		}
		family := opts.Families[rng.IntN(len(opts.Families))]
		var f Fault
		switch family {
		case FamilyPartition:
			f = n.partition(ctx, c, rng, 2*opts.Duration)
		case FamilyRestart:
			f = n.rollingRestart(ctx, c)
		case FamilyMove:
			f = n.moveReplica(ctx, c, rng, opts.Duration)
		case FamilySlots:
			f = n.slots(ctx, c, rng, opts)
		default:
			f = n.nodeFault(ctx, c, rng, family, opts.Duration)
		}
		n.record(f)
	}
}

// record appends a finished fault.
func (n *Nemesis) record(f Fault) {
	n.mu.Lock()
	n.faults = append(n.faults, f)
	n.mu.Unlock()
}

// nodeFault kills, pauses or shifts the clock of one node — the leader half
// of the time — for d, then undoes it.
func (n *Nemesis) nodeFault(ctx context.Context, c *Cluster, rng *rand.Rand, family string, d time.Duration) Fault {
	kind := family
	var offset time.Duration
	restartClock := false
	if family == FamilyClock {
		offset = time.Duration(1+rng.IntN(5)) * time.Second
		if rng.IntN(2) == 0 {
			offset = -offset
		}
		restartClock = rng.IntN(4) == 0 // now and then across a restart rather than live
		kind = fmt.Sprintf("clock%+v", offset)
		if restartClock {
			kind += "-restart"
		}
	}
	target := c.pick(rng)
	if rng.IntN(2) == 0 {
		if l, err := c.Leader(ctx); err == nil {
			target, kind = l, kind+"-leader"
		}
	}
	f := Fault{Kind: kind, Node: c.Nodes[target].ID, Start: time.Now()}
	var err error
	switch {
	case family == FamilyPause:
		err = c.Pause(target)
	case family == FamilyClock && restartClock:
		err = c.RestartWithClockOffset(target, offset)
	case family == FamilyClock:
		err = c.SetClockOffset(target, offset)
	default:
		err = c.Kill(target)
	}
	sleepCtx(ctx, d) // undo the fault even when ctx has ended
	switch {
	case family == FamilyPause:
		err = joinErr(err, c.Resume(target))
	case family == FamilyClock && restartClock:
		err = joinErr(err, c.RestartWithClockOffset(target, 0))
	case family == FamilyClock:
		err = joinErr(err, c.SetClockOffset(target, 0))
	default:
		err = joinErr(err, c.Restart(target))
	}
	return finish(f, err)
}

// partition cuts the network by one of the grudge shapes for d, then heals.
// The shapes are drawn over the members (Live).
func (n *Nemesis) partition(ctx context.Context, c *Cluster, rng *rand.Rand, d time.Duration) Fault {
	live := c.Live()
	nodes := len(live)
	var g Grudge
	var kind string
	switch rng.IntN(5) {
	case 0:
		target := rng.IntN(nodes)
		kind = "partition-isolate"
		if l, err := c.Leader(ctx); err == nil && slices.Contains(live, l) {
			target, kind = slices.Index(live, l), "partition-isolate-leader"
		}
		g = IsolateGrudge(nodes, target)
	case 1:
		kind, g = "partition-split", SplitGrudge(nodes, rng)
	case 2:
		kind, g = "partition-ring", RingGrudge(nodes, rng)
	case 3:
		kind, g = "partition-bridge", BridgeGrudge(nodes, rng)
	default:
		from := rng.IntN(nodes)
		kind = "partition-one-way"
		if l, err := c.Leader(ctx); err == nil && rng.IntN(2) == 0 && slices.Contains(live, l) {
			from, kind = slices.Index(live, l), "partition-one-way-from-leader"
		}
		g = OneWayGrudge(from, otherNode(rng, from, nodes))
	}
	g = onLive(g, live)
	f := Fault{Kind: kind, Node: c.describe(g), Start: time.Now()}
	err := c.Partition(g)
	sleepCtx(ctx, d)
	return finish(f, joinErr(err, c.HealNetwork()))
}

// rollingRestart restarts every node in turn, waiting for the cluster to
// be whole again before the next.
func (n *Nemesis) rollingRestart(ctx context.Context, c *Cluster) Fault {
	f := Fault{Kind: "rolling-restart", Node: "all", Start: time.Now()}
	var err error
	for _, i := range c.Live() {
		if err = c.Restart(i); err != nil {
			break
		}
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = c.WaitReady(wctx)
		cancel()
		if err != nil || ctx.Err() != nil {
			break
		}
	}
	return finish(f, err)
}

func finish(f Fault, err error) Fault {
	f.End = time.Now()
	if err != nil {
		f.Error = err.Error()
	}
	return f
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
