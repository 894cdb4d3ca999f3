package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"
)

// Network fault mechanisms (ClusterOptions.Net, Cluster.NetMode).
const (
	// NetNftables runs the nodes in a private network namespace, node i on
	// 127.0.0.(11+i), and cuts node pairs with nftables drop rules matching
	// source and destination address. Needs root.
	NetNftables = "nftables"
	// NetProxy routes every node-to-node connection through a userspace TCP
	// proxy per ordered pair of nodes and per port, which stalls the bytes
	// of a cut direction. Works unprivileged.
	NetProxy = "proxy"
)

// Grudge says, per node index, which node indexes it cannot send packets to.
// A node missing from the map sends to everyone; an empty Grudge is a whole
// network.
type Grudge map[int][]int

// network is a network fault mechanism for one cluster.
type network interface {
	// addrs are node i's API and Raft addresses, the same across restarts.
	addrs(i int) (api, raft string)
	// command is the command that runs node i.
	command(i int, binary string, args []string) *exec.Cmd
	// partition replaces the current cuts with g (validated, no self-cuts).
	partition(g Grudge) error
	// dialContext is how the harness reaches the nodes' APIs.
	dialContext(ctx context.Context, network, addr string) (net.Conn, error)
	// close heals and releases everything; safe to call more than once.
	close() error
}

// Partition makes each node of g unable to send to the nodes g lists,
// replacing the cuts in place before (an empty g heals). Only traffic
// between nodes is cut — Raft, forwarding to the leader, joins, status —
// never the harness's own clients (Admission, Admin, Lease). Which
// direction means what depends on NetMode: with nftables the packets are
// dropped, so any cut direction also breaks TCP connections the other way
// once they need an answer; with the proxy the bytes of a cut direction
// are held back (and delivered after healing, unless the connection timed
// out) while the other direction flows.
func (c *Cluster) Partition(g Grudge) error {
	clean, err := cleanGrudge(g, len(c.Nodes))
	if err != nil {
		return err
	}
	if c.net == nil {
		return errors.New("jepsen: the cluster has no network")
	}
	err = c.net.partition(clean)
	c.netLogf("partition %s: %v", c.describe(clean), errOrOK(err))
	return err
}

// HealNetwork removes every network cut.
func (c *Cluster) HealNetwork() error { return c.Partition(nil) }

// NetMode is the network fault mechanism in use: "nftables" or "proxy".
func (c *Cluster) NetMode() string { return c.netMode }

// cleanGrudge checks g's node indexes and returns it sorted and without
// duplicates or self-cuts.
func cleanGrudge(g Grudge, n int) (Grudge, error) {
	clean := Grudge{}
	for from, tos := range g {
		if from < 0 || from >= n {
			return nil, fmt.Errorf("jepsen: grudge names node %d of %d", from, n)
		}
		for _, to := range tos {
			if to < 0 || to >= n {
				return nil, fmt.Errorf("jepsen: grudge names node %d of %d", to, n)
			}
			if to != from && !slices.Contains(clean[from], to) {
				clean[from] = append(clean[from], to)
			}
		}
		slices.Sort(clean[from])
	}
	return clean, nil
}

// describe renders g as "n1↛n2 n2↛n1", or "healed".
func (c *Cluster) describe(g Grudge) string {
	var parts []string
	for from, tos := range g {
		for _, to := range tos {
			parts = append(parts, c.Nodes[from].ID+"↛"+c.Nodes[to].ID)
		}
	}
	if len(parts) == 0 {
		return "healed"
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// netLogf appends a line to LogDir/network.log, the record of the network
// mode and of every partition.
func (c *Cluster) netLogf(format string, args ...any) {
	c.netLogMu.Lock()
	defer c.netLogMu.Unlock()
	f, err := os.OpenFile(c.netLogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

func errOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// cutBoth cuts a and b from each other.
func (g Grudge) cutBoth(a, b int) {
	g[a] = append(g[a], b)
	g[b] = append(g[b], a)
}

// IsolateGrudge cuts node off from all n-1 others, both directions.
func IsolateGrudge(n, node int) Grudge {
	g := Grudge{}
	for j := range n {
		if j != node {
			g.cutBoth(node, j)
		}
	}
	return g
}

// SplitGrudge cuts a random minority of n/2 nodes from the majority, both
// directions; each side still talks within itself.
func SplitGrudge(n int, rng *rand.Rand) Grudge {
	perm := rng.Perm(n)
	g := Grudge{}
	for _, a := range perm[:n/2] {
		for _, b := range perm[n/2:] {
			g.cutBoth(a, b)
		}
	}
	return g
}

// RingGrudge is Jepsen's "majorities ring": every node sees a majority
// (itself included), and no two nodes see the same one. The nodes are
// shuffled onto a ring and each sees only those within ring distance k,
// the smallest k for which that is a majority; cuts are symmetric.
//
// With n ≤ 3 no such ring exists with symmetric links (for 3 nodes each
// would have to see exactly one other, and seeing is mutual), so it
// degrades to the closest shape: one random pair cut from each other, both
// directions. Both ends of the cut pair see a different majority through
// the third node, which sees everyone — the same shape as BridgeGrudge.
func RingGrudge(n int, rng *rand.Rand) Grudge {
	g := Grudge{}
	if n <= 3 {
		if n >= 2 {
			perm := rng.Perm(n)
			g.cutBoth(perm[0], perm[1])
		}
		return g
	}
	ring := rng.Perm(n)
	majority := n/2 + 1
	k := majority / 2 // 2k+1 ≥ majority
	for i := range n {
		for j := i + 1; j < n; j++ {
			if d := min(j-i, n-(j-i)); d > k {
				g.cutBoth(ring[i], ring[j])
			}
		}
	}
	return g
}

// BridgeGrudge splits the nodes into two halves that cannot reach each
// other (both directions), except through one random bridge node that
// talks to everyone. With 3 nodes the halves are one node each.
func BridgeGrudge(n int, rng *rand.Rand) Grudge {
	perm := rng.Perm(n)
	g := Grudge{}
	if n < 3 {
		return g
	}
	rest := perm[1:] // perm[0] is the bridge
	half := len(rest) / 2
	for _, a := range rest[:half] {
		for _, b := range rest[half:] {
			g.cutBoth(a, b)
		}
	}
	return g
}

// OneWayGrudge drops what from sends to to, while to→from is delivered.
func OneWayGrudge(from, to int) Grudge { return Grudge{from: {to}} }

// setUpNetwork creates the network mechanism ClusterOptions.Net asks for.
func (c *Cluster) setUpNetwork() error {
	mode, why := c.opts.Net, ""
	nodes := c.opts.Nodes + c.opts.Spare
	switch mode {
	case NetNftables:
		n, err := newNftNet(nodes)
		if err != nil {
			return err
		}
		c.net = n
	case NetProxy:
	case "", "auto":
		n, err := newNftNet(nodes)
		if err == nil {
			c.net, mode = n, NetNftables
		} else {
			mode, why = NetProxy, fmt.Sprintf(" (nftables mode unavailable: %v)", err)
		}
	default:
		return fmt.Errorf("jepsen: ClusterOptions.Net %q: want %q, %q or \"auto\"", mode, NetNftables, NetProxy)
	}
	if mode == NetProxy {
		p, err := newProxyNet(nodes)
		if err != nil {
			return err
		}
		c.net = p
	}
	c.netMode = mode
	c.netLogf("network faults via %s%s", mode, why)
	return nil
}

// closeNetwork tears the network down; safe to call more than once.
func (c *Cluster) closeNetwork() {
	if c.net == nil {
		return
	}
	if c.http != nil {
		c.http.CloseIdleConnections()
	}
	if err := c.net.close(); err != nil {
		c.netLogf("closing the network: %v", err)
	}
}
