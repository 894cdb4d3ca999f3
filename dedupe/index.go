package dedupe

import "hash/maphash"

// index maps the keys of a Table to their slots' positions in its slab. It
// is an open-addressing hash table with linear probing over a power-of-two
// array of 8-byte cells, each holding a 32-bit tag of the key's hash (high
// half) and the position+1 (low half; 0 is an empty cell). It stores no
// keys: a lookup compares a candidate's key through the slab. That is 11 to
// 21 bytes per entry at its loads (3/4 down to 3/8 before it grows; it
// halves at 1/8), where a Go map[Key]uint32 costs 45 to 90 and never
// shrinks.
//
// The hash is hash/maphash with a random seed per index, as Go maps are
// seeded, so that request IDs chosen by clients cannot be crafted to
// collide. The seed makes the layout differ between replicas, which is
// harmless: nothing reads the layout (no iteration), and every answer
// depends only on the keys held.
type index struct {
	cells []uint64
	n     int  // cells in use
	shift uint // a tag's home cell is tag >> shift
	seed  maphash.Seed
}

// minIndexCells is the smallest (and initial) size of an index.
const minIndexCells = 8

func newIndex() index {
	return index{cells: make([]uint64, minIndexCells), shift: 32 - 3, seed: maphash.MakeSeed()}
}

// tag is the high 32 bits of k's hash; its top bits pick the home cell.
func (x *index) tag(k Key) uint32 {
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.WriteString(k.Caller)
	h.WriteByte(0) // no two (caller, request ID) pairs hash the same bytes
	h.WriteString(k.RequestID)
	return uint32(h.Sum64() >> 32)
}

func (x *index) mask() int { return len(x.cells) - 1 }

// find returns the position of k, comparing candidates with keyAt.
func (x *index) find(k Key, keyAt func(pos uint32) Key) (uint32, bool) {
	tag := x.tag(k)
	mask := x.mask()
	for i := int(tag >> x.shift); ; i = (i + 1) & mask {
		c := x.cells[i]
		if c == 0 {
			return 0, false
		}
		if uint32(c>>32) == tag {
			if pos := uint32(c) - 1; keyAt(pos) == k {
				return pos, true
			}
		}
	}
}

// insert adds k, which must be absent, at pos.
func (x *index) insert(k Key, pos uint32) {
	if (x.n+1)*4 > len(x.cells)*3 { // keep the load at most 3/4
		x.resize(len(x.cells) * 2)
	}
	x.place(uint64(x.tag(k))<<32 | uint64(pos+1))
	x.n++
}

// place puts a cell in the first empty cell from its home.
func (x *index) place(c uint64) {
	mask := x.mask()
	i := int(uint32(c>>32) >> x.shift)
	for x.cells[i] != 0 {
		i = (i + 1) & mask
	}
	x.cells[i] = c
}

// cell returns where the cell of k at pos is.
func (x *index) cell(k Key, pos uint32) int {
	tag := x.tag(k)
	mask := x.mask()
	want := uint64(tag)<<32 | uint64(pos+1)
	for i := int(tag >> x.shift); ; i = (i + 1) & mask {
		switch x.cells[i] {
		case want:
			return i
		case 0:
			panic("dedupe: index lost a key")
		}
	}
}

// move records that k moved from position old to new.
func (x *index) move(k Key, old, new uint32) {
	i := x.cell(k, old)
	x.cells[i] = x.cells[i]&^0xffffffff | uint64(new+1)
}

// remove deletes k, held at pos. Later cells of the probe run move back
// into the hole when their home allows (no tombstones), and the index
// halves when at most 1/8 full.
func (x *index) remove(k Key, pos uint32) {
	mask := x.mask()
	hole := x.cell(k, pos)
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
func (x *index) resize(size int) {
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
