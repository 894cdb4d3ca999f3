package nodelog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// lastSegment is the path of the newest segment file in dir.
func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	ids, err := segmentIDs(dir)
	if err != nil || len(ids) == 0 {
		t.Fatalf("no segments: %v", err)
	}
	return filepath.Join(dir, segName(ids[len(ids)-1]))
}

// activeEnd is the active segment's path and where its records end.
func activeEnd(l *Log) (string, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.segs[len(l.segs)-1]
	return s.path, s.end
}

func writeAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// locOf is where entry i of group g is.
func locOf(t *testing.T, l *Log, g uint32, i uint64) (string, loc) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	lc, ok := l.groups[g].at(i)
	if !ok {
		t.Fatalf("no entry %d in group %d", i, g)
	}
	return l.byID[lc.seg].path, lc
}

func TestTornTailTruncated(t *testing.T) {
	for name, tail := range map[string]func() []byte{
		"half a record": func() []byte { r := appendEntry(nil, 1, entry(1, 11)); return r[:len(r)/2] },
		"half a header": func() []byte { return appendEntry(nil, 1, entry(1, 11))[:headerLen-7] },
		"zeros":         func() []byte { return make([]byte, 4096) },
		"bad checksum": func() []byte {
			r := appendEntry(nil, 1, entry(1, 11))
			r[len(r)-1] ^= 1
			return r
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l := openT(t, dir, Options{SegmentBytes: 64 << 10})
			s := groupT(t, l, 1)
			storeRange(t, s, 1, 1, 10)
			seg, end := activeEnd(l)
			l.Close()
			fi, _ := os.Stat(seg)
			writeAt(t, seg, tail(), end)

			var logs bytes.Buffer
			l = openT(t, dir, Options{SegmentBytes: 64 << 10, Logger: hclog.New(&hclog.LoggerOptions{Output: &logs})})
			defer l.Close()
			if name != "zeros" && !strings.Contains(logs.String(), "torn tail") {
				t.Fatalf("the repair was not logged: %q", logs.String())
			}
			after, _ := os.ReadFile(seg)
			if int64(len(after)) != fi.Size() || nonZeroEnd(after) > end {
				t.Fatalf("segment is %d bytes after the repair, was %d; data ends at %d, want %d",
					len(after), fi.Size(), nonZeroEnd(after), end)
			}
			s = groupT(t, l, 1)
			checkRange(t, s, 1, 10)
			for i := uint64(1); i <= 10; i++ {
				checkEntry(t, s, 1, i)
			}
			storeRange(t, s, 1, 11, 12)
			checkEntry(t, s, 1, 12)
		})
	}
}

func wantDamaged(t *testing.T, err error, file string) {
	t.Helper()
	var de *DamagedError
	if !errors.As(err, &de) {
		t.Fatalf("error %v, want a *DamagedError", err)
	}
	if de.File != file || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "rejoin") {
		t.Fatalf("DamagedError %q names %q, want %q and how to recover", err, de.File, file)
	}
}

func TestCorruptMiddleRecord(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	s := groupT(t, l, 1)
	storeRange(t, s, 1, 1, 20)
	path, lc := locOf(t, l, 1, 10)
	l.Close()
	flipByte(t, path, int64(lc.off)+headerLen+3)
	_, err := Open(dir, Options{})
	wantDamaged(t, err, path)
	if de := err.(*DamagedError); de.Offset != int64(lc.off) {
		t.Fatalf("offset %d, want %d", de.Offset, lc.off)
	}
}

// TestCorruptOlderSegmentTail: only the last segment may end torn; a bad
// record at the end of an older one is damage.
func TestCorruptOlderSegmentTail(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 2 << 10}
	l := openT(t, dir, opts)
	s := groupT(t, l, 1)
	for i := uint64(1); i <= 60; i++ {
		storeRange(t, s, 1, i, i)
	}
	path, lc := locOf(t, l, 1, 1)
	l.Close()
	if path == lastSegment(t, dir) {
		t.Fatal("entry 1 is in the last segment")
	}
	flipByte(t, path, int64(lc.off)+int64(lc.n)-1)
	_, err := Open(dir, opts)
	wantDamaged(t, err, path)
}

func TestMissingSegmentIsDamage(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 2 << 10}
	l := openT(t, dir, opts)
	s := groupT(t, l, 1)
	for i := uint64(1); i <= 60; i++ {
		storeRange(t, s, 1, i, i)
	}
	path, _ := locOf(t, l, 1, 30)
	l.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, opts)
	var de *DamagedError
	if !errors.As(err, &de) {
		t.Fatalf("Open without a segment holding live entries: %v", err)
	}
}

func TestCorruptRecordAtGetLog(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	defer l.Close()
	s := groupT(t, l, 1)
	storeRange(t, s, 1, 1, 5)
	path, lc := locOf(t, l, 1, 3)
	flipByte(t, path, int64(lc.off)+headerLen+1)
	var got raft.Log
	err := s.GetLog(3, &got)
	wantDamaged(t, err, path)
	if !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("error %q does not say checksum", err)
	}
	checkEntry(t, s, 1, 4)
}
