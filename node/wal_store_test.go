package node

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/shard"
)

// testWAL opens a group replica's WAL in dir (a new temporary one when "")
// behind a checkedLog, as openGroup does.
func testWAL(tb testing.TB, dir string, segmentBytes int) (*group, *checkedLog, error) {
	tb.Helper()
	if dir == "" {
		dir = filepath.Join(tb.TempDir(), "groups", "7")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			tb.Fatal(err)
		}
	}
	g := &group{id: shard.GroupID(7), dir: dir}
	w, _, _, err := g.openWAL(dir, segmentBytes, hclog.NewNullLogger())
	if err != nil {
		return g, nil, err
	}
	g.store = w
	tb.Cleanup(func() { _ = w.Close() })
	return g, &checkedLog{store: w, file: g.walDir(), health: &g.health,
		damaged: func(i uint64, detail string) *DamagedError { return g.damaged(g.segmentOf(i), detail) }}, nil
}

func mustWAL(tb testing.TB, dir string, segmentBytes int) (*group, *checkedLog) {
	tb.Helper()
	g, cl, err := testWAL(tb, dir, segmentBytes)
	if err != nil {
		tb.Fatal(err)
	}
	return g, cl
}

// storeEach stores entries from..to one append (one batch, one fsync) each.
func storeEach(tb testing.TB, cl *checkedLog, from, to uint64, size int) {
	tb.Helper()
	for i := from; i <= to; i++ {
		if err := cl.StoreLogs(testEntries(i, i, size)); err != nil {
			tb.Fatal(err)
		}
	}
}

// wantEntries checks that cl holds exactly entries first..last, as written.
func wantEntries(tb testing.TB, cl *checkedLog, first, last uint64, size int) {
	tb.Helper()
	if f, _ := cl.FirstIndex(); f != first {
		tb.Fatalf("first index %d, want %d", f, first)
	}
	if l, _ := cl.LastIndex(); l != last {
		tb.Fatalf("last index %d, want %d", l, last)
	}
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := cl.GetLog(i, &l); err != nil {
			tb.Fatalf("GetLog(%d): %v", i, err)
		}
		if want := testEntries(i, i, size)[0]; !bytes.Equal(l.Data, want.Data) {
			tb.Fatalf("GetLog(%d) = %q, want %q", i, l.Data, want.Data)
		}
	}
}

// onlySegment is the replica's one segment file.
func onlySegment(tb testing.TB, g *group) string {
	tb.Helper()
	files, err := g.segmentFiles()
	if err != nil || len(files) != 1 {
		tb.Fatalf("segment files %v, %v; want one", files, err)
	}
	return files[0]
}

// A crash in the middle of an append leaves the last segment cut inside
// its last record, or that record half written: the replica opens with the
// entries before it (the cut one was never acknowledged), appends after
// them, and opens again with everything.
func TestWALTornTailOpens(t *testing.T) {
	for _, tc := range []struct {
		name string
		tear func(b []byte, at int) []byte
	}{
		{"cut", func(b []byte, at int) []byte { return b[:at] }},
		{"zeroed", func(b []byte, at int) []byte { clear(b[at:]); return b }},
		{"garbled", func(b []byte, at int) []byte {
			for i := at; i < at+20; i++ {
				b[i] ^= 0x5a
			}
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, cl := mustWAL(t, "", 0)
			storeEach(t, cl, 1, 10, 100)
			_ = g.store.Close()
			path := onlySegment(t, g)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			at := bytes.Index(b, []byte("entry-00000010-"))
			if at < 0 {
				t.Fatal("entry 10 not found")
			}
			if err := os.WriteFile(path, tc.tear(b, at+30), 0o640); err != nil {
				t.Fatal(err)
			}
			g, cl = mustWAL(t, g.dir, 0)
			wantEntries(t, cl, 1, 9, 100)
			storeEach(t, cl, 10, 12, 100)
			_ = g.store.Close()
			_, cl = mustWAL(t, g.dir, 0)
			wantEntries(t, cl, 1, 12, 100)
		})
	}
}

// Bytes changed in the middle of a segment, with whole entries written
// after them, are damage, not a torn append: the WAL would cut the log
// there and drop acknowledged entries. The replica does not open; the
// error names the segment file and the recovery.
func TestWALDamagedSegmentIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		damage     func(b []byte, at int)
	}{
		{"entry data", "fail their checksum", func(b []byte, at int) { b[at+8+4+20] ^= 0x40 }},
		{"frame type", "is unreadable", func(b []byte, at int) { b[at] = 0x7f }},
		{"frame length", "", func(b []byte, at int) { b[at+4] ^= 0x10 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, cl := mustWAL(t, "", 0)
			storeEach(t, cl, 1, 20, 64)
			_ = g.store.Close()
			path := onlySegment(t, g)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			at := bytes.Index(b, []byte("entry-00000012-"))
			if at < 0 {
				t.Fatal("entry 12 not found")
			}
			// The entry's frame: an 8-byte header, then its index, term,
			// type and data length (a byte each here), then its data.
			tc.damage(b, at-8-4)
			if err := os.WriteFile(path, b, 0o640); err != nil {
				t.Fatal(err)
			}
			_, _, err = testWAL(t, g.dir, 0)
			var de *DamagedError
			if !errors.As(err, &de) || de.File != path || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "damaged in the middle") || !strings.Contains(err.Error(), "to recover, delete "+g.dir) {
				t.Fatalf("opening: %v", err)
			}
		})
	}
}

// An entry changed on disk while the replica runs is found when it is
// read: GetLog returns a DamagedError naming the segment file that holds
// it (of several) and the recovery, and asks for the replica to stop.
func TestWALFindsDamageWhileRunning(t *testing.T) {
	g, cl := mustWAL(t, "", 64<<10)
	storeEach(t, cl, 1, 600, 200)
	files, err := g.segmentFiles()
	if err != nil || len(files) < 2 {
		t.Fatalf("segment files %v, %v; want several", files, err)
	}
	path := g.segmentOf(300)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, []byte("entry-00000300-"))
	if at < 0 {
		t.Fatalf("entry 300 not in %s", path)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt([]byte{b[at+20] ^ 0x40}, int64(at+20))
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var stopped error
	stop := func(err error) { stopped = err }
	g.health.onDamage.Store(&stop)
	var l raft.Log
	if err := cl.GetLog(299, &l); err != nil {
		t.Fatalf("GetLog(299): %v", err)
	}
	err = cl.GetLog(300, &l)
	var de *DamagedError
	if !errors.As(err, &de) || de.File != path || !strings.Contains(err.Error(), "log entry 300 fails its checksum") ||
		!strings.Contains(err.Error(), "to recover, delete "+g.dir) || stopped != err {
		t.Fatalf("GetLog(300): %v (stopped with %v)", err, stopped)
	}
	_ = g.store.Close()
	if _, _, err := testWAL(t, g.dir, 64<<10); !errors.As(err, &de) || de.File != path {
		t.Fatalf("reopening: %v", err)
	}
}

// Raft drops a follower's entries that conflict with a new leader's
// (DeleteRange of the log's tail) and appends the leader's: after a
// restart every entry reads back, including those of the segment the
// truncation sealed (without walFiler, reading them fails with "sealed
// segment has no index block").
func TestWALTailTruncationSurvivesRestart(t *testing.T) {
	g, cl := mustWAL(t, "", 0)
	storeEach(t, cl, 1, 10, 50)
	if err := cl.DeleteRange(8, 10); err != nil {
		t.Fatal(err)
	}
	storeEach(t, cl, 8, 12, 50)
	wantEntries(t, cl, 1, 12, 50)
	_ = g.store.Close()
	_, cl = mustWAL(t, g.dir, 0)
	wantEntries(t, cl, 1, 12, 50)
}

// A WAL whose log ends below the newest snapshot (a crash between raft
// installing the snapshot and deleting the log before it) is emptied when
// the replica opens, so that raft's next append, after the snapshot, is
// not refused for a gap; one that reaches the snapshot is kept.
func TestWALLogBehindSnapshotIsDropped(t *testing.T) {
	g, cl := mustWAL(t, "", 0)
	storeEach(t, cl, 1, 5, 50)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(g.dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	for _, snap := range []uint64{5, 9} {
		sink, err := snaps.Create(raft.SnapshotVersionMax, snap, 3, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write([]byte("state")); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		if err := g.dropLogBehindSnapshot(snaps, 1, 5); err != nil {
			t.Fatal(err)
		}
		if last, _ := cl.LastIndex(); snap == 5 && last != 5 || snap == 9 && last != 0 {
			t.Fatalf("snapshot at %d over a log of 1..5: last index now %d", snap, last)
		}
	}
	storeEach(t, cl, 10, 12, 50)
	_ = g.store.Close()
	_, cl = mustWAL(t, g.dir, 0)
	wantEntries(t, cl, 10, 12, 50)
}

// A directory holding raft.db stays a bolt replica whatever --log-store
// says, one holding a WAL stays a WAL, one marked as in the shared log
// stays there, and a new one takes --log-store.
func TestReplicaKeepsItsStore(t *testing.T) {
	g := &group{id: 3, dir: t.TempDir()}
	for choice, want := range map[string]storeKind{LogStoreBolt: storeBolt, LogStoreWAL: storeWAL, "": storeWAL, LogStoreShared: storeShared} {
		if got := g.storeKind(choice); got != want {
			t.Fatalf("a new replica with --log-store %q: store %d, want %d", choice, got, want)
		}
	}
	if err := os.WriteFile(g.boltPath(), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if g.storeKind(LogStoreWAL) != storeBolt || g.storeKind(LogStoreShared) != storeBolt {
		t.Fatal("a replica with raft.db opened as another store")
	}
	g = &group{id: 3, dir: t.TempDir()}
	if err := os.Mkdir(g.walDir(), 0o750); err != nil {
		t.Fatal(err)
	}
	if g.storeKind(LogStoreBolt) != storeWAL || g.storeKind(LogStoreShared) != storeWAL {
		t.Fatal("a replica with a WAL opened as another store")
	}
	g = &group{id: 3, dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(g.dir, sharedMarkerName), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if g.storeKind(LogStoreBolt) != storeShared || g.storeKind(LogStoreWAL) != storeShared {
		t.Fatal("a replica of the shared log opened as another store")
	}
}

// BenchmarkCheckWAL measures the open of a replica's WAL with its checks
// (every segment's frames and batches, then every entry) on a log of
// 100,000 entries of 200 bytes, as BenchmarkCheckBolt does for bolt.
func BenchmarkCheckWAL(b *testing.B) {
	g, cl := mustWAL(b, "", 0)
	for from := uint64(1); from <= 100_000; from += 1000 {
		if err := cl.StoreLogs(testEntries(from, from+999, 200)); err != nil {
			b.Fatal(err)
		}
	}
	_ = g.store.Close()
	for b.Loop() {
		w, _, last, err := g.openWAL(g.dir, 0, hclog.NewNullLogger())
		if err != nil || last != 100_000 {
			b.Fatal(last, err)
		}
		_ = w.Close()
	}
}
