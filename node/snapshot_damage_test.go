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

// A data group replica whose snapshot is damaged, or gone while its log was
// compacted past it, does not start: its node runs on, its status shows the
// group as "damaged" with the file and the recovery, and the replica is
// retried with backoff (not ten times a second, and no panic). The group
// goes on answering on the other replicas, and deleting the replica's
// directory brings it back.
func TestDamagedSnapshotStopsReplica(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 1, 3
		cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = 16, 20*time.Millisecond, 4
	}})
	applyPolicy(t, c, "integrity", 100000, 366*24*time.Hour, 100000)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const victim = 2
	spent := int64(0)
	admitSome := func(n int) {
		t.Helper()
		for k := range n {
			resp, err := admit(ctx, c, k%2, "integrity", "snap-key", 1)
			if err != nil {
				t.Fatal(err)
			}
			if spent++; resp.GetRemaining() != 100000-spent {
				t.Fatalf("remaining %d, want %d", resp.GetRemaining(), 100000-spent)
			}
		}
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
		})
	}
}
