package raftmux

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// testNet is a set of hubs on loopback TCP; it maps each hub's address to
// its snapshot listener and records the shared connections dialed.
type testNet struct {
	t      testing.TB
	mu     sync.Mutex
	snap   map[raft.ServerAddress]string
	dialed []net.Conn
	hubs   []*Hub
}

// hubAt returns the hub listening on addr.
func (n *testNet) hubAt(t testing.TB, addr raft.ServerAddress) *Hub {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, h := range n.hubs {
		if raft.ServerAddress(h.opts.Listener.Addr().String()) == addr {
			return h
		}
	}
	t.Fatalf("no hub at %s", addr)
	return nil
}

func newTestNet(t testing.TB) *testNet {
	return &testNet{t: t, snap: make(map[raft.ServerAddress]string)}
}

// newHub starts a hub; opts' dial functions and listeners are filled in.
func (n *testNet) newHub(opts Options) (*Hub, raft.ServerAddress) {
	t := n.t
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := raft.ServerAddress(l.Addr().String())
	n.mu.Lock()
	n.snap[addr] = sl.Addr().String()
	n.mu.Unlock()
	var d net.Dialer
	opts.Listener, opts.SnapshotListener = l, sl
	opts.Dial = func(ctx context.Context, a raft.ServerAddress) (net.Conn, error) {
		c, err := d.DialContext(ctx, "tcp", string(a))
		if err == nil {
			n.mu.Lock()
			n.dialed = append(n.dialed, c)
			n.mu.Unlock()
		}
		return c, err
	}
	opts.DialSnapshot = func(ctx context.Context, a raft.ServerAddress) (net.Conn, error) {
		n.mu.Lock()
		sa := n.snap[a]
		n.mu.Unlock()
		return d.DialContext(ctx, "tcp", sa)
	}
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: io.Discard})
	}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	n.hubs = append(n.hubs, h)
	n.mu.Unlock()
	t.Cleanup(func() { _ = h.Close() })
	return h, addr
}

// killDialed closes every shared connection dialed so far.
func (n *testNet) killDialed() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range n.dialed {
		_ = c.Close()
	}
	k := len(n.dialed)
	n.dialed = nil
	return k
}

// countFSM counts applied entries; its snapshot is the count.
type countFSM struct {
	mu sync.Mutex
	n  uint64
}

func (f *countFSM) Apply(*raft.Log) interface{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return f.n
}

func (f *countFSM) count() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) { return countSnap(f.count()), nil }

func (f *countFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [8]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	f.mu.Lock()
	f.n = binary.BigEndian.Uint64(b[:])
	f.mu.Unlock()
	return nil
}

type countSnap uint64

func (s countSnap) Persist(sink raft.SnapshotSink) error {
	// Padding makes the snapshot big enough to need several buffers.
	b := binary.BigEndian.AppendUint64(nil, uint64(s))
	b = append(b, make([]byte, 100<<10)...)
	if _, err := sink.Write(b); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (countSnap) Release() {}

// replica is one group's Raft instance on one node.
type replica struct {
	r     *raft.Raft
	fsm   *countFSM
	trans raft.Transport
}

// testCluster is groups × 3 replicas, replica i of each group on hub i.
type testCluster struct {
	t     testing.TB
	net   *testNet
	hubs  []*Hub
	addrs []raft.ServerAddress
	reps  [][]*replica // [group][node]
}

func testRaftConfig(id int) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(fmt.Sprintf("n%d", id))
	c.HeartbeatTimeout = time.Second
	c.ElectionTimeout = time.Second
	c.LeaderLeaseTimeout = 500 * time.Millisecond
	c.CommitTimeout = 20 * time.Millisecond
	c.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: io.Discard})
	return c
}

func newTestCluster(t testing.TB, groups int) *testCluster {
	tc := &testCluster{t: t, net: newTestNet(t)}
	for range 3 {
		h, a := tc.net.newHub(Options{Timeout: 2 * time.Second})
		tc.hubs = append(tc.hubs, h)
		tc.addrs = append(tc.addrs, a)
	}
	tc.reps = make([][]*replica, groups)
	for g := range groups {
		tc.reps[g] = make([]*replica, 3)
		for i := range 3 {
			tc.start(uint32(g), i, nil, true)
		}
	}
	return tc
}

func (tc *testCluster) servers() raft.Configuration {
	var cfg raft.Configuration
	for i, a := range tc.addrs {
		cfg.Servers = append(cfg.Servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i)), Address: a})
	}
	return cfg
}

// start starts replica i of group g; wrap, when set, wraps its transport.
func (tc *testCluster) start(g uint32, i int, tune func(*raft.Config), bootstrap bool) *replica {
	t := tc.t
	tr, err := tc.hubs[i].Transport(g, tc.addrs[i])
	if err != nil {
		t.Fatal(err)
	}
	return tc.startOn(g, i, tr, tune, bootstrap)
}

func (tc *testCluster) startOn(g uint32, i int, tr raft.Transport, tune func(*raft.Config), bootstrap bool) *replica {
	t := tc.t
	cfg := testRaftConfig(i)
	if tune != nil {
		tune(cfg)
	}
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	if bootstrap {
		if err := raft.BootstrapCluster(cfg, store, store, snaps, tr, tc.servers()); err != nil {
			t.Fatal(err)
		}
	}
	fsm := &countFSM{}
	r, err := raft.NewRaft(cfg, fsm, store, store, snaps, tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown().Error() })
	rep := &replica{r: r, fsm: fsm, trans: tr}
	tc.reps[g][i] = rep
	return rep
}

// leader waits for group g to have a leader and returns it.
func (tc *testCluster) leader(g int) *replica {
	tc.t.Helper()
	var found *replica
	waitFor(tc.t, 60*time.Second, fmt.Sprintf("a leader in group %d", g), func() bool {
		for _, rep := range tc.reps[g] {
			if rep != nil && rep.r.State() == raft.Leader {
				found = rep
				return true
			}
		}
		return false
	})
	return found
}

// apply applies n entries in group g through its leader, retrying on a
// leadership change.
func (tc *testCluster) apply(g, n int) {
	tc.t.Helper()
	for done := 0; done < n; {
		l := tc.leader(g)
		if err := l.r.Apply([]byte("x"), 10*time.Second).Error(); err != nil {
			continue // not leader any more, or a timeout: try again
		}
		done++
	}
}

// waitApplied waits until every running replica of group g has applied
// at least n entries.
func (tc *testCluster) waitApplied(g int, n uint64) {
	tc.t.Helper()
	waitFor(tc.t, 60*time.Second, fmt.Sprintf("group %d applied %d on all", g, n), func() bool {
		for _, rep := range tc.reps[g] {
			if rep != nil && rep.fsm.count() < n {
				return false
			}
		}
		return true
	})
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}
