package nodelog

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// listFSM is a state machine that keeps every command applied.
// listFSM lists the commands applied, each once: every command is
// unique, and applyN proposes one again when its first Apply's outcome was
// unknown (leadership lost while committing, on a loaded machine), so a
// command already listed is a retry that made it into the log twice.
type listFSM struct {
	mu   sync.Mutex
	cmds []string
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := string(l.Data); !slices.Contains(f.cmds, c) {
		f.cmds = append(f.cmds, c)
	}
	return len(f.cmds)
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return listSnap(append([]string(nil), f.cmds...)), nil
}

func (f *listFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	var cmds []string
	if err := json.NewDecoder(r).Decode(&cmds); err != nil {
		return err
	}
	f.mu.Lock()
	f.cmds = cmds
	f.mu.Unlock()
	return nil
}

func (f *listFSM) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cmds...)
}

type listSnap []string

func (s listSnap) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (listSnap) Release() {}

// raftNode is one node: one Log shared by its replicas of every group,
// each replica's term and vote in a raft-boltdb file of its own.
type raftNode struct {
	dir     string
	log     *Log
	stables []*raftboltdb.BoltStore
	rafts   map[uint32]*raft.Raft
	fsms    map[uint32]*listFSM
	trans   map[uint32]*raft.InmemTransport
}

func raftAddr(node int, g uint32) raft.ServerAddress {
	return raft.ServerAddress(fmt.Sprintf("n%d-g%d", node, g))
}

func startNode(t *testing.T, dir string, node int, groups []uint32) *raftNode {
	t.Helper()
	n := &raftNode{dir: dir, log: openT(t, dir, Options{SegmentBytes: 32 << 10}),
		rafts: map[uint32]*raft.Raft{}, fsms: map[uint32]*listFSM{}, trans: map[uint32]*raft.InmemTransport{}}
	for _, g := range groups {
		conf := raft.DefaultConfig()
		conf.LocalID = raft.ServerID(raftAddr(node, g))
		conf.HeartbeatTimeout = 100 * time.Millisecond
		conf.ElectionTimeout = 100 * time.Millisecond
		conf.LeaderLeaseTimeout = 100 * time.Millisecond
		conf.CommitTimeout = 5 * time.Millisecond
		conf.SnapshotThreshold = 40
		conf.SnapshotInterval = 50 * time.Millisecond
		conf.TrailingLogs = 10
		conf.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: io.Discard})
		snaps, err := raft.NewFileSnapshotStore(filepath.Join(dir, fmt.Sprintf("snap-%d", g)), 2, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		// A generous timeout: a leader's retries back off for seconds
		// after a node was down, and -race on a loaded machine is slow.
		_, tr := raft.NewInmemTransportWithTimeout(raftAddr(node, g), 5*time.Second)
		n.fsms[g], n.trans[g] = &listFSM{}, tr
		stable, err := raftboltdb.NewBoltStore(filepath.Join(dir, fmt.Sprintf("stable-%d.db", g)))
		if err != nil {
			t.Fatal(err)
		}
		n.stables = append(n.stables, stable)
		r, err := raft.NewRaft(conf, n.fsms[g], groupT(t, n.log, g), stable, snaps, tr)
		if err != nil {
			t.Fatal(err)
		}
		n.rafts[g] = r
	}
	return n
}

func (n *raftNode) stop(t *testing.T) {
	t.Helper()
	for _, r := range n.rafts {
		if err := r.Shutdown().Error(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tr := range n.trans {
		tr.Close()
	}
	if err := n.log.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range n.stables {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func connect(nodes []*raftNode, groups []uint32) {
	for _, g := range groups {
		for _, a := range nodes {
			for _, b := range nodes {
				if a != b && a != nil && b != nil {
					a.trans[g].Connect(b.trans[g].LocalAddr(), b.trans[g])
				}
			}
		}
	}
}

func poll(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func leaderOf(nodes []*raftNode, g uint32) *raft.Raft {
	for _, n := range nodes {
		if n != nil && n.rafts[g].State() == raft.Leader {
			return n.rafts[g]
		}
	}
	return nil
}

func applyN(t *testing.T, nodes []*raftNode, g uint32, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		var err error
		poll(t, "a leader", func() bool {
			l := leaderOf(nodes, g)
			if l == nil {
				return false
			}
			err = l.Apply(fmt.Appendf(nil, "g%d cmd %d", g, i), 5*time.Second).Error()
			return err == nil
		})
	}
}

// TestRaftGroupsShareLogs runs two Raft groups on three nodes, each node
// keeping both groups' logs in one Log; a node restarted from its
// directory catches up with entries applied while it was down.
func TestRaftGroupsShareLogs(t *testing.T) {
	groups := []uint32{1, 2}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := make([]*raftNode, 3)
	for i := range nodes {
		nodes[i] = startNode(t, dirs[i], i, groups)
	}
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.stop(t)
			}
		}
	}()
	connect(nodes, groups)
	for _, g := range groups {
		var servers []raft.Server
		for i := range nodes {
			servers = append(servers, raft.Server{ID: raft.ServerID(raftAddr(i, g)), Address: raftAddr(i, g)})
		}
		if err := nodes[0].rafts[g].BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() { defer wg.Done(); applyN(t, nodes, g, 0, 100) }()
	}
	wg.Wait()

	// Stop a node that does not lead group 1, apply more, restart it.
	down := 2
	if nodes[down].rafts[1].State() == raft.Leader {
		down = 1
	}
	nodes[down].stop(t)
	nodes[down] = nil
	for _, g := range groups {
		applyN(t, nodes, g, 100, 200)
	}
	nodes[down] = startNode(t, dirs[down], down, groups)
	connect(nodes, groups)
	for _, g := range groups {
		applyN(t, nodes, g, 200, 220)
	}
	for _, g := range groups {
		want := 220
		for i, n := range nodes {
			poll(t, fmt.Sprintf("node %d group %d caught up", i, g), func() bool { return len(n.fsms[g].list()) == want })
			got := n.fsms[g].list()
			for k, c := range got {
				if c != fmt.Sprintf("g%d cmd %d", g, k) {
					t.Fatalf("node %d group %d command %d is %q", i, g, k, c)
				}
			}
		}
	}
	st := nodes[0].log.Stats()
	t.Logf("node 0: %d commits, %d syncs, %d segments of %d bytes", st.Commits, st.Syncs, st.Segments, st.Bytes)
}
