package refindex

import "hash/maphash"

// Index maps the keys of a table to refs, the table's handles of its
// entries (uint32, below MaxRef). It is an open-addressing hash table with
// linear probing over a power-of-two array of 8-byte cells, each holding a
// 32-bit tag of the key's hash (high half) and ref+1 (low half; 0 is an
// empty cell); it does not store keys: find compares a candidate's key
// through the table. That is about 11–21 bytes per key (loads 3/4 down to
// 3/8 before it grows; it halves at 1/8), where a Go map[string]*entry
// costs about 56 at a million keys and never shrinks.
//
// The hash is hash/maphash with a random seed per index, as Go maps are
// seeded, so that keys chosen by clients cannot be crafted to collide. The
// seed makes the cells' layout differ between replicas, which is harmless
// because nothing ever reads the layout: there is no iteration, and every
// answer (a ref, or none) depends only on the keys held. It is not safe for
// concurrent use.
type Index[K comparable] struct {
	cells []uint64
	n     int  // cells in use
	shift uint // a tag's home cell is tag >> shift
	seed  maphash.Seed
	hash  func(maphash.Seed, K) uint64
}

// MaxRef bounds refs: ref+1 must fit the 32-bit low half of a cell.
const MaxRef = 1<<32 - 2

// minIndexCells is the smallest (and initial) size of an index.
const minIndexCells = 8

// New returns an empty index with a fresh random seed, hashing keys with
// hash (maphash.String for string keys).
func New[K comparable](hash func(maphash.Seed, K) uint64) Index[K] {
	return Index[K]{cells: make([]uint64, minIndexCells), shift: 32 - 3, seed: maphash.MakeSeed(), hash: hash}
}

// Len is the number of keys held.
func (x *Index[K]) Len() int { return x.n }

// tag is the high 32 bits of key's hash; its top bits pick the home cell.
func (x *Index[K]) tag(key K) uint32 { return uint32(x.hash(x.seed, key) >> 32) }

// mask wraps a cell position around the array.
func (x *Index[K]) mask() int { return len(x.cells) - 1 }

// Find returns the ref of key, comparing candidates' keys with keyOf.
func (x *Index[K]) Find(key K, keyOf func(ref uint32) K) (uint32, bool) {
	tag := x.tag(key)
	mask := x.mask()
	for i := int(tag >> x.shift); ; i = (i + 1) & mask {
		c := x.cells[i]
		if c == 0 {
			return 0, false
		}
		if uint32(c>>32) == tag {
			if ref := uint32(c) - 1; keyOf(ref) == key {
				return ref, true
			}
		}
	}
}

// Insert adds key, which must be absent, with ref.
func (x *Index[K]) Insert(key K, ref uint32) {
	if (x.n+1)*4 > len(x.cells)*3 { // keep the load at most 3/4
		x.resize(len(x.cells) * 2)
	}
	x.place(uint64(x.tag(key))<<32 | uint64(ref+1))
	x.n++
}

// place puts a cell in the first empty cell from its home.
func (x *Index[K]) place(c uint64) {
	mask := x.mask()
	i := int(uint32(c>>32) >> x.shift)
	for x.cells[i] != 0 {
		i = (i + 1) & mask
	}
	x.cells[i] = c
}

// slot returns the position of the cell holding ref, which key maps to.
func (x *Index[K]) slot(key K, ref uint32) int {
	tag := x.tag(key)
	mask := x.mask()
	want := uint64(tag)<<32 | uint64(ref+1)
	for i := int(tag >> x.shift); ; i = (i + 1) & mask {
		switch x.cells[i] {
		case want:
			return i
		case 0:
			panic("refindex: the index lost a key")
		}
	}
}

// Replace makes key, held with ref old, map to ref new.
func (x *Index[K]) Replace(key K, old, new uint32) {
	i := x.slot(key, old)
	x.cells[i] = x.cells[i]&^0xffffffff | uint64(new+1)
}

// Remove deletes key, held with ref. Later cells of the probe run move back
// into the hole when their home allows (backward-shift deletion: no
// tombstones), and the index halves when it is at most 1/8 full.
func (x *Index[K]) Remove(key K, ref uint32) {
	mask := x.mask()
	hole := x.slot(key, ref)
	for j := (hole + 1) & mask; x.cells[j] != 0; j = (j + 1) & mask {
		home := int(uint32(x.cells[j]>>32) >> x.shift)
		// The cell at j may fill the hole unless its home lies cyclically
		// in (hole, j].
		if (j-home)&mask >= (j-hole)&mask {
			x.cells[hole] = x.cells[j]
			hole = j
		}
	}
	x.cells[hole] = 0
	x.n--
	if len(x.cells) > minIndexCells && x.n*8 <= len(x.cells) {
		x.resize(len(x.cells) / 2)
	}
}

// resize moves every cell into an array of size cells (a power of two, at
// least minIndexCells). Tags carry their home, so no key is hashed again.
func (x *Index[K]) resize(size int) {
	old := x.cells
	x.cells = make([]uint64, size)
	bits := uint(0)
	for 1<<bits < size {
		bits++
	}
	x.shift = 32 - bits
	for _, c := range old {
		if c != 0 {
			x.place(c)
		}
	}
}
