package replica

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/nodelog"
	"github.com/quorate/quorate/shard"
)

// testCheckedLog opens a shared log in a temporary directory and returns a
// replica of group 7 with its checked view of it, and the log.
func testCheckedLog(tb testing.TB) (*Replica, *checkedLog, *nodelog.Log) {
	tb.Helper()
	data := tb.TempDir()
	g := &Replica{ID: shard.GroupID(7), Dir: GroupDir(data, 7)}
	if err := os.MkdirAll(g.Dir, 0o750); err != nil {
		tb.Fatal(err)
	}
	dir := filepath.Join(data, sharedLogDirName)
	l, err := nodelog.Open(dir, nodelog.Options{SegmentBytes: 1 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	view, err := l.Group(7)
	if err != nil {
		tb.Fatal(err)
	}
	return g, &checkedLog{store: view, file: dir, health: &g.Health, damaged: g.damaged}, l
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

// A byte changed on disk inside an entry, found while the replica runs:
// GetLog returns a DamagedError naming the segment file and the recovery,
// records it as the replica's storage error and asks for the replica to
// stop.
func TestCheckedLogFindsDamageWhileRunning(t *testing.T) {
	g, cl, _ := testCheckedLog(t)
	if err := cl.StoreLogs(testEntries(1, 20, 64)); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(cl.file, "*.seg"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	seg := segs[0]
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, []byte("entry-00000012-"))
	if at < 0 {
		t.Fatal("entry 12 not found in the segment")
	}
	f, err := os.OpenFile(seg, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{b[at+20] ^ 0x40}, int64(at+20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var stopped error
	stop := func(err error) { stopped = err }
	g.Health.onDamage.Store(&stop)

	var l raft.Log
	if err := cl.GetLog(11, &l); err != nil || !bytes.Equal(l.Data, testEntries(11, 11, 64)[0].Data) {
		t.Fatalf("GetLog(11): %+v, %v", l, err)
	}
	err = cl.GetLog(12, &l)
	var de *DamagedError
	if !errors.As(err, &de) || de.File != seg || !strings.Contains(err.Error(), "log entry 12, at offset") ||
		!strings.Contains(err.Error(), "to recover, delete "+g.Dir) {
		t.Fatalf("GetLog(12): %v", err)
	}
	if stopped != err {
		t.Fatalf("onDamage got %v", stopped)
	}
	if last, _ := g.Health.Last(); last != err {
		t.Fatalf("storage error %v", last)
	}
}

// A log that starts after entry 1 (compaction deleted its head, or a
// follower installed a snapshot and appended after its index) must follow
// on from the newest snapshot: the replica opens when a snapshot covers the
// entries before the log, and is damaged when none does.
func TestCheckedLogGapCoveredBySnapshot(t *testing.T) {
	g, cl, _ := testCheckedLog(t)
	if err := cl.StoreLogs(testEntries(11, 14, 40)); err != nil {
		t.Fatal(err)
	}
	first, _ := cl.FirstIndex()
	last, _ := cl.LastIndex()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(g.Dir, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.checkSnapshots(snaps, first, last); !errors.Is(err, ErrDamaged) ||
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
		if err := g.checkSnapshots(snaps, first, last); errors.Is(err, ErrDamaged) != tc.damaged {
			t.Fatalf("snapshot up to %d under a log from 11: %v, want damaged=%v", tc.index, err, tc.damaged)
		}
	}
}
