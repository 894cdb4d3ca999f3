//go:build linux

package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
)

// tinyDisk mounts a tmpfs of size bytes at a new directory and returns it;
// it is unmounted when the test ends. The test is skipped when that cannot
// be done (not root, no mount permission); the file builds on Linux alone,
// the one system with tmpfs and syscall.Mount.
func tinyDisk(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a full disk is simulated with a tmpfs mount, which needs root")
	}
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("a full disk is simulated with a tmpfs mount: mounting one failed: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file in dir until the disk is full.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{1}, 16<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// A follower whose disk fills up records the failed writes; its status
// (and so `quorate admin status`) shows the last one, naming the file and
// the cause, while the other nodes go on deciding without losing anything;
// once space is freed and the node restarted, it catches up.
func TestFullDiskShowsInStatus(t *testing.T) {
	const victim = 2
	disk := tinyDisk(t, 4<<20)
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		if i == victim {
			// The shared log preallocates its segment files: small ones
			// have the full disk fail it when it starts the next.
			cfg.DataDir = filepath.Join(disk, "data")
			node.SetSharedSegmentBytes(cfg, 256<<10)
		}
	}})
	applyPolicy(t, c, "integrity", 100_000, 366*24*time.Hour, 100_000)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	fill(t, disk)

	spent := int64(0)
	key := strings.Repeat("full-disk-", 20)
	c.Eventually(t, 60*time.Second, "a storage error in the victim's status", func() error {
		for range 20 {
			resp, err := admit(ctx, c, int(spent%2), "integrity", key, 1)
			if err != nil {
				t.Fatal(err)
			}
			if spent++; resp.GetRemaining() != 100_000-spent {
				t.Fatalf("remaining %d, want %d", resp.GetRemaining(), 100_000-spent)
			}
		}
		g := c.Node(victim).Status().GetGroups()[0]
		if msg := g.GetStorageError(); !strings.Contains(msg, "no space left on device") ||
			!strings.Contains(msg, filepath.Join(disk, "data", "log")) || g.GetStorageErrorAt() == nil {
			return fmt.Errorf("storage error %q after %d admits", msg, spent)
		}
		return nil
	})
	t.Logf("after %d admits: %s", spent, c.Node(victim).Status().GetGroups()[0].GetStorageError())
	for i := range 2 {
		resp, err := admit(ctx, c, i, "integrity", key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if spent++; resp.GetRemaining() != 100_000-spent {
			t.Fatalf("node %d: remaining %d, want %d", i, resp.GetRemaining(), 100_000-spent)
		}
	}

	// The shared log refuses every write after one failed (its index may
	// be ahead of the disk), and its close reports that failure: once
	// space is freed, the node is stopped at once and started again.
	if err := os.Remove(filepath.Join(disk, "filler")); err != nil {
		t.Fatal(err)
	}
	c.Kill(victim)
	c.Start(victim)
	caughtUp(t, c, victim, c.Leader(t))
}
