package raftmux

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// applyEverywhere applies n entries in every group of tc concurrently and
// waits until every replica has applied at least want.
func applyEverywhere(tc *testCluster, groups []int, n int, want uint64) {
	tc.t.Helper()
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc.apply(g, n)
		}()
	}
	wg.Wait()
	for _, g := range groups {
		tc.waitApplied(g, want)
	}
}

func allGroups(n int) []int {
	gs := make([]int, n)
	for i := range gs {
		gs[i] = i
	}
	return gs
}

func TestGroupsElectAndReplicate(t *testing.T) {
	const groups = 16
	tc := newTestCluster(t, groups)
	applyEverywhere(tc, allGroups(groups), 20, 20)

	var sent, writes, pipes, pipeSends, dials uint64
	for _, h := range tc.hubs {
		s := h.Stats()
		sent += s.FramesSent
		writes += s.Writes
		pipes += s.Pipelines
		pipeSends += s.PipelineSends
		dials += s.Dials
	}
	t.Logf("frames sent %d in %d writes, %d pipelines carried %d AppendEntries, %d dials", sent, writes, pipes, pipeSends, dials)
	if pipes == 0 || pipeSends == 0 {
		t.Errorf("no AppendEntries went through a pipeline (pipelines %d, sends %d)", pipes, pipeSends)
	}
	if dials > 6 {
		t.Errorf("%d shared connections dialed for 3 nodes, want 6 (one per ordered pair)", dials)
	}
}

func TestConnectionKilledMidTraffic(t *testing.T) {
	const groups = 16
	tc := newTestCluster(t, groups)
	applyEverywhere(tc, allGroups(groups), 5, 5)

	var wg sync.WaitGroup
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc.apply(g, 30)
		}()
	}
	// Kill the shared connections while the applies above are in flight.
	waitFor(t, 30*time.Second, "traffic", func() bool { return tc.reps[0][0].fsm.count() > 5 || tc.reps[1][1].fsm.count() > 5 })
	if k := tc.net.killDialed(); k == 0 {
		t.Fatal("no connection to kill")
	}
	wg.Wait()
	applyEverywhere(tc, allGroups(groups), 5, 40)
	var dials uint64
	for _, h := range tc.hubs {
		dials += h.Stats().Dials
	}
	if dials <= 6 {
		t.Errorf("%d dials: the killed connections were not redialed", dials)
	}
}

// gatedTransport holds back its inbound RPCs while its gate is locked.
type gatedTransport struct {
	*Transport
	gate *sync.RWMutex
	out  chan raft.RPC
}

func newGated(tr *Transport, gate *sync.RWMutex) *gatedTransport {
	g := &gatedTransport{Transport: tr, gate: gate, out: make(chan raft.RPC)}
	go func() {
		for {
			select {
			case rpc := <-tr.Consumer():
				gate.RLock()
				gate.RUnlock() //nolint:staticcheck // waits for the gate to open
				select {
				case g.out <- rpc:
				case <-tr.shutdown:
					return
				}
			case <-tr.shutdown:
				return
			}
		}
	}()
	return g
}

func (g *gatedTransport) Consumer() <-chan raft.RPC { return g.out }

func TestBlockedConsumerDoesNotBlockOthers(t *testing.T) {
	const groups = 6
	tc := &testCluster{t: t, net: newTestNet(t)}
	for range 3 {
		h, a := tc.net.newHub(Options{Timeout: 2 * time.Second})
		tc.hubs = append(tc.hubs, h)
		tc.addrs = append(tc.addrs, a)
	}
	var gate sync.RWMutex
	tc.reps = make([][]*replica, groups)
	for g := range groups {
		tc.reps[g] = make([]*replica, 3)
		for i := range 3 {
			tr, err := tc.hubs[i].Transport(uint32(g), tc.addrs[i])
			if err != nil {
				t.Fatal(err)
			}
			var rt raft.Transport = tr
			if g == 0 {
				rt = newGated(tr, &gate)
			}
			tc.startOn(uint32(g), i, rt, nil, true)
		}
	}
	applyEverywhere(tc, allGroups(groups), 3, 3)

	// Group 0's replicas stop taking RPCs; its leader keeps sending.
	gate.Lock()
	unlocked := false
	defer func() {
		if !unlocked {
			gate.Unlock()
		}
	}()
	l0 := tc.leader(0)
	stuck := make([]raft.ApplyFuture, 0, 50)
	for range 50 {
		stuck = append(stuck, l0.r.Apply([]byte("y"), 0))
	}
	others := allGroups(groups)[1:]
	applyEverywhere(tc, others, 20, 23)
	if n := l0.fsm.count(); n > 3 {
		t.Fatalf("group 0 applied %d entries while its followers were blocked", n)
	}
	gate.Unlock()
	unlocked = true
	tc.waitApplied(0, 53)
	_ = stuck
}

func TestCloseOneGroup(t *testing.T) {
	const groups = 4
	tc := newTestCluster(t, groups)
	applyEverywhere(tc, allGroups(groups), 3, 3)
	for _, rep := range tc.reps[0] {
		if err := rep.r.Shutdown().Error(); err != nil {
			t.Fatal(err)
		}
		// raft.Raft's Shutdown closes a transport with Close.
	}
	for _, h := range tc.hubs {
		if h.lookup(0) != nil {
			t.Fatal("group 0 still registered after its Raft shut down")
		}
	}
	applyEverywhere(tc, allGroups(groups)[1:], 10, 13)

	// Group 0's requests to a peer are refused; the group can come back.
	tr, err := tc.hubs[0].Transport(0, tc.addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	var resp raft.RequestVoteResponse
	err = tr.RequestVote("n1", tc.addrs[1], &raft.RequestVoteRequest{Term: 1}, &resp)
	if err == nil {
		t.Fatal("RequestVote to a group that is gone succeeded")
	}
	t.Logf("refused as expected: %v", err)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotInstall(t *testing.T) {
	tc := &testCluster{t: t, net: newTestNet(t)}
	for range 3 {
		h, a := tc.net.newHub(Options{Timeout: 2 * time.Second})
		tc.hubs = append(tc.hubs, h)
		tc.addrs = append(tc.addrs, a)
	}
	tc.reps = [][]*replica{make([]*replica, 3)}
	tune := func(c *raft.Config) {
		c.SnapshotThreshold = 20
		c.TrailingLogs = 5
		c.SnapshotInterval = time.Hour // snapshots taken by the test
	}
	tc.start(0, 0, tune, true)
	tc.start(0, 1, tune, true)
	// Replica 2 is in the configuration but not running: it falls behind.
	tc.apply(0, 100)
	l := tc.leader(0)
	if err := l.r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	tc.apply(0, 10)
	late := tc.start(0, 2, tune, false)
	tc.waitApplied(0, 110)
	var sent, recv uint64
	for _, h := range tc.hubs {
		sent += h.Stats().SnapshotsSent
		recv += h.Stats().SnapshotsRecv
	}
	if sent == 0 || recv == 0 {
		t.Fatalf("no snapshot went through InstallSnapshot (sent %d, received %d)", sent, recv)
	}
	if st := late.r.Stats()["last_snapshot_index"]; st == "0" {
		t.Errorf("late replica's last snapshot index is %s", st)
	}
	t.Logf("snapshots sent %d, received %d", sent, recv)
	_ = fmt.Sprint()
}

// TestLeaderShutsDownAfterFollowersLeave: once the followers' groups are
// gone their refusals end raft's pipelines; the leader's replication must
// not block on the pipeline, or its Shutdown would never return.
func TestLeaderShutsDownAfterFollowersLeave(t *testing.T) {
	tc := &testCluster{t: t, net: newTestNet(t)}
	for range 3 {
		h, a := tc.net.newHub(Options{Timeout: 2 * time.Second, MaxInFlight: 2})
		tc.hubs = append(tc.hubs, h)
		tc.addrs = append(tc.addrs, a)
	}
	tc.reps = [][]*replica{make([]*replica, 3)}
	for i := range 3 {
		tc.start(0, i, nil, true)
	}
	tc.apply(0, 10)
	l := tc.leader(0)
	for _, rep := range tc.reps[0] {
		if rep != l {
			if err := rep.r.Shutdown().Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 20 {
		l.r.Apply([]byte("z"), 0) // keeps the pipelines sending
	}
	done := make(chan struct{})
	go func() {
		_ = l.r.Shutdown().Error()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the leader's Shutdown did not return")
	}
}
