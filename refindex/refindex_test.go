package refindex

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestKeyIndexAgainstMap applies random inserts, finds, replaces and
// removes to a Index and to a map, through growth and shrinking, and
// checks they agree.
func TestKeyIndexAgainstMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	x := New(maphash.String)
	keyOfRef := map[uint32]string{}
	model := map[string]uint32{}
	keyOf := func(ref uint32) string { return keyOfRef[ref] }
	nextRef := uint32(0)
	maxCells, grew, shrank := 0, false, false
	for step := range 200_000 {
		// Phases: fill to a few thousand keys, drain, fill again.
		target := 3000
		if (step/40_000)%2 == 1 {
			target = 0
		}
		key := fmt.Sprintf("k%d", r.IntN(6000))
		ref, ok := x.Find(key, keyOf)
		want, wok := model[key]
		if ok != wok || ok && ref != want {
			t.Fatalf("step %d: find(%q) = %d, %v; want %d, %v", step, key, ref, ok, want, wok)
		}
		switch {
		case !ok && len(model) < target+r.IntN(100):
			nextRef++
			x.Insert(key, nextRef)
			model[key], keyOfRef[nextRef] = nextRef, key
		case ok && r.IntN(4) == 0:
			nextRef++
			x.Replace(key, ref, nextRef)
			delete(keyOfRef, ref)
			model[key], keyOfRef[nextRef] = nextRef, key
		case ok && len(model) > target-r.IntN(100):
			x.Remove(key, ref)
			delete(model, key)
			delete(keyOfRef, ref)
		}
		if x.n != len(model) {
			t.Fatalf("step %d: %d keys, want %d", step, x.n, len(model))
		}
		if len(x.cells) > maxCells {
			grew, maxCells = maxCells > 0, len(x.cells)
		}
		if len(x.cells) < maxCells {
			shrank = true
		}
		if x.n*4 > len(x.cells)*3 {
			t.Fatalf("step %d: %d keys in %d cells", step, x.n, len(x.cells))
		}
	}
	if !grew || !shrank {
		t.Fatalf("grew %v, shrank %v: the test exercised too little", grew, shrank)
	}
	for key, ref := range model {
		if got, ok := x.Find(key, keyOf); !ok || got != ref {
			t.Fatalf("find(%q) = %d, %v at the end; want %d", key, got, ok, ref)
		}
	}
}

// TestKeyIndexCollidingHomes fills a small index whose keys share home
// cells and wraps around its end, then removes them in random order.
func TestKeyIndexCollidingHomes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		x := New(maphash.String)
		keys := make([]string, 5+r.IntN(2)) // at most 3/4 of 8 cells: no growth
		for i := range keys {
			keys[i] = fmt.Sprintf("r%d-%d", round, i)
		}
		keyOf := func(ref uint32) string { return keys[ref] }
		for i, k := range keys {
			x.Insert(k, uint32(i))
		}
		if len(x.cells) != minIndexCells {
			t.Fatalf("%d cells, want %d", len(x.cells), minIndexCells)
		}
		for _, i := range r.Perm(len(keys)) {
			x.Remove(keys[i], uint32(i))
			keys[i] = "" // gone: find must not see it
			for j, k := range keys {
				if k == "" {
					continue
				}
				if ref, ok := x.Find(k, keyOf); !ok || ref != uint32(j) {
					t.Fatalf("round %d: after removing %d: find(%q) = %d, %v", round, i, k, ref, ok)
				}
			}
		}
		if x.n != 0 || slices.ContainsFunc(x.cells, func(c uint64) bool { return c != 0 }) {
			t.Fatalf("round %d: index not empty after removing every key", round)
		}
	}
}
