package nodelog

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// dirBytes is the size of the segment files in dir, and their number.
func dirBytes(t *testing.T, dir string) (int64, int) {
	t.Helper()
	ents, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		fi, err := os.Stat(e)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n, len(ents)
}

func TestRolloverAndDeletion(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4 << 10}
	l := openT(t, dir, opts)
	a := groupT(t, l, 1)
	for i := uint64(1); i <= 300; i++ {
		storeRange(t, a, 1, i, i)
	}
	grown, files := dirBytes(t, dir)
	if files < 5 {
		t.Fatalf("%d segment files after %d bytes, want a rollover every 4 KiB", files, grown)
	}
	for i := uint64(1); i <= 300; i++ {
		checkEntry(t, a, 1, i)
	}
	if err := a.DeleteRange(1, 290); err != nil {
		t.Fatal(err)
	}
	shrunk, left := dirBytes(t, dir)
	t.Logf("%d bytes in %d segments, after head truncation %d bytes in %d", grown, files, shrunk, left)
	if shrunk >= grown/3 || left > 2 {
		t.Fatalf("after the head truncation %d bytes in %d segments remain of %d in %d", shrunk, left, grown, files)
	}
	checkRange(t, a, 291, 300)
	l.Close()
	l = openT(t, dir, opts)
	defer l.Close()
	a = groupT(t, l, 1)
	checkRange(t, a, 291, 300)
	for i := uint64(291); i <= 300; i++ {
		checkEntry(t, a, 1, i)
	}
}

// TestCheckpointAuthority: a segment kept for one group's live entry also
// holds another group's entries that were voided by a record in a segment
// since deleted; the next segment's checkpoint keeps them void.
func TestCheckpointAuthority(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 2 << 10}
	l := openT(t, dir, opts)
	a, b, c := groupT(t, l, 1), groupT(t, l, 2), groupT(t, l, 3)
	storeRange(t, b, 2, 1, 1)  // keeps the first segment alive
	storeRange(t, a, 1, 1, 10) // voided below
	storeRange(t, c, 3, 1, 10) // tail replaced below
	for i := uint64(11); i <= 80; i++ {
		storeRange(t, a, 1, i, i)
	}
	if err := a.DeleteRange(1, 80); err != nil { // a is empty now
		t.Fatal(err)
	}
	if err := c.DeleteRange(5, 10); err != nil {
		t.Fatal(err)
	}
	for i := uint64(5); i <= 60; i++ {
		e := entry(3, i)
		e.Data = append(e.Data, " v2"...)
		if err := c.StoreLog(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.DeleteRange(1, 50); err != nil {
		t.Fatal(err)
	}
	_, files := dirBytes(t, dir)
	l.Close()
	l = openT(t, dir, opts)
	defer l.Close()
	_, reopened := dirBytes(t, dir)
	t.Logf("%d segments before reopening, %d after", files, reopened)
	a, b, c = groupT(t, l, 1), groupT(t, l, 2), groupT(t, l, 3)
	checkRange(t, a, 0, 0)
	checkMissing(t, a, 5)
	checkRange(t, b, 1, 1)
	checkEntry(t, b, 2, 1)
	checkRange(t, c, 51, 60)
	var got raft.Log
	if err := c.GetLog(55, &got); err != nil || !bytes.HasSuffix(got.Data, []byte(" v2")) {
		t.Fatalf("group 3 entry 55: %q, %v", got.Data, err)
	}
	if _, err := os.Stat(filepath.Join(dir, segName(1))); err != nil {
		t.Fatalf("the first segment, still needed by group 2: %v", err)
	}
}

func TestDropGroupDurable(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4 << 10}
	l := openT(t, dir, opts)
	a, b := groupT(t, l, 1), groupT(t, l, 2)
	for i := uint64(1); i <= 150; i++ {
		storeRange(t, a, 1, i, i)
	}
	storeRange(t, b, 2, 1, 5)
	before, _ := dirBytes(t, dir)
	if err := l.DropGroup(1); err != nil {
		t.Fatal(err)
	}
	checkRange(t, a, 0, 0)
	after, _ := dirBytes(t, dir)
	if after >= before/2 {
		t.Fatalf("dropping the group left %d of %d bytes", after, before)
	}
	l.Close()
	l = openT(t, dir, opts)
	defer l.Close()
	a, b = groupT(t, l, 1), groupT(t, l, 2)
	checkRange(t, a, 0, 0)
	checkMissing(t, a, 150)
	checkRange(t, b, 1, 5)
	checkEntry(t, b, 2, 5)
	storeRange(t, a, 1, 1, 3) // the id may be used again
	checkRange(t, a, 1, 3)
}

// TestRandomOpsAgainstModel runs random appends, head and tail deletions,
// drops and reopens of a few groups with small segments, and compares
// every group with a model after each step.
func TestRandomOpsAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomOps(t, seed) })
	}
}

func randomOps(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 18))
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1 << 10}
	l := openT(t, dir, opts)
	defer func() { l.Close() }()
	const groups = 4
	model := make([]map[uint64][]byte, groups+1) // index -> Data
	span := make([][2]uint64, groups+1)
	for g := range model {
		model[g] = map[uint64][]byte{}
	}
	for step := range 400 {
		g := uint32(rng.IntN(groups) + 1)
		s := groupT(t, l, g)
		m, sp := model[g], &span[g]
		switch op := rng.IntN(20); {
		case op < 12: // append a batch
			next := sp[1] + 1
			if sp[1] == 0 {
				next = uint64(rng.IntN(100) + 1)
			}
			var logs []*raft.Log
			for i := range uint64(rng.IntN(4) + 1) {
				e := entry(g, next+i)
				e.Data = fmt.Appendf(e.Data, " step %d", step)
				logs = append(logs, e)
				m[next+i] = e.Data
			}
			if err := s.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			if sp[1] == 0 {
				sp[0] = next
			}
			sp[1] = next + uint64(len(logs)) - 1
		case op < 15 && sp[1] > 0: // head
			to := sp[0] + uint64(rng.IntN(int(sp[1]-sp[0]+2)))
			if err := s.DeleteRange(sp[0], to); err != nil {
				t.Fatal(err)
			}
			for i := sp[0]; i <= min(to, sp[1]); i++ {
				delete(m, i)
			}
			if sp[0] = to + 1; to >= sp[1] {
				*sp = [2]uint64{}
			}
		case op < 18 && sp[1] > 0: // tail
			from := sp[0] + uint64(rng.IntN(int(sp[1]-sp[0]+1)))
			if err := s.DeleteRange(from, sp[1]); err != nil {
				t.Fatal(err)
			}
			for i := from; i <= sp[1]; i++ {
				delete(m, i)
			}
			if sp[1] = from - 1; from <= sp[0] {
				*sp = [2]uint64{}
			}
		case op == 18:
			if err := l.DropGroup(g); err != nil {
				t.Fatal(err)
			}
			model[g], *sp = map[uint64][]byte{}, [2]uint64{}
		default:
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openT(t, dir, opts)
		}
		for g := uint32(1); g <= groups; g++ {
			s := groupT(t, l, g)
			checkRange(t, s, span[g][0], span[g][1])
			for i, want := range model[g] {
				var got raft.Log
				if err := s.GetLog(i, &got); err != nil || !bytes.Equal(got.Data, want) {
					t.Fatalf("step %d: group %d entry %d: %q, %v; want %q", step, g, i, got.Data, err, want)
				}
			}
		}
	}
	_, files := dirBytes(t, dir)
	t.Logf("seed %d: %d segment files at the end", seed, files)
}
