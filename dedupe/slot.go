package dedupe

import (
	"encoding/binary"
	"strings"
)

// slot is an entry as a Table stores it, by value in its slab: the caller's
// name (shared: the FSM keeps one copy of each), its expiry, fingerprint
// and position in the expiry order, and everything else in one string,
// data: a 3-byte header (kind, then the shard slot big-endian), the
// request ID, then the result. The map's key shares data's bytes for its
// request ID. 64 bytes and one allocation per entry, where a pointer to a
// separate struct, a request ID and a result cost three.
type slot struct {
	caller string
	data   string
	exp    int64
	fp     [16]byte
	pos    int32  // index in the table's order
	rid    uint32 // the request ID's length
}

// slotHeader is the length of data's header.
const slotHeader = 3

// newSlot copies e into a slot; its position is the caller's to set.
// It keeps nothing of e's Result: the slot's data is one new allocation.
func newSlot(e Entry) slot {
	var h [slotHeader]byte
	h[0] = e.Kind
	binary.BigEndian.PutUint16(h[1:], e.Slot)
	var b strings.Builder
	b.Grow(slotHeader + len(e.Key.RequestID) + len(e.Result))
	b.Write(h[:])
	b.WriteString(e.Key.RequestID)
	b.Write(e.Result)
	return slot{caller: e.Key.Caller, data: b.String(), exp: e.ExpiresAt, fp: e.Fingerprint, rid: uint32(len(e.Key.RequestID))}
}

// key is the entry's key; its request ID shares data's bytes.
func (s *slot) key() Key {
	return Key{Caller: s.caller, RequestID: s.data[slotHeader : slotHeader+s.rid]}
}

func (s *slot) ridLen() int    { return int(s.rid) }
func (s *slot) resultLen() int { return len(s.data) - slotHeader - int(s.rid) }
func (s *slot) kind() uint8    { return s.data[0] }
func (s *slot) slot() uint16 {
	return uint16(s.data[1])<<8 | uint16(s.data[2])
}

// entry is the entry s holds, with a copy of its result.
func (s *slot) entry() Entry {
	return Entry{
		Key:         s.key(),
		Kind:        s.kind(),
		Slot:        s.slot(),
		Fingerprint: s.fp,
		Result:      []byte(s.data[slotHeader+s.rid:]),
		ExpiresAt:   s.exp,
	}
}

// before reports whether slot a's (expiry, key) is below slot b's.
func (t *Table) before(a, b uint32) bool {
	sa, sb := &t.slots[a], &t.slots[b]
	if sa.exp != sb.exp {
		return sa.exp < sb.exp
	}
	return sa.key().compare(sb.key()) < 0
}

// push adds slot i to the expiry order.
func (t *Table) push(i uint32) {
	t.order = append(t.order, i)
	t.slots[i].pos = int32(len(t.order) - 1)
	t.up(len(t.order) - 1)
}

// orderRemove takes the slot at position p out of the expiry order; the
// order's array shrinks when at most a quarter full.
func (t *Table) orderRemove(p int) {
	last := len(t.order) - 1
	if p != last {
		t.order[p] = t.order[last]
		t.slots[t.order[p]].pos = int32(p)
	}
	t.order = t.order[:last]
	if p != last && !t.down(p) {
		t.up(p)
	}
	t.order = shrink(t.order)
}

func (t *Table) swap(i, j int) {
	t.order[i], t.order[j] = t.order[j], t.order[i]
	t.slots[t.order[i]].pos = int32(i)
	t.slots[t.order[j]].pos = int32(j)
}

func (t *Table) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !t.before(t.order[j], t.order[i]) {
			return
		}
		t.swap(i, j)
		j = i
	}
}

// down moves position i down to its place and reports whether it moved.
func (t *Table) down(i int) bool {
	start, n := i, len(t.order)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && t.before(t.order[r], t.order[l]) {
			j = r
		}
		if !t.before(t.order[j], t.order[i]) {
			break
		}
		t.swap(i, j)
		i = j
	}
	return i > start
}
