package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
)

// nodeState is where a node slot stands in the cluster's membership.
type nodeState int

const (
	nodeSpare   nodeState = iota // reserved (ClusterOptions.Spare), never started
	nodeJoining                  // started by AddNode, not yet answering as a member
	nodeMember                   // a member: clients, faults and Heal use it
	nodeRetired                  // stopped by Retire; never started again
)

// Live returns the indexes of the members, ascending: the nodes StartCluster
// started and those AddNode added, less those Retire took out. A member the
// nemesis killed or paused is still one. Safe for concurrent use.
func (c *Cluster) Live() []int {
	if p := c.live.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// LiveIDs returns the members' IDs, in index order.
func (c *Cluster) LiveIDs() []string {
	var ids []string
	for _, i := range c.Live() {
		ids = append(ids, c.Nodes[i].ID)
	}
	return ids
}

// setState records node i's state and republishes Live.
func (c *Cluster) setState(i int, s nodeState) {
	c.Nodes[i].mu.Lock()
	c.Nodes[i].state = s
	c.Nodes[i].mu.Unlock()
	var live []int
	for j, n := range c.Nodes {
		n.mu.Lock()
		if n.state == nodeMember {
			live = append(live, j)
		}
		n.mu.Unlock()
	}
	c.live.Store(&live)
}

// joinVia is the member a (re)started node i is told to join through: the
// first member other than i (node 0 when there is none).
func (c *Cluster) joinVia(i int) int {
	for _, j := range c.Live() {
		if j != i {
			return j
		}
	}
	return 0
}

// nextMember returns the members in turn, one per call (for admin calls
// that should not always ask the same node first).
func (c *Cluster) nextMember() int {
	live := c.Live()
	return live[int(c.turn.Add(1)%uint64(len(live)))]
}

// pick returns a random member.
func (c *Cluster) pick(rng *rand.Rand) int {
	live := c.Live()
	return live[rng.IntN(len(live))]
}

// other returns a random member other than node (node itself when it is
// the only one; any member when node is not one). With members 0..n-1 it
// draws as otherNode does.
func (c *Cluster) other(rng *rand.Rand, node int) int {
	live := c.Live()
	pos := slices.Index(live, node)
	if pos < 0 {
		return live[rng.IntN(len(live))]
	}
	return live[otherNode(rng, pos, len(live))]
}

// onLive maps a grudge over positions in live (what the grudge shapes are
// built on) to node indexes.
func onLive(g Grudge, live []int) Grudge {
	out := Grudge{}
	for from, tos := range g {
		for _, to := range tos {
			out[live[from]] = append(out[live[from]], live[to])
		}
	}
	return out
}

// AddNode starts the next spare node (ClusterOptions.Spare) with
// `quorate serve --join` through a member and the cluster's extra
// arguments, waits until a member reports it answering among all the
// members, and makes it a member. It returns the node's index.
func (c *Cluster) AddNode(ctx context.Context) (int, error) {
	c.membersMu.Lock()
	defer c.membersMu.Unlock()
	i, err := c.nextSpare()
	if err != nil {
		return -1, err
	}
	c.setState(i, nodeJoining)
	if err := c.start(i); err != nil {
		return -1, err
	}
	live := c.Live()
	if err := c.waitReady(ctx, live, len(live)+1, c.opts.ReadyWait); err != nil {
		return -1, fmt.Errorf("jepsen: %s did not join: %w%s", c.Nodes[i].ID, err, c.logTails(15))
	}
	c.setState(i, nodeMember)
	return i, nil
}

// nextSpare returns the first spare node slot.
func (c *Cluster) nextSpare() (int, error) {
	for j, n := range c.Nodes {
		n.mu.Lock()
		spare := n.state == nodeSpare
		n.mu.Unlock()
		if spare {
			return j, nil
		}
	}
	return -1, errors.New("jepsen: no spare node left (ClusterOptions.Spare)")
}

// Withdraw takes node i out of the members — clients, faults and Heal
// stop using it — and leaves its process running (to be removed from the
// cluster through the API, then stopped by Retire).
func (c *Cluster) Withdraw(i int) {
	c.membersMu.Lock()
	defer c.membersMu.Unlock()
	c.setState(i, nodeRetired)
}

// Retire takes node i out of the members (as Withdraw), stops its process
// (SIGTERM, SIGKILL after 10 s) and never starts it again. It does not
// remove it from the cluster: that is AdminService.RemoveNode's job.
func (c *Cluster) Retire(i int) error {
	c.Withdraw(i)
	if err := c.StopNode(i); !errors.Is(err, errKilledAfterTimeout) {
		return err
	}
	return nil // a retired node may be killed
}
