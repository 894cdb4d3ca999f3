package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
)

// segmentsOf are the WAL segment files of the replica in dir, in log order.
func segmentsOf(tb testing.TB, dir string) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
	if err != nil {
		tb.Fatal(err)
	}
	return files
}

// segmentHolding is the one segment file in dir's WAL that holds needle.
func segmentHolding(tb testing.TB, dir string, needle []byte) string {
	tb.Helper()
	for _, f := range segmentsOf(tb, dir) {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		if strings.Contains(string(b), string(needle)) {
			return f
		}
	}
	tb.Fatalf("no segment in %s holds %q", dir, needle)
	return ""
}

// A data group replica whose WAL segment has bytes flipped in the middle
// (entries written after them intact) does not start: its node runs on,
// its status shows the group as "damaged", naming the segment file and the
// recovery; the group goes on answering on the other replicas, and
// deleting the replica's directory brings it back.
func TestWALDamagedSegmentStopsReplica(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes, cfg.LogStore = 1, 3, node.LogStoreWAL
	}})
	applyPolicy(t, c, "integrity", 100000, 366*24*time.Hour, 100000)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admitSome := newSpendCheck(ctx, t, c, "integrity", 100000).admit
	const key = "integrity-wal-segment-damaged"
	admitSome(key, 1, 0)
	admitSome("k", 20, 0, 1, 2) // entries after the damaged one
	const victim = 2
	c.Eventually(t, 30*time.Second, "the victim applying everything", func() error {
		if g := groupState(c, victim, 1); g.GetLastAppliedIndex() < groupState(c, 0, 1).GetCommitIndex() {
			return fmt.Errorf("group 1 on the victim: %v", g)
		}
		return nil
	})
	c.Stop(victim)
	dir := filepath.Join(c.Config(victim).DataDir, "groups", "1")
	path := segmentHolding(t, dir, []byte(key))
	if n := damageEvery(t, path, []byte(key)); n == 0 {
		t.Fatalf("%s holds no copy of %q", path, key)
	}
	c.Start(victim)
	c.Eventually(t, 30*time.Second, "group 1 damaged on the victim", func() error {
		g := groupState(c, victim, 1)
		if msg := g.GetStorageError(); g.GetRole() != "damaged" || !strings.Contains(msg, path+" is damaged") ||
			!strings.Contains(msg, "to recover, delete "+dir) {
			return fmt.Errorf("group 1: %v", g)
		}
		return nil
	})
	t.Logf("victim: %s", groupState(c, victim, 1).GetStorageError())
	admitSome(key, 10, 0, 1)

	c.Stop(victim)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	c.Start(victim)
	c.Eventually(t, 30*time.Second, "group 1 replica back on the victim", func() error {
		g := groupState(c, victim, 1)
		if r := g.GetRole(); r != "follower" && r != "leader" || g.GetStorageError() != "" ||
			g.GetLastAppliedIndex() < groupState(c, 0, 1).GetCommitIndex() {
			return fmt.Errorf("group 1: %v", g)
		}
		return nil
	})
	admitSome(key, 3, victim)
}

// A node stopped by a crash in the middle of an append leaves its WAL's
// last segment cut inside its last record: the node starts with the
// entries before it, raft catches it up, and every answer stays right.
func TestWALTornTailCatchesUp(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: walStore})
	applyPolicy(t, c, "integrity", 100000, 366*24*time.Hour, 100000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc := newSpendCheck(ctx, t, c, "integrity", 100000)
	admitSome := func(n int, on ...int) {
		t.Helper()
		sc.admit("torn", n, on...)
	}
	admitSome(30, 0, 1, 2)
	leader := c.Leader(t)
	victim := (leader + 1) % 3
	caughtUp(t, c, victim, leader)
	c.Stop(victim)

	dir := filepath.Join(c.Config(victim).DataDir, "raft")
	segs := segmentsOf(t, dir)
	tail := segs[len(segs)-1]
	b, err := os.ReadFile(tail)
	if err != nil {
		t.Fatal(err)
	}
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	cut := end - 40 // inside the last record written, or its commit frame
	if err := os.Truncate(tail, int64(cut)); err != nil {
		t.Fatal(err)
	}
	t.Logf("cut %s at %d of %d written bytes", tail, cut, end)
	admitSome(10, leader)
	c.Start(victim)
	caughtUp(t, c, victim, c.Leader(t))
	admitSome(5, victim)
}

// walStore makes a node create its replicas with a WAL each.
func walStore(_ int, cfg *node.Config) { cfg.LogStore = node.LogStoreWAL }

// Nodes killed while they admit lose no acknowledged decision: after every
// node of the cluster is killed at once, mid-traffic, and restarted, the
// key has spent at least every allowed answer that reached a client. With
// a WAL per replica, and with the node's shared log.
func TestKilledWhileAdmittingLosesNothing(t *testing.T) {
	for _, store := range []string{node.LogStoreWAL, node.LogStoreShared} {
		t.Run(store, func(t *testing.T) { killedWhileAdmitting(t, store) })
	}
}

func killedWhileAdmitting(t *testing.T, store string) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes, cfg.LogStore = 1, 3, store
	}})
	const limit = 100000
	applyPolicy(t, c, "kill", limit, 366*24*time.Hour, limit)
	var acked, attempted atomic.Int64
	// Cancelled once the nodes are killed: the clients stop at once rather
	// than dial the dead nodes (their ports are to be listened on again).
	traffic, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for j := 0; traffic.Err() == nil; j++ {
				attempted.Add(1)
				ctx, cancel := context.WithTimeout(traffic, 2*time.Second)
				resp, err := admit(ctx, c, (w+j)%3, "kill", "kill-key", 1)
				cancel()
				if err == nil && resp.GetAllowed() {
					acked.Add(1)
				}
			}
		})
	}
	c.Eventually(t, 30*time.Second, "decisions under way", func() error {
		if n := acked.Load(); n < 100 {
			return fmt.Errorf("%d acknowledged", n)
		}
		return nil
	})
	for i := range c.Len() {
		c.Kill(i)
	}
	stop()
	wg.Wait()
	for i := range c.Len() {
		c.Start(i)
	}
	c.WaitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := admit(ctx, c, 0, "kill", "kill-key", 1)
	if err != nil {
		t.Fatal(err)
	}
	spent := limit - resp.GetRemaining() - 1
	t.Logf("acknowledged %d of %d attempts; the key has spent %d", acked.Load(), attempted.Load(), spent)
	if spent < acked.Load() || spent > attempted.Load() {
		t.Fatalf("spent %d after the restart: %d were acknowledged, %d attempted", spent, acked.Load(), attempted.Load())
	}
}

// dirBytes is the size of the files under dir.
func dirBytes(tb testing.TB, dir string) int64 {
	tb.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return err
	})
	if err != nil && !os.IsNotExist(err) {
		tb.Fatal(err)
	}
	return n
}

// A WAL replica's directory stays bounded: after snapshots, compaction
// (keeping TrailingLogs entries) deletes the segment files that hold only
// older entries, so however much is written the directory falls back
// under a few segments' size.
func TestWALDataDirBounded(t *testing.T) {
	const segment = 64 << 10
	var dir string
	boundedLog(t, func(cfg *node.Config) {
		cfg.LogStore = node.LogStoreWAL
		node.SetWALSegmentBytes(cfg, segment)
		dir = filepath.Join(cfg.DataDir, "raft")
	}, func() ([]string, error) {
		wal, all := dirBytes(t, filepath.Join(dir, "wal")), dirBytes(t, dir)
		segs := segmentsOf(t, dir)
		if len(segs) > 3 || wal > 6*segment {
			return segs, fmt.Errorf("%d segments, %d bytes in wal/, %d in all", len(segs), wal, all)
		}
		return segs, nil
	})
}

// boundedLog writes ~1500 entries of ~400 bytes to a one-node cluster
// whose log store configure sets up (with snapshots every 64 entries,
// keeping 16), checking that at least 5 distinct segment files were
// written, then waits until bounded, which lists the segments now, no
// longer fails.
func boundedLog(t *testing.T, configure func(*node.Config), bounded func() ([]string, error)) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Configure: func(i int, cfg *node.Config) {
		cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = 64, 20*time.Millisecond, 16
		configure(cfg)
	}})
	applyPolicy(t, c, "bounded", 1_000_000, 366*24*time.Hour, 1_000_000)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	key := strings.Repeat("bounded-", 40)
	seen := map[string]bool{}
	for i := range 1500 {
		if _, err := admit(ctx, c, 0, "bounded", fmt.Sprintf("%s%d", key, i), 1); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			segs, _ := bounded()
			for _, f := range segs {
				seen[filepath.Base(f)] = true
			}
		}
	}
	// Each entry is ~400 bytes: 1500 of them fill ~9 segments.
	if len(seen) < 5 {
		t.Fatalf("only %d segment files seen: %v", len(seen), seen)
	}
	var now []string
	c.Eventually(t, 30*time.Second, "the log back under its bound", func() (err error) {
		now, err = bounded()
		return err
	})
	t.Logf("%d segment files written; now %v", len(seen), now)
}

// A replica created with the bolt store stays bolt when its node restarts
// with the WAL as --log-store, its state intact
// (TestReplicaKeepsItsStore: a new replica takes --log-store).
func TestBoltReplicaStaysBolt(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Configure: boltStore})
	applyPolicy(t, c, "kept", 1000, 366*24*time.Hour, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc := newSpendCheck(ctx, t, c, "kept", 1000)
	admitSome := func(n int) {
		t.Helper()
		sc.admit("k", n)
	}
	admitSome(5)
	c.Stop(0)
	cfg := c.Config(0)
	cfg.LogStore = node.LogStoreWAL
	c.Start(0)
	c.WaitReady(t)
	admitSome(5)
	meta := filepath.Join(cfg.DataDir, "raft")
	if _, err := os.Stat(filepath.Join(meta, "raft.db")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(meta, "wal")); !os.IsNotExist(err) {
		t.Fatalf("a bolt replica grew a WAL: %v", err)
	}
}
