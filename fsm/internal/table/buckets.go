package table

import (
	"fmt"
	"hash/maphash"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/refindex"
)

// BucketTable holds the live state of each (policy, key) of a rate
// algorithm — a "bucket" — and an order by (expiry, key), so expired states
// are reclaimed in a deterministic order. It behaves exactly like a
// StateTable[admission.State] with admission.ExpiresAt, and holds the same
// states and recorded expiries, but stores each in the smallest of four
// slot shapes that holds it exactly:
//
//   - gcra (32 bytes): a token bucket whose recorded expiry is its TAT, as
//     every token bucket's is (Bucket.ExpiresAt): key and TAT.
//   - counter (56 bytes): a state without TAT or log (fixed and sliding
//     windows, quotas): key, Start, Count, Prev, Kind and the expiry.
//   - log (56 bytes): a state with a log and no numbers (sliding logs):
//     key, Log, Kind and the expiry.
//   - other (136 bytes): any state, verbatim (a token bucket that was
//     refunded, and the rare token bucket recorded with another expiry:
//     written under a policy that changed algorithm).
//
// A ref (see refindex.Index) is a slot's index in its shape's slice times four
// plus the shape. A state that changes shape moves to the other slice and
// keeps its place in the order. Which slice and position a state has
// depends on history and never reaches a result or a snapshot. It is not
// safe for concurrent use; the FSM's lock guards it.
type BucketTable struct {
	gcra    []gcraSlot
	counter []counterSlot
	log     []logSlot
	other   []slot[admission.State]
	index   refindex.Index[string]
	order   expiryOrder
}

// The slot shapes, the low two bits of a ref.
const (
	shapeGCRA uint32 = iota
	shapeCounter
	shapeLog
	shapeOther
)

// gcraSlot is a token bucket whose recorded expiry is its TAT.
type gcraSlot struct {
	key string
	tat int64
	pos int32
}

// counterSlot is a state with no TAT and no log.
type counterSlot struct {
	key                     string
	start, count, prev, exp int64
	pos                     int32
	kind                    admission.Kind
}

// logSlot is a state with a log and no TAT, Start, Count or Prev.
type logSlot struct {
	key  string
	log  []admission.LogEntry
	exp  int64
	pos  int32
	kind admission.Kind
}

// BucketRecord is a bucket copied for a snapshot.
type BucketRecord = Record[admission.State]

// NewBucketTable returns an empty bucket table.
func NewBucketTable() *BucketTable { return &BucketTable{index: refindex.New(maphash.String)} }

// shapeFor is the smallest shape that holds s with expiry exp exactly.
func shapeFor(s admission.State, exp int64) uint32 {
	switch {
	case s.Shifted != 0 || s.Refunds != nil || s.Forgotten != 0:
		return shapeOther // a token bucket that was refunded
	case s.Log != nil && s.TAT == 0 && s.Start == 0 && s.Count == 0 && s.Prev == 0:
		return shapeLog
	case s.Log != nil:
		return shapeOther
	case s.Kind == admission.KindTokenBucket && exp == s.TAT && s.Start == 0 && s.Count == 0 && s.Prev == 0:
		return shapeGCRA
	case s.TAT == 0:
		return shapeCounter
	default:
		return shapeOther
	}
}

// Len is the number of states held.
func (t *BucketTable) Len() int { return len(t.gcra) + len(t.counter) + len(t.log) + len(t.other) }

// keyOf is the state key of the slot ref.
func (t *BucketTable) keyOf(ref uint32) string {
	switch i := ref >> 2; ref & 3 {
	case shapeGCRA:
		return t.gcra[i].key
	case shapeCounter:
		return t.counter[i].key
	case shapeLog:
		return t.log[i].key
	default:
		return t.other[i].key
	}
}

// expOf is the recorded expiry of the slot ref.
func (t *BucketTable) expOf(ref uint32) int64 {
	switch i := ref >> 2; ref & 3 {
	case shapeGCRA:
		return t.gcra[i].tat
	case shapeCounter:
		return t.counter[i].exp
	case shapeLog:
		return t.log[i].exp
	default:
		return t.other[i].exp
	}
}

// posOf is the position of the slot ref in the expiry order.
func (t *BucketTable) posOf(ref uint32) int {
	switch i := ref >> 2; ref & 3 {
	case shapeGCRA:
		return int(t.gcra[i].pos)
	case shapeCounter:
		return int(t.counter[i].pos)
	case shapeLog:
		return int(t.log[i].pos)
	default:
		return int(t.other[i].pos)
	}
}

// setPos records the position of the slot ref in the expiry order.
func (t *BucketTable) setPos(ref uint32, pos int) {
	switch i := ref >> 2; ref & 3 {
	case shapeGCRA:
		t.gcra[i].pos = int32(pos)
	case shapeCounter:
		t.counter[i].pos = int32(pos)
	case shapeLog:
		t.log[i].pos = int32(pos)
	default:
		t.other[i].pos = int32(pos)
	}
}

// before orders refs by (expiry, key) for the expiry order.
func (t *BucketTable) before(a, b uint32) bool {
	if x, y := t.expOf(a), t.expOf(b); x != y {
		return x < y
	}
	return t.keyOf(a) < t.keyOf(b)
}

// stateOf is the state a slot holds.
func (t *BucketTable) stateOf(ref uint32) admission.State {
	switch i := ref >> 2; ref & 3 {
	case shapeGCRA:
		return admission.State{Kind: admission.KindTokenBucket, TAT: t.gcra[i].tat}
	case shapeCounter:
		c := &t.counter[i]
		return admission.State{Kind: c.kind, Start: c.start, Count: c.count, Prev: c.prev}
	case shapeLog:
		return admission.State{Kind: t.log[i].kind, Log: t.log[i].log}
	default:
		return t.other[i].state
	}
}

// Get returns key's state, and false when there is none.
func (t *BucketTable) Get(key string) (admission.State, bool) {
	ref, ok := t.index.Find(key, t.keyOf)
	if !ok {
		return admission.State{}, false
	}
	return t.stateOf(ref), true
}

// EachKey calls fn with every key, in no particular order.
func (t *BucketTable) EachKey(fn func(string)) {
	for i := range t.gcra {
		fn(t.gcra[i].key)
	}
	for i := range t.counter {
		fn(t.counter[i].key)
	}
	for i := range t.log {
		fn(t.log[i].key)
	}
	for i := range t.other {
		fn(t.other[i].key)
	}
}

// Lookup returns key's state with its recorded expiry, false when none.
func (t *BucketTable) Lookup(key string) (BucketRecord, bool) {
	ref, ok := t.index.Find(key, t.keyOf)
	if !ok {
		return BucketRecord{}, false
	}
	return BucketRecord{Key: t.keyOf(ref), State: t.stateOf(ref), ExpiresAt: t.expOf(ref)}, true
}

// Put stores key's state and its recorded expiry.
func (t *BucketTable) Put(key string, s admission.State, expiresAt int64) {
	if ref, ok := t.index.Find(key, t.keyOf); ok {
		t.rewrite(ref, s, expiresAt)
		return
	}
	ref := t.add(key, s, expiresAt)
	t.index.Insert(key, ref)
	t.order.push(t, ref)
}

// rewrite stores s and its expiry in the slot ref, or in a new slot of
// another shape that takes ref's place, and repairs the order.
func (t *BucketTable) rewrite(ref uint32, s admission.State, exp int64) {
	pos := t.posOf(ref)
	switch i := ref >> 2; shapeFor(s, exp) {
	case ref & 3:
		switch ref & 3 {
		case shapeGCRA:
			t.gcra[i].tat = s.TAT
		case shapeCounter:
			c := &t.counter[i]
			c.start, c.count, c.prev, c.exp, c.kind = s.Start, s.Count, s.Prev, exp, s.Kind
		case shapeLog:
			l := &t.log[i]
			l.log, l.exp, l.kind = s.Log, exp, s.Kind
		default:
			o := &t.other[i]
			o.state, o.exp = s, exp
		}
	default:
		key := t.keyOf(ref)
		moved := t.add(key, s, exp)
		t.index.Replace(key, ref, moved)
		t.order.set(t, pos, moved)
		t.free(ref)
	}
	t.order.fix(t, pos)
}

// add stores a new slot in the shape that fits s and returns its ref; the
// caller indexes and orders it.
func (t *BucketTable) add(key string, s admission.State, exp int64) uint32 {
	if t.Len() >= MaxEntries {
		panic(fmt.Sprintf("fsm: more than %d buckets in one group", MaxEntries))
	}
	var i int
	shape := shapeFor(s, exp)
	switch shape {
	case shapeGCRA:
		i = len(t.gcra)
		t.gcra = append(t.gcra, gcraSlot{key: key, tat: s.TAT})
	case shapeCounter:
		i = len(t.counter)
		t.counter = append(t.counter, counterSlot{key: key, start: s.Start, count: s.Count, prev: s.Prev, exp: exp, kind: s.Kind})
	case shapeLog:
		i = len(t.log)
		t.log = append(t.log, logSlot{key: key, log: s.Log, exp: exp, kind: s.Kind})
	default:
		i = len(t.other)
		t.other = append(t.other, slot[admission.State]{key: key, state: s, exp: exp})
	}
	return uint32(i)<<2 | shape
}

// free removes the slot ref, already out of the index and the order, by
// moving its shape's last slot into its place.
func (t *BucketTable) free(ref uint32) {
	i, shape := int(ref>>2), ref&3
	var moved bool
	var last int
	switch shape {
	case shapeGCRA:
		last = len(t.gcra) - 1
		t.gcra, moved = take(t.gcra, i)
	case shapeCounter:
		last = len(t.counter) - 1
		t.counter, moved = take(t.counter, i)
	case shapeLog:
		last = len(t.log) - 1
		t.log, moved = take(t.log, i)
	default:
		last = len(t.other) - 1
		t.other, moved = take(t.other, i)
	}
	if moved {
		t.index.Replace(t.keyOf(ref), uint32(last)<<2|shape, ref)
		t.order.set(t, t.posOf(ref), ref)
	}
}

// Remove deletes key's state, if any.
func (t *BucketTable) Remove(key string) {
	if ref, ok := t.index.Find(key, t.keyOf); ok {
		t.delete(ref)
	}
}

// delete removes the slot ref from the order, the index and its slice.
func (t *BucketTable) delete(ref uint32) {
	t.order.remove(t, t.posOf(ref))
	t.index.Remove(t.keyOf(ref), ref)
	t.free(ref)
}

// Sweep deletes expired states, smallest (expiry, key) first, looking at up
// to limit entries. An entry whose recorded expiry has passed is checked
// again under its policy's current definition (policyOf): if that keeps it
// alive longer, its expiry moves instead. States of deleted policies go.
func (t *BucketTable) Sweep(now int64, limit int, policyOf func(bucketKey string) (admission.Policy, bool)) {
	for i := 0; i < limit && t.order.len() > 0; i++ {
		ref := t.order.min()
		if t.expOf(ref) > now {
			return
		}
		if p, ok := policyOf(t.keyOf(ref)); ok {
			st := t.stateOf(ref)
			if at := admission.ExpiresAt(p, st); at > now {
				t.rewrite(ref, st, at)
				continue
			}
		}
		t.delete(ref)
	}
}

// NextExpiry is the smallest recorded expiry, and false when empty.
func (t *BucketTable) NextExpiry() (int64, bool) {
	if t.order.len() == 0 {
		return 0, false
	}
	return t.expOf(t.order.min()), true
}

// Entries copies every state, unsorted (Persist sorts). Slices inside
// states are shared, not copied: states are values that their algorithms
// never modify in place.
func (t *BucketTable) Entries() []BucketRecord {
	out := make([]BucketRecord, 0, t.Len())
	for i := range t.gcra {
		e := &t.gcra[i]
		out = append(out, BucketRecord{Key: e.key, State: admission.State{Kind: admission.KindTokenBucket, TAT: e.tat}, ExpiresAt: e.tat})
	}
	for i := range t.counter {
		ref := uint32(i)<<2 | shapeCounter
		out = append(out, BucketRecord{Key: t.counter[i].key, State: t.stateOf(ref), ExpiresAt: t.counter[i].exp})
	}
	for i := range t.log {
		e := &t.log[i]
		out = append(out, BucketRecord{Key: e.key, State: admission.State{Kind: e.kind, Log: e.log}, ExpiresAt: e.exp})
	}
	for i := range t.other {
		e := &t.other[i]
		out = append(out, BucketRecord{Key: e.key, State: e.state, ExpiresAt: e.exp})
	}
	return out
}
