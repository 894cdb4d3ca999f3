package peermux

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// idFSM is the test groups' state machine: the set of entry IDs (8-byte
// big-endian) it applied, so that an entry retried after an unknown outcome
// counts once.
type idFSM struct {
	mu  sync.Mutex
	ids map[uint64]struct{}
}

var _ raft.FSM = (*idFSM)(nil)

func newIDFSM() *idFSM { return &idFSM{ids: make(map[uint64]struct{})} }

func (f *idFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids[binary.BigEndian.Uint64(l.Data)] = struct{}{}
	return nil
}

func (f *idFSM) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ids)
}

func (f *idFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := make([]byte, 0, 8*len(f.ids))
	for id := range f.ids {
		b = binary.BigEndian.AppendUint64(b, id)
	}
	return idSnapshot(b), nil
}

func (f *idFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids = make(map[uint64]struct{})
	for ; len(b) >= 8; b = b[8:] {
		f.ids[binary.BigEndian.Uint64(b)] = struct{}{}
	}
	return nil
}

type idSnapshot []byte

func (s idSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (idSnapshot) Release() {}

// muxCluster is in-process nodes, each with one loopback listener and one
// Mux hosting a replica of every group, over raft-boltdb files.
type muxCluster struct {
	tb     testing.TB
	groups []uint32
	conf   func() *raft.Config // LocalID and Logger are set by the cluster
	nodes  []*muxNode

	// writes and bytes count Write calls and bytes on the connections the
	// group transports dial. NetworkTransport buffers each RPC request and
	// flushes it once, so for RPCs under its 256 KiB buffer (every idle one)
	// writes is the number of RPC requests sent; responses are not counted.
	writes, bytes atomic.Int64
}

type muxNode struct {
	id, addr, dir string
	mux           *Mux
	served        chan struct{}
	replicas      map[uint32]*muxReplica
}

type muxReplica struct {
	raft  *raft.Raft
	store *raftboltdb.BoltStore
	fsm   *idFSM
}

// newMuxCluster starts n nodes hosting groups, each group bootstrapped with
// every node as a voter, and stops them at the end of the test.
func newMuxCluster(tb testing.TB, n int, groups []uint32, conf func() *raft.Config) *muxCluster {
	tb.Helper()
	c := &muxCluster{tb: tb, groups: groups, conf: conf}
	lns := make([]net.Listener, n)
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		lns[i] = ln
		c.nodes = append(c.nodes, &muxNode{id: fmt.Sprintf("n%d", i), addr: ln.Addr().String(), dir: tb.TempDir()})
	}
	tb.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
	})
	for i, ln := range lns {
		c.start(i, ln)
	}
	return c
}

// start runs node i's mux on ln and its replicas, bootstrapping those with
// no state.
func (c *muxCluster) start(i int, ln net.Listener) {
	c.tb.Helper()
	nd := c.nodes[i]
	nd.mux = New(ln, NewDialer(ln.Addr(), nil), nil, nil, Options{})
	nd.served = make(chan struct{})
	go func() {
		defer close(nd.served)
		nd.mux.Serve()
	}()
	var voters []raft.Server
	for _, o := range c.nodes {
		voters = append(voters, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(o.id), Address: raft.ServerAddress(o.addr)})
	}
	logOut := io.Discard
	if os.Getenv("QUORATE_MUX_LOG") != "" {
		logOut = os.Stderr
	}
	nd.replicas = make(map[uint32]*muxReplica)
	for _, g := range c.groups {
		logger := hclog.New(&hclog.LoggerOptions{Name: fmt.Sprintf("raft-%s-g%d", nd.id, g), Output: logOut, Level: hclog.Warn})
		stream, err := nd.mux.StreamLayer(g)
		if err != nil {
			c.tb.Fatal(err)
		}
		trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  &countingStream{StreamLayer: stream, writes: &c.writes, bytes: &c.bytes},
			MaxPool: RaftMaxPool,
			Timeout: RaftTimeout,
			Logger:  logger,
		})
		dir := filepath.Join(nd.dir, fmt.Sprintf("g%d", g))
		if err := os.MkdirAll(dir, 0o750); err != nil {
			c.tb.Fatal(err)
		}
		store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"), BoltOptions: &bbolt.Options{Timeout: time.Second}})
		if err != nil {
			c.tb.Fatal(err)
		}
		snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 1, logger)
		if err != nil {
			c.tb.Fatal(err)
		}
		logs, err := raft.NewLogCache(1024, store) // as Node has it
		if err != nil {
			c.tb.Fatal(err)
		}
		rc := c.conf()
		rc.LocalID = raft.ServerID(nd.id)
		rc.Logger = logger
		had, err := raft.HasExistingState(logs, store, snaps)
		if err != nil {
			c.tb.Fatal(err)
		}
		if !had {
			if err := raft.BootstrapCluster(rc, logs, store, snaps, trans, raft.Configuration{Servers: voters}); err != nil {
				c.tb.Fatal(err)
			}
		}
		rep := &muxReplica{store: store, fsm: newIDFSM()}
		if rep.raft, err = raft.NewRaft(rc, rep.fsm, logs, store, snaps, trans); err != nil {
			c.tb.Fatal(err)
		}
		nd.replicas[g] = rep
	}
}

// stop shuts down node i's replicas and mux; it is a no-op on a stopped node.
func (c *muxCluster) stop(i int) {
	nd := c.nodes[i]
	if nd.mux == nil {
		return
	}
	for g, r := range nd.replicas {
		if err := r.raft.Shutdown().Error(); err != nil {
			c.tb.Errorf("%s group %d: raft shutdown: %v", nd.id, g, err)
		}
		if err := r.store.Close(); err != nil {
			c.tb.Errorf("%s group %d: closing the store: %v", nd.id, g, err)
		}
	}
	if err := nd.mux.Close(); err != nil {
		c.tb.Errorf("%s: closing the mux: %v", nd.id, err)
	}
	<-nd.served
	nd.mux, nd.replicas = nil, nil
}

// restart starts stopped node i again on its address, from its files.
func (c *muxCluster) restart(i int) {
	c.tb.Helper()
	ln, err := net.Listen("tcp", c.nodes[i].addr)
	if err != nil {
		c.tb.Fatal(err)
	}
	c.start(i, ln)
}

// leader returns group g's replica on a running node that believes it
// leads, or nil.
func (c *muxCluster) leader(g uint32) *muxReplica {
	for _, nd := range c.nodes {
		if r := nd.replicas[g]; r != nil && r.raft.State() == raft.Leader {
			return r
		}
	}
	return nil
}

func (c *muxCluster) waitLeaders(timeout time.Duration) {
	c.tb.Helper()
	for _, g := range c.groups {
		waitFor(c.tb, timeout, fmt.Sprintf("group %d has no leader", g), func() bool { return c.leader(g) != nil })
	}
}

// apply commits the entries with IDs [from, to) to every group, through
// whichever replica leads it, retrying entries whose outcome is not known
// to be a success (the FSM counts each ID once).
func (c *muxCluster) apply(from, to uint64, timeout time.Duration) {
	c.tb.Helper()
	for _, g := range c.groups {
		pending := make([]uint64, 0, to-from)
		for id := from; id < to; id++ {
			pending = append(pending, id)
		}
		deadline := time.Now().Add(timeout)
		for len(pending) > 0 {
			if time.Now().After(deadline) {
				c.tb.Fatalf("group %d: %d entries not committed after %v", g, len(pending), timeout)
			}
			l := c.leader(g)
			if l == nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			futures := make([]raft.ApplyFuture, len(pending))
			for i, id := range pending {
				futures[i] = l.raft.Apply(binary.BigEndian.AppendUint64(nil, id), 5*time.Second)
			}
			var failed []uint64
			for i, f := range futures {
				if f.Error() != nil {
					failed = append(failed, pending[i])
				}
			}
			pending = failed
		}
	}
}

// waitApplied waits until every replica on the running nodes has applied
// want distinct entries.
func (c *muxCluster) waitApplied(want int, timeout time.Duration) {
	c.tb.Helper()
	for _, nd := range c.nodes {
		for g, r := range nd.replicas {
			waitFor(c.tb, timeout, fmt.Sprintf("%s group %d applied %d entries, want %d", nd.id, g, r.fsm.count(), want),
				func() bool { return r.fsm.count() == want })
		}
	}
}

// countingStream counts the writes on the connections it dials.
type countingStream struct {
	raft.StreamLayer
	writes, bytes *atomic.Int64
}

func (s *countingStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := s.StreamLayer.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, writes: s.writes, bytes: s.bytes}, nil
}

type countingConn struct {
	net.Conn
	writes, bytes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	c.bytes.Add(int64(len(p)))
	return c.Conn.Write(p)
}

// muxTestRaftConfig is raft's defaults with timeouts short enough for tests.
func muxTestRaftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.HeartbeatTimeout = 500 * time.Millisecond
	rc.ElectionTimeout = 500 * time.Millisecond
	rc.LeaderLeaseTimeout = 250 * time.Millisecond
	return rc
}

// Three nodes host four Raft groups over one mux each: every group elects a
// leader and replicates to all; with one node down every group still
// commits; the node restarted on its address catches up.
func TestMuxRaftGroups(t *testing.T) {
	checkNoGoroutineLeak(t)
	c := newMuxCluster(t, 3, []uint32{0, 1, 2, 3}, muxTestRaftConfig)
	c.waitLeaders(20 * time.Second)
	c.apply(0, 100, 30*time.Second)
	c.waitApplied(100, 20*time.Second)

	c.stop(2)
	c.waitLeaders(20 * time.Second)
	c.apply(100, 150, 30*time.Second)
	c.waitApplied(150, 20*time.Second)

	c.restart(2)
	c.waitApplied(150, 30*time.Second)
	c.apply(150, 160, 30*time.Second)
	c.waitApplied(160, 20*time.Second)
	for i := range c.nodes {
		c.stop(i)
	}
}

// idleSettings are the Raft timings the idle measurement compares.
var idleSettings = []struct {
	name                                 string
	heartbeat, election, lease, commitTO time.Duration
}{
	{"default", time.Second, time.Second, 500 * time.Millisecond, 50 * time.Millisecond},
	{"commit500ms", time.Second, time.Second, 500 * time.Millisecond, 500 * time.Millisecond},
	{"hb2s-commit1s", 2 * time.Second, 2 * time.Second, time.Second, time.Second},
}

// TestMuxIdleCost measures what idle groups cost: 3 in-process nodes host G
// groups each (all replicas of a group in this process), and over a fixed
// wall period it logs the process's CPU time (getrusage, user+system) and
// the Raft RPC requests sent (see muxCluster.writes). It asserts nothing.
// Run it with:
//
//	QUORATE_MEASURE=1 go test -run TestMuxIdleCost -v ./peermux/
func TestMuxIdleCost(t *testing.T) {
	if testing.Short() || os.Getenv("QUORATE_MEASURE") == "" {
		t.Skip("a measurement: set QUORATE_MEASURE=1 to run it")
	}
	window := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("QUORATE_MEASURE_WINDOW")); err == nil {
		window = d
	}
	t.Logf("GOMAXPROCS=%d, window %v; per group = all 3 replicas of it; per replica = per group / 3", runtime.GOMAXPROCS(0), window)
	for _, s := range idleSettings {
		cpuAt := make(map[int]float64) // G → CPU ms/s
		for _, g := range []int{8, 32, 64} {
			t.Run(fmt.Sprintf("%s/groups=%d", s.name, g), func(t *testing.T) {
				groups := make([]uint32, g)
				for i := range groups {
					groups[i] = uint32(i)
				}
				goBefore := runtime.NumGoroutine()
				c := newMuxCluster(t, 3, groups, func() *raft.Config {
					rc := raft.DefaultConfig()
					rc.HeartbeatTimeout, rc.ElectionTimeout = s.heartbeat, s.election
					rc.LeaderLeaseTimeout, rc.CommitTimeout = s.lease, s.commitTO
					return rc
				})
				c.waitLeaders(60 * time.Second)
				c.apply(0, 1, 30*time.Second) // every group has committed in its term
				c.waitApplied(1, 30*time.Second)
				goroutines := runtime.NumGoroutine() - goBefore
				// Let the start-up's garbage go before measuring.
				time.Sleep(2 * time.Second) // settling, not synchronisation
				debug.FreeOSMemory()

				cpu0, w0, b0, t0 := cpuTime(t), c.writes.Load(), c.bytes.Load(), time.Now()
				time.Sleep(window) // the measurement window, not synchronisation
				cpu1, w1, b1, el := cpuTime(t), c.writes.Load(), c.bytes.Load(), time.Since(t0)

				sec := el.Seconds()
				cpuMS := float64((cpu1 - cpu0).Microseconds()) / 1000 / sec
				rpcs := float64(w1-w0) / sec
				bps := float64(b1-b0) / sec
				cpuAt[g] = cpuMS
				perReplicaCPU := cpuMS / float64(3*g)
				t.Logf("%-14s G=%-3d CPU %7.1f ms/s (%.3f ms/s per group, %.3f per replica); RPCs %7.0f/s (%.1f/s per group); %5.0f B/s per group; %d goroutines (%.1f per replica)",
					s.name, g, cpuMS, cpuMS/float64(g), perReplicaCPU, rpcs, rpcs/float64(g), bps/float64(g), goroutines, float64(goroutines)/float64(3*g))
			})
		}
		// The slope leaves out what the process costs whatever G is.
		perGroup := (cpuAt[64] - cpuAt[8]) / (64 - 8)
		perReplica := perGroup / 3
		t.Logf("%-14s marginal CPU %.2f ms/s per idle group, %.2f per replica → a 2-core node hosts ≈%.0f idle replicas in 10%% of one core, ≈%.0f in 10%% of both (≈%.0f at saturation)",
			s.name, perGroup, perReplica, 100/perReplica, 200/perReplica, 2000/perReplica)
	}
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
