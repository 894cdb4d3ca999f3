package node_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
)

// sharedSegments are the segment files of the shared log of the node whose
// data directory is dataDir, in log order.
func sharedSegments(tb testing.TB, dataDir string) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(dataDir, "log", "*.seg"))
	if err != nil {
		tb.Fatal(err)
	}
	slices.Sort(files)
	return files
}

// writtenEnd is where the written bytes of a (zero-filled) segment end.
func writtenEnd(b []byte) int {
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	return end
}

// A node stopped by a crash in the middle of an append leaves the last
// segment of its shared log with a torn last record: the node starts with
// the records before it (the torn one zeroed), raft catches its replicas
// up, and every answer stays right.
func TestSharedLogTornTailCatchesUp(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicy(t, c, "integrity", 100000, 366*24*time.Hour, 100000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc := newSpendCheck(ctx, t, c, "integrity", 100000)
	sc.admit("torn", 30, 0, 1, 2)
	leader := c.Leader(t)
	victim := (leader + 1) % 3
	caughtUp(t, c, victim, leader)
	c.Stop(victim)

	segs := sharedSegments(t, c.Config(victim).DataDir)
	var tail string
	var b []byte
	for i := len(segs) - 1; i >= 0 && tail == ""; i-- {
		data, err := os.ReadFile(segs[i])
		if err != nil {
			t.Fatal(err)
		}
		if writtenEnd(data) > 0 {
			tail, b = segs[i], data
		}
	}
	if tail == "" {
		t.Fatalf("no written segment in %v", segs)
	}
	end := writtenEnd(b)
	for i := end - 40; i < end; i++ {
		b[i] = 0xff // the last record's end, half written
	}
	if err := os.WriteFile(tail, b, 0o640); err != nil {
		t.Fatal(err)
	}
	t.Logf("tore the last 40 of %d written bytes of %s", end, tail)
	sc.admit("torn", 10, leader)
	c.Start(victim)
	caughtUp(t, c, victim, c.Leader(t))
	sc.admit("torn", 5, victim)
}

// A shared log with a record damaged in the middle (records written after
// it intact) stops its node from starting: every replica's log is in it.
// The error names the segment file and says how to recover; the other two
// nodes go on answering, and the recovery brings the node back.
func TestSharedLogDamageStopsTheNode(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicy(t, c, "integrity", 100000, 366*24*time.Hour, 100000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc := newSpendCheck(ctx, t, c, "integrity", 100000)
	const key = "integrity-shared-log-damaged"
	sc.admit(key, 1, 0)
	sc.admit("k", 20, 0, 1, 2) // records after the damaged one
	leader := c.Leader(t)
	victim := (leader + 1) % 3
	caughtUp(t, c, victim, leader)
	c.Stop(victim)

	cfg := *c.Config(victim)
	damaged := ""
	for _, f := range sharedSegments(t, cfg.DataDir) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(key)) {
			if damageEvery(t, f, []byte(key)) == 0 {
				t.Fatalf("%s holds no copy of %q", f, key)
			}
			damaged = f
		}
	}
	if damaged == "" {
		t.Fatalf("no segment of %s holds %q", cfg.DataDir, key)
	}
	n, err := node.New(cfg)
	if err == nil {
		n.Close()
		t.Fatal("the node started on a damaged shared log")
	}
	for _, want := range []string{damaged, "damaged", "to recover: delete " + filepath.Join(cfg.DataDir, "log"), "--join"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	t.Logf("refused: %v", err)
	sc.admit("k", 5, leader) // the others go on

	// The recovery the error gives: the node rejoins with empty replicas.
	for _, d := range []string{"log", "raft", "groups"} {
		if err := os.RemoveAll(filepath.Join(cfg.DataDir, d)); err != nil {
			t.Fatal(err)
		}
	}
	vc := c.Config(victim)
	vc.Bootstrap, vc.Join = false, c.Config(leader).APIAddr
	c.Start(victim)
	c.WaitReady(t)
	caughtUp(t, c, victim, c.Leader(t))
	sc.admit("k", 5, victim)
}

// The shared log stays bounded: after snapshots, compaction (keeping
// TrailingLogs entries) leaves whole segments without a live entry, and
// they are deleted, so however much is written the log's directory falls
// back under a few segments' size.
func TestSharedLogBounded(t *testing.T) {
	const segment = 64 << 10
	var dataDir string
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Configure: func(i int, cfg *node.Config) {
		cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = 64, 20*time.Millisecond, 16
		node.SetSharedSegmentBytes(cfg, segment)
		dataDir = cfg.DataDir
	}})
	bounded := func() ([]string, error) {
		segs, n := sharedSegments(t, dataDir), dirBytes(t, filepath.Join(dataDir, "log"))
		if len(segs) > 4 || n > 6*segment {
			return segs, fmt.Errorf("%d segments, %d bytes in log/", len(segs), n)
		}
		return segs, nil
	}
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
