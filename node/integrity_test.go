package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
)

// damageEvery flips one bit in every copy of needle in the file at path and
// returns how many it changed.
func damageEvery(tb testing.TB, path string, needle []byte) int {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for i := 0; ; {
		j := bytes.Index(b[i:], needle)
		if j < 0 {
			break
		}
		b[i+j+len(needle)-1] ^= 0x01
		i += j + len(needle)
		n++
	}
	if err := os.WriteFile(path, b, 0o640); err != nil {
		tb.Fatal(err)
	}
	return n
}

// boltStore has a test's nodes create their replicas with the bolt log
// store (raft.db), as every node did before the WAL.
func boltStore(_ int, cfg *node.Config) { cfg.LogStore = node.LogStoreBolt }

// caughtUp waits until running node i has applied what node from has
// committed.
func caughtUp(tb testing.TB, c *nodetest.Cluster, i, from int) {
	tb.Helper()
	want := c.Node(from).Status().GetCommitIndex()
	c.Eventually(tb, 30*time.Second, fmt.Sprintf("node %d applying up to %d", i, want), func() error {
		if got := c.Node(i).Status().GetLastAppliedIndex(); got < want {
			return fmt.Errorf("applied %d", got)
		}
		return nil
	})
}

// mustNotStart starts node i's config and expects a *node.DamagedError
// naming file.
func mustNotStart(tb testing.TB, c *nodetest.Cluster, i int, file string) *node.DamagedError {
	tb.Helper()
	n, err := node.New(*c.Config(i))
	if err == nil {
		_ = n.Close()
		tb.Fatalf("node %d started from damaged files", i)
	}
	var de *node.DamagedError
	if !errors.As(err, &de) || !errors.Is(err, node.ErrReplicaDamaged) {
		tb.Fatalf("starting node %d: %v, want a DamagedError", i, err)
	}
	if !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "to recover") {
		tb.Fatalf("starting node %d: %q does not name %s and the recovery", i, err, file)
	}
	tb.Logf("node %d refused to start: %v", i, err)
	return de
}

// A bit flipped inside a stored log entry's data is found when the replica
// opens: the node refuses to start, naming the file and the recovery,
// instead of replaying the changed entry. The others go on answering with
// the right state, and the documented recovery (delete the replica's
// directory, start again with --join) brings the node back.
func TestDamagedLogEntryIsRefusedAtStart(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: boltStore})
	applyPolicy(t, c, "integrity", 100000, 366*24*time.Hour, 100000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const key = "integrity-key-spent-1235"
	if _, err := admit(ctx, c, 0, "integrity", key, 1235); err != nil {
		t.Fatal(err)
	}
	leader := c.Leader(t)
	victim := (leader + 1) % 3
	caughtUp(t, c, victim, leader)
	c.Stop(victim)

	path := filepath.Join(c.Config(victim).DataDir, "raft", "raft.db")
	if n := damageEvery(t, path, []byte(key)); n == 0 {
		t.Fatalf("%s holds no copy of %q", path, key)
	}
	if de := mustNotStart(t, c, victim, path); de.File != path {
		t.Fatalf("damaged file %q, want %q", de.File, path)
	}

	spent := int64(1235)
	for _, i := range []int{leader, 3 - leader - victim} {
		resp, err := admit(ctx, c, i, "integrity", key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if spent++; resp.GetRemaining() != 100000-spent {
			t.Fatalf("node %d: remaining %d, want %d", i, resp.GetRemaining(), 100000-spent)
		}
	}

	if err := os.RemoveAll(filepath.Join(c.Config(victim).DataDir, "raft")); err != nil {
		t.Fatal(err)
	}
	cfg := c.Config(victim)
	cfg.Bootstrap, cfg.Join = false, c.Config(leader).APIAddr
	c.Start(victim)
	c.WaitReady(t)
	caughtUp(t, c, victim, c.Leader(t))
}

// A bolt file cut short or with a page overwritten makes bbolt panic, or
// fault, on its first reads, with a message that names no file: the node
// refuses to start with an error naming the file and the recovery instead.
func TestDamagedBoltFileIsRefusedAtStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(tb testing.TB, b []byte, key string) []byte
	}{
		{"truncated", func(tb testing.TB, b []byte, _ string) []byte { return b[:len(b)/2] }},
		{"page overwritten", func(tb testing.TB, b []byte, key string) []byte {
			at := bytes.Index(b, []byte(key))
			if at < 0 {
				tb.Fatalf("no copy of %q", key)
			}
			const page = 4096
			start := at / page * page
			for i := start; i < start+page; i++ {
				b[i] = 0xa5
			}
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Configure: boltStore})
			applyPolicy(t, c, "integrity", 100000, 366*24*time.Hour, 100000)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			key := strings.Repeat("integrity-bolt-key-", 8)
			for i := range 200 {
				if _, err := admit(ctx, c, 0, "integrity", fmt.Sprintf("%s%d", key, i), 1); err != nil {
					t.Fatal(err)
				}
			}
			c.Stop(0)
			path := filepath.Join(c.Config(0).DataDir, "raft", "raft.db")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(t, b, key+"150"), 0o640); err != nil {
				t.Fatal(err)
			}
			mustNotStart(t, c, 0, path)
		})
	}
}
