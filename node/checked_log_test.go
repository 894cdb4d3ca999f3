package node

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/shard"
)

// testCheckedLog opens a group replica's bolt file in a temporary directory
// (or dir) behind a checkedLog.
func testCheckedLog(tb testing.TB, dir string) (*group, *checkedLog) {
	tb.Helper()
	if dir == "" {
		dir = filepath.Join(tb.TempDir(), "groups", "7")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			tb.Fatal(err)
		}
	}
	g := &group{id: shard.GroupID(7), dir: dir}
	store, err := g.openStore(dir)
	if err != nil {
		tb.Fatal(err)
	}
	g.store = store
	tb.Cleanup(func() { _ = store.Close() })
	return g, &checkedLog{store: store, file: g.boltPath(), health: &g.health,
		damaged: func(_ uint64, detail string) *DamagedError { return g.damaged(g.boltPath(), detail) }}
}

func testEntries(from, to uint64, size int) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		data := fmt.Appendf(nil, "entry-%08d-", i)
		data = append(data, bytes.Repeat([]byte{'x'}, max(0, size-len(data)))...)
		out = append(out, &raft.Log{Index: i, Term: 3, Type: raft.LogCommand, Data: data})
	}
	return out
}

// Entries written without a checksum (before Quorate wrote one) are read as
// they are; entries written by checkedLog come back as raft gave them, and
// raft's own copies keep their Extensions.
func TestCheckedLogReadsOldAndNewEntries(t *testing.T) {
	g, cl := testCheckedLog(t, "")
	if err := g.store.StoreLogs(testEntries(1, 3, 40)); err != nil {
		t.Fatal(err)
	}
	fresh := testEntries(4, 6, 40)
	fresh[1].Extensions = []byte("ext")
	if err := cl.StoreLogs(fresh); err != nil {
		t.Fatal(err)
	}
	if string(fresh[1].Extensions) != "ext" || fresh[0].Extensions != nil {
		t.Fatalf("StoreLogs changed raft's entries: %q %q", fresh[0].Extensions, fresh[1].Extensions)
	}
	_ = g.store.Close()
	if first, last, err := g.checkBolt(); err != nil || first != 1 || last != 6 {
		t.Fatalf("checkBolt: %d..%d, %v", first, last, err)
	}
	_, cl = testCheckedLog(t, g.dir)
	for i := uint64(1); i <= 6; i++ {
		var l raft.Log
		if err := cl.GetLog(i, &l); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		want := testEntries(i, i, 40)[0]
		if i == 5 {
			want.Extensions = []byte("ext")
		}
		if l.Index != i || !bytes.Equal(l.Data, want.Data) || !bytes.Equal(l.Extensions, want.Extensions) {
			t.Fatalf("GetLog(%d) = %+v, want %+v", i, l, want)
		}
	}
}

// A byte changed on disk inside an entry, found while the replica runs:
// GetLog returns a DamagedError naming the file and the recovery, records
// it as the replica's storage error and asks for the replica to stop.
func TestCheckedLogFindsDamageWhileRunning(t *testing.T) {
	g, cl := testCheckedLog(t, "")
	if err := cl.StoreLogs(testEntries(1, 20, 64)); err != nil {
		t.Fatal(err)
	}
	_ = g.store.Close()
	b, err := os.ReadFile(g.boltPath())
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, []byte("entry-00000012-"))
	if at < 0 {
		t.Fatal("entry 12 not found in the file")
	}
	b[at+20] ^= 0x40
	if err := os.WriteFile(g.boltPath(), b, 0o640); err != nil {
		t.Fatal(err)
	}
	g, cl = testCheckedLog(t, g.dir)
	var stopped error
	stop := func(err error) { stopped = err }
	g.health.onDamage.Store(&stop)

	var l raft.Log
	if err := cl.GetLog(11, &l); err != nil {
		t.Fatalf("GetLog(11): %v", err)
	}
	err = cl.GetLog(12, &l)
	var de *DamagedError
	if !errors.As(err, &de) || de.File != g.boltPath() || !strings.Contains(err.Error(), "log entry 12 fails its checksum") ||
		!strings.Contains(err.Error(), "to recover, delete "+g.dir) {
		t.Fatalf("GetLog(12): %v", err)
	}
	if stopped != err {
		t.Fatalf("onDamage got %v", stopped)
	}
	if last, _ := g.health.last(); last != err {
		t.Fatalf("storage error %v", last)
	}
	_ = g.store.Close()
	if _, _, err := g.checkBolt(); !errors.Is(err, ErrReplicaDamaged) || !strings.Contains(err.Error(), "log entry 12 fails its checksum") {
		t.Fatalf("checkBolt: %v", err)
	}
}

// BenchmarkCheckBolt measures the check of a replica's bolt file when it
// opens (its pages, then its log entries) on a log of 100,000 entries of
// 200 bytes.
func BenchmarkCheckBolt(b *testing.B) {
	g, cl := testCheckedLog(b, "")
	for from := uint64(1); from <= 100_000; from += 1000 {
		if err := cl.StoreLogs(testEntries(from, from+999, 200)); err != nil {
			b.Fatal(err)
		}
	}
	_ = g.store.Close()
	for b.Loop() {
		if _, last, err := g.checkBolt(); err != nil || last != 100_000 {
			b.Fatal(last, err)
		}
	}
}

// A replica without a bolt file, or with an empty one (its process stopped
// right after creating it), is new, not damaged: bbolt initializes it.
func TestCheckBoltAcceptsNewFiles(t *testing.T) {
	g := &group{id: 3, dir: t.TempDir()}
	if first, last, err := g.checkBolt(); err != nil || first != 0 || last != 0 {
		t.Fatalf("no file: %d..%d, %v", first, last, err)
	}
	if err := os.WriteFile(g.boltPath(), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.checkBolt(); err != nil {
		t.Fatalf("empty file: %v", err)
	}
	store, err := g.openStore(g.dir)
	if err != nil {
		t.Fatal(err)
	}
	_ = store.Close()
	if _, _, err := g.checkBolt(); err != nil {
		t.Fatalf("initialized file: %v", err)
	}
}

// A follower that installed a snapshot keeps the entries compaction left
// below it and appends after the snapshot's index, so its log has a gap the
// snapshot covers: the replica opens. A gap above the newest snapshot is
// damage.
func TestCheckedLogGapCoveredBySnapshot(t *testing.T) {
	g, cl := testCheckedLog(t, "")
	if err := cl.StoreLogs(append(testEntries(5, 8, 40), testEntries(11, 14, 40)...)); err != nil {
		t.Fatal(err)
	}
	_ = g.store.Close()
	first, last, err := g.checkBolt()
	if err != nil || first != 11 || last != 14 {
		t.Fatalf("checkBolt: run %d..%d, %v; want 11..14", first, last, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(g.dir, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.checkSnapshots(snaps, first, last); !errors.Is(err, ErrReplicaDamaged) ||
		!strings.Contains(err.Error(), "a snapshot is missing or unreadable") {
		t.Fatalf("no snapshot under a log from 11: %v, want damaged", err)
	}
	for _, tc := range []struct {
		index   uint64
		damaged bool
	}{{9, true}, {10, false}, {12, false}} {
		sink, err := snaps.Create(raft.SnapshotVersionMax, tc.index, 3, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write([]byte("state")); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		if err := g.checkSnapshots(snaps, first, last); errors.Is(err, ErrReplicaDamaged) != tc.damaged {
			t.Fatalf("snapshot up to %d under a log from 11: %v, want damaged=%v", tc.index, err, tc.damaged)
		}
	}
}
