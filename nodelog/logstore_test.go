package nodelog

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func openT(t *testing.T, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func groupT(t *testing.T, l *Log, id uint32) raft.LogStore {
	t.Helper()
	g, err := l.Group(id)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// entry is log i of group g, every field set and telling of both.
func entry(g uint32, i uint64) *raft.Log {
	l := &raft.Log{
		Index:      i,
		Term:       i/10 + 1,
		Type:       raft.LogType(i % 6),
		Data:       fmt.Appendf(nil, "group %d entry %d %s", g, i, bytes.Repeat([]byte{'x'}, int(i%50))),
		AppendedAt: time.Unix(1700000000, int64(i)*1000+int64(g)),
	}
	if i%3 == 0 {
		l.Extensions = fmt.Appendf(nil, "ext-%d-%d", g, i)
	}
	return l
}

func checkEntry(t *testing.T, s raft.LogStore, g uint32, i uint64) {
	t.Helper()
	var got raft.Log
	if err := s.GetLog(i, &got); err != nil {
		t.Fatalf("group %d GetLog(%d): %v", g, i, err)
	}
	want := entry(g, i)
	if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
		!bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) ||
		!got.AppendedAt.Equal(want.AppendedAt) {
		t.Fatalf("group %d entry %d: got %+v, want %+v", g, i, got, *want)
	}
}

func checkRange(t *testing.T, s raft.LogStore, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if f != first || l != last {
		t.Fatalf("range [%d, %d], want [%d, %d]", f, l, first, last)
	}
}

func checkMissing(t *testing.T, s raft.LogStore, i uint64) {
	t.Helper()
	var got raft.Log
	if err := s.GetLog(i, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(%d) = %v, want ErrLogNotFound", i, err)
	}
}

func storeRange(t *testing.T, s raft.LogStore, g uint32, from, to uint64) {
	t.Helper()
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, entry(g, i))
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatalf("group %d StoreLogs(%d..%d): %v", g, from, to, err)
	}
}

func TestLogStoreConformance(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	s := groupT(t, l, 7)
	checkRange(t, s, 0, 0)
	checkMissing(t, s, 1)

	if err := s.StoreLog(entry(7, 1)); err != nil {
		t.Fatal(err)
	}
	storeRange(t, s, 7, 2, 20)
	checkRange(t, s, 1, 20)
	for i := uint64(1); i <= 20; i++ {
		checkEntry(t, s, 7, i)
	}
	checkMissing(t, s, 21)
	if err := s.StoreLog(entry(7, 22)); !errors.Is(err, ErrNonSequential) {
		t.Fatalf("StoreLog with a gap = %v, want ErrNonSequential", err)
	}

	// Head compaction after a snapshot.
	if err := s.DeleteRange(1, 5); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 6, 20)
	checkMissing(t, s, 5)
	checkEntry(t, s, 7, 6)

	// A conflicting tail replaced.
	if err := s.DeleteRange(15, 20); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 6, 14)
	checkMissing(t, s, 15)
	storeRange(t, s, 7, 15, 30)
	checkRange(t, s, 6, 30)

	if err := s.DeleteRange(10, 12); !errors.Is(err, ErrMiddleDelete) {
		t.Fatalf("DeleteRange of the middle = %v", err)
	}
	if err := s.DeleteRange(40, 50); err != nil { // beyond the log: nothing
		t.Fatal(err)
	}
	checkRange(t, s, 6, 30)

	// Another group is separate.
	o := groupT(t, l, 8)
	checkRange(t, o, 0, 0)
	storeRange(t, o, 8, 100, 110)
	checkRange(t, o, 100, 110)

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openT(t, dir, Options{})
	defer l.Close()
	s, o = groupT(t, l, 7), groupT(t, l, 8)
	checkRange(t, s, 6, 30)
	checkRange(t, o, 100, 110)
	for i := uint64(6); i <= 30; i++ {
		checkEntry(t, s, 7, i)
	}
	for i := uint64(100); i <= 110; i++ {
		checkEntry(t, o, 8, i)
	}

	// Everything deleted: empty, and the next entry may start anywhere
	// (after a snapshot was installed).
	if err := s.DeleteRange(6, 30); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 0, 0)
	storeRange(t, s, 7, 500, 501)
	checkRange(t, s, 500, 501)
	checkEntry(t, s, 7, 500)
}

// TestConcurrentGroups has many groups store concurrently, and checks
// every acknowledged entry after a reopen; their writes share commits.
func TestConcurrentGroups(t *testing.T) {
	for _, inflight := range []int{1, 3} {
		t.Run(fmt.Sprintf("inflight%d", inflight), func(t *testing.T) { concurrentGroups(t, inflight) })
	}
}

func concurrentGroups(t *testing.T, inflight int) {
	dir := t.TempDir()
	l := openT(t, dir, Options{SegmentBytes: 64 << 10, SyncsInFlight: inflight})
	const groups, per = 32, 60
	var wg sync.WaitGroup
	errs := make(chan error, groups)
	for g := uint32(1); g <= groups; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := l.Group(g)
			if err != nil {
				errs <- err
				return
			}
			for i := uint64(1); i <= per; i++ {
				if err := s.StoreLogs([]*raft.Log{entry(g, i)}); err != nil {
					errs <- err
					return
				}
				var got raft.Log
				if err := s.GetLog(i, &got); err != nil {
					errs <- err
					return
				}
				if g%4 == 0 && i%20 == 0 {
					if err := s.DeleteRange(1, i-10); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := l.Stats()
	t.Logf("%d StoreLogs in %d commits, %d syncs, %d segments", groups*per, st.Commits, st.Syncs, st.Segments)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openT(t, dir, Options{SegmentBytes: 64 << 10})
	defer l.Close()
	for g := uint32(1); g <= groups; g++ {
		s := groupT(t, l, g)
		first := uint64(1)
		if g%4 == 0 {
			first = per - 10 + 1
		}
		checkRange(t, s, first, per)
		for i := first; i <= per; i++ {
			checkEntry(t, s, g, i)
		}
	}
}

// TestReadWhileAppending reads each group's last entry while it may still
// be queued or being written: GetLog waits for it rather than read bytes
// not yet in the file.
func TestReadWhileAppending(t *testing.T) {
	l := openT(t, t.TempDir(), Options{SegmentBytes: 16 << 10, SyncsInFlight: 2})
	defer l.Close()
	const groups, per = 4, 150
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := uint32(1); g <= groups; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, _ := l.Group(g)
			for i := uint64(1); i <= per; i++ {
				if err := s.StoreLog(entry(g, i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	reads := 0
	for {
		select {
		case <-done:
			t.Logf("%d reads of entries being appended", reads)
			return
		default:
		}
		for g := uint32(1); g <= groups; g++ {
			s := groupT(t, l, g)
			last, _ := s.LastIndex()
			if last == 0 {
				continue
			}
			checkEntry(t, s, g, last)
			reads++
		}
	}
}
