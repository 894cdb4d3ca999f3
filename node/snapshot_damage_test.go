package node_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// lineTimes passes a node's log on and records when a line containing
// needle was written.
type lineTimes struct {
	w      io.Writer
	needle []byte
	mu     sync.Mutex
	times  []time.Time
}

func (l *lineTimes) Write(p []byte) (int, error) {
	if bytes.Contains(p, l.needle) {
		l.mu.Lock()
		l.times = append(l.times, time.Now())
		l.mu.Unlock()
	}
	return l.w.Write(p)
}

func (l *lineTimes) seen() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.times)
}

// groupState is node i's status row of group id, or nil.
func groupState(c *nodetest.Cluster, i int, id uint32) *quoratev1.GroupState {
	for _, g := range c.Node(i).Status().GetGroups() {
		if g.GetId() == id {
			return g
		}
	}
	return nil
}

// groupLeader waits until a running node leads group id, and returns it.
func groupLeader(tb testing.TB, c *nodetest.Cluster, id uint32) int {
	tb.Helper()
	leader := -1
	c.Eventually(tb, 30*time.Second, fmt.Sprintf("a leader of group %d", id), func() error {
		for i := range c.Len() {
			if c.Running(i) && groupState(c, i, id).GetRole() == "leader" {
				leader = i
				return nil
			}
		}
		return fmt.Errorf("none")
	})
	return leader
}

// snapshotDirs are the snapshots of data group 1's replica on node i.
func snapshotDirs(tb testing.TB, c *nodetest.Cluster, i int) []string {
	tb.Helper()
	dir := filepath.Join(c.Config(i).DataDir, "groups", "1", "snapshots")
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		tb.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// damageSettledSnapshots damages the state file of every snapshot node i
// holds for group 1, once no snapshot is being taken and the log has not
// grown threshold entries past the newest (so raft takes no other one until
// more is written). It reports an error, to be polled again, while that is
// not so or when the snapshots changed under it.
func damageSettledSnapshots(tb testing.TB, c *nodetest.Cluster, i int, threshold uint64) error {
	tb.Helper()
	dir := filepath.Join(c.Config(i).DataDir, "groups", "1", "snapshots")
	list := func() ([]string, error) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".tmp") {
				return nil, fmt.Errorf("snapshot %s being taken", e.Name())
			}
			names = append(names, e.Name())
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("no snapshot yet")
		}
		return names, nil
	}
	names, err := list()
	if err != nil {
		return err
	}
	newest := uint64(0)
	for _, n := range names {
		var term, index, ms uint64
		if _, err := fmt.Sscanf(n, "%d-%d-%d", &term, &index, &ms); err != nil {
			return fmt.Errorf("snapshot name %q: %w", n, err)
		}
		newest = max(newest, index)
	}
	if last := groupState(c, i, 1).GetCommitIndex(); last >= newest+threshold {
		return fmt.Errorf("log at %d, newest snapshot at %d: another is due", last, newest)
	}
	for _, n := range names {
		f, err := os.OpenFile(filepath.Join(dir, n, "state.bin"), os.O_RDWR, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteAt([]byte{0xff, 0x00, 0xff}, 8)
		_ = f.Close()
		if err != nil {
			tb.Fatal(err)
		}
	}
	after, err := list()
	if err != nil {
		return err
	}
	if !slices.Equal(names, after) {
		return fmt.Errorf("snapshots changed while damaging them: %v, then %v", names, after)
	}
	return nil
}

// A data group replica whose snapshot is damaged, or gone while its log was
// compacted past it, does not start: its node runs on, its status shows the
// group as "damaged" with the file and the recovery, and the replica is
// retried with backoff (not ten times a second, and no panic). The group
// goes on answering on the other replicas, and deleting the replica's
// directory brings it back. The node's quorate_replica_damaged for the
// group is 0, then 1 while the replica is damaged, then 0 again.
func TestDamagedSnapshotStopsReplica(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 1, 3
		cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = 16, 20*time.Millisecond, 4
	}})
	applyPolicy(t, c, "integrity", 100000, 366*24*time.Hour, 100000)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const victim = 2
	sc := newSpendCheck(ctx, t, c, "integrity", 100000)
	admitSome := func(n int) {
		t.Helper()
		sc.admit("snap-key", n, 0, 1)
	}
	admitSome(60)
	c.Eventually(t, 30*time.Second, "a snapshot of group 1 on the victim", func() error {
		if len(snapshotDirs(t, c, victim)) == 0 {
			return fmt.Errorf("no snapshot yet")
		}
		if g := groupState(c, victim, 1); g == nil || g.GetLastAppliedIndex() < 40 {
			return fmt.Errorf("group 1 replica: %v", g)
		}
		return nil
	})
	wantDamagedGauge(t, c, victim, "0", 0)
	wantDamagedGauge(t, c, victim, "1", 0)

	for _, tc := range []struct {
		name   string
		damage func(tb testing.TB)
		want   string
	}{
		{"checksum", func(tb testing.TB) {
			for _, d := range snapshotDirs(tb, c, victim) {
				path := filepath.Join(d, "state.bin")
				b, err := os.ReadFile(path)
				if err != nil {
					tb.Fatal(err)
				}
				b[len(b)/2] ^= 0x10
				if err := os.WriteFile(path, b, 0o640); err != nil {
					tb.Fatal(err)
				}
			}
		}, "state.bin is damaged"},
		{"missing", func(tb testing.TB) {
			if err := os.RemoveAll(filepath.Join(c.Config(victim).DataDir, "groups", "1", "snapshots")); err != nil {
				tb.Fatal(err)
			}
		}, "a snapshot is missing or unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admitSome(20)
			c.Stop(victim)
			tc.damage(t)
			cfg := c.Config(victim)
			logs := &lineTimes{w: cfg.LogOutput, needle: []byte("data group replica not started")}
			cfg.LogOutput = logs
			c.Start(victim)
			defer func() { cfg.LogOutput = logs.w }()
			c.Eventually(t, 30*time.Second, "group 1 damaged on the victim", func() error {
				g := groupState(c, victim, 1)
				if g.GetRole() != "damaged" {
					return fmt.Errorf("group 1: %v", g)
				}
				if msg := g.GetStorageError(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, "to recover, delete "+
					filepath.Join(cfg.DataDir, "groups", "1")) || g.GetStorageErrorAt() == nil {
					return fmt.Errorf("storage error %q", msg)
				}
				return nil
			})
			wantDamagedGauge(t, c, victim, "1", 1)
			wantDamagedGauge(t, c, victim, "0", 0)
			wantDamagedGauge(t, c, 0, "1", 0)
			c.Eventually(t, 10*time.Second, "a second attempt to open the replica", func() error {
				if n := len(logs.seen()); n < 2 {
					return fmt.Errorf("%d attempts", n)
				}
				return nil
			})
			if at := logs.seen(); at[1].Sub(at[0]) < 900*time.Millisecond {
				t.Fatalf("the damaged replica was retried after %v", at[1].Sub(at[0]))
			}
			admitSome(10)

			c.Stop(victim)
			if err := os.RemoveAll(filepath.Join(cfg.DataDir, "groups", "1")); err != nil {
				t.Fatal(err)
			}
			c.Start(victim)
			c.Eventually(t, 30*time.Second, "group 1 replica back on the victim", func() error {
				g := groupState(c, victim, 1)
				if r := g.GetRole(); r != "follower" && r != "leader" || g.GetStorageError() != "" || g.GetLastAppliedIndex() < 40 {
					return fmt.Errorf("group 1: %v", g)
				}
				return nil
			})
			wantDamagedGauge(t, c, victim, "1", 0)
		})
	}
}

// flipInPlace flips one bit in every copy of needle in the file at path,
// writing only those bytes (the file may be open and mapped by a running
// node), and returns how many it changed.
func flipInPlace(tb testing.TB, path string, needle []byte) int {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	n := 0
	for i := 0; ; {
		j := bytes.Index(b[i:], needle)
		if j < 0 {
			break
		}
		at := i + j + len(needle) - 1
		if _, err := f.WriteAt([]byte{b[at] ^ 0x01}, int64(at)); err != nil {
			tb.Fatal(err)
		}
		i += j + len(needle)
		n++
	}
	return n
}

// A log entry damaged on the leader's disk while it runs, found when the
// leader reads it to catch a follower up: the leader's replica stops and
// shows as damaged, naming the file and the recovery, instead of sending
// changed data or panicking; another replica takes over, the follower
// catches up from it, and every answer stays right.
func TestDamagedEntryFoundWhileRunning(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 1, 3
	}})
	applyPolicy(t, c, "integrity", 100000, 366*24*time.Hour, 100000)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	admitSome := newSpendCheck(ctx, t, c, "integrity", 100000).admit
	admitSome("k", 1, 0)
	follower := (groupLeader(t, c, 1) + 1) % 3
	c.Stop(follower)
	const key = "integrity-entry-damaged-while-running"
	admitSome(key, 1, (follower+1)%3)
	// Push the entry out of the leader's cache of recent entries, so that
	// catching the follower up reads it from disk.
	admitSome("k", 1100, (follower+1)%3, (follower+2)%3)
	leader := groupLeader(t, c, 1)
	other := 3 - leader - follower
	path := ""
	for _, f := range sharedSegments(t, c.Config(leader).DataDir) {
		if flipInPlace(t, f, []byte(key)) > 0 {
			path = f
		}
	}
	if path == "" {
		t.Fatalf("no segment of the leader's shared log holds %q", key)
	}
	replica := filepath.Join(c.Config(leader).DataDir, "groups", "1")
	c.Start(follower)

	c.Eventually(t, 60*time.Second, "group 1 damaged on the old leader", func() error {
		g := groupState(c, leader, 1)
		if g.GetRole() != "damaged" || !strings.Contains(g.GetStorageError(), path+" is damaged: log entry") ||
			!strings.Contains(g.GetStorageError(), "to recover, delete "+replica) {
			return fmt.Errorf("group 1 on the old leader: %v", g)
		}
		return nil
	})
	c.Eventually(t, 60*time.Second, "the follower caught up from the other replica", func() error {
		g, want := groupState(c, follower, 1), groupState(c, other, 1)
		if want.GetRole() != "leader" && g.GetRole() != "leader" {
			return fmt.Errorf("no new leader: %v / %v", g, want)
		}
		if g.GetLastAppliedIndex() < want.GetCommitIndex() || want.GetCommitIndex() == 0 {
			return fmt.Errorf("follower applied %d of %d", g.GetLastAppliedIndex(), want.GetCommitIndex())
		}
		return nil
	})
	admitSome("k", 4, follower, other)
}

// A snapshot damaged on the leader's disk while it runs, found when the
// leader opens it to install it on a follower that fell behind its log:
// the leader's replica stops and shows as damaged instead of retrying the
// install forever; another replica takes over and installs its own.
func TestDamagedSnapshotFoundWhileRunning(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 1, 3
		cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = 64, 20*time.Millisecond, 4
	}})
	applyPolicy(t, c, "integrity", 100000, 366*24*time.Hour, 100000)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sc := newSpendCheck(ctx, t, c, "integrity", 100000)
	admitSome := func(n int, on ...int) {
		t.Helper()
		sc.admit("snap-key", n, on...)
	}
	admitSome(1, 0)
	follower := (groupLeader(t, c, 1) + 1) % 3
	c.Stop(follower)
	admitSome(200, (follower+1)%3, (follower+2)%3)
	leader := groupLeader(t, c, 1)
	other := 3 - leader - follower
	// Damage every snapshot the leader holds once it has stopped taking
	// them: a snapshot taken after the damage would be whole, and the
	// install would succeed.
	c.Eventually(t, 30*time.Second, "the leader's snapshots settled and damaged", func() error {
		return damageSettledSnapshots(t, c, leader, 64)
	})
	c.Start(follower)

	snaps := filepath.Join(c.Config(leader).DataDir, "groups", "1", "snapshots")
	c.Eventually(t, 60*time.Second, "group 1 damaged on the leader", func() error {
		g := groupState(c, leader, 1)
		if g.GetRole() != "damaged" || !strings.Contains(g.GetStorageError(), snaps) ||
			!strings.Contains(g.GetStorageError(), "state.bin is damaged") {
			return fmt.Errorf("group 1 on the leader: %v", g)
		}
		return nil
	})
	c.Eventually(t, 60*time.Second, "the follower caught up from the other replica", func() error {
		g, want := groupState(c, follower, 1), groupState(c, other, 1)
		if g.GetLastAppliedIndex() < want.GetCommitIndex() || want.GetCommitIndex() == 0 {
			return fmt.Errorf("follower applied %d of %d", g.GetLastAppliedIndex(), want.GetCommitIndex())
		}
		return nil
	})
	admitSome(4, follower, other)
}
