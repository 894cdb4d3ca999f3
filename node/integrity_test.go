package node_test

import (
	"bytes"
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

// A stable store (every replica's term and vote, <data-dir>/stable.db)
// cut short or with a page overwritten makes bbolt panic, or fault, on its
// first reads, with a message that names no file: the node refuses to
// start with an error naming the file and the recovery instead.
func TestDamagedStableStoreIsRefusedAtStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(tb testing.TB, b []byte) []byte
	}{
		{"truncated", func(tb testing.TB, b []byte) []byte { return b[:len(b)/2] }},
		{"page overwritten", func(tb testing.TB, b []byte) []byte {
			at := bytes.Index(b, []byte("CurrentTerm"))
			if at < 0 {
				tb.Fatal("no term in the stable store")
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
			c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1})
			applyPolicy(t, c, "integrity", 100000, 366*24*time.Hour, 100000)
			c.Stop(0)
			cfg := *c.Config(0)
			path := filepath.Join(cfg.DataDir, "stable.db")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(t, b), 0o600); err != nil {
				t.Fatal(err)
			}
			n, err := node.New(cfg)
			if err == nil {
				_ = n.Close()
				t.Fatal("the node started on a damaged stable store")
			}
			for _, want := range []string{path, "damaged", "to recover: delete " + filepath.Join(cfg.DataDir, "log"), "--join"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q: %v", want, err)
				}
			}
			t.Logf("refused: %v", err)
		})
	}
}
