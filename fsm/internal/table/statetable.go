package table

import (
	"fmt"
	"hash/maphash"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/refindex"
)

// StateTable holds the live state of each state key — a semaphore of
// leases (V = lease.Semaphore) by (policy, key), or a reservation by its ID
// — and an order by (expiry, key), so expired states are reclaimed in a
// deterministic order. Each slot keeps the expiry computed when it was last
// written; since a policy may change afterwards, Sweep checks the expiry
// again (expires) under the current policy before deleting.
//
// The slots sit in one dense slice (a deleted slot's place is taken by the
// last one), found by a refindex.Index and ordered by an expiryOrder, both of
// uint32 refs (a slot's position): no allocation per state, and about half
// the memory of a map of pointers to entries. It is not safe for concurrent
// use; the FSM's lock guards it.
type StateTable[V any] struct {
	slots   []slot[V]
	index   refindex.Index[string]
	order   expiryOrder
	expires func(admission.Policy, V) int64
	// OnExpire, if set, runs for each entry Sweep deletes, before it goes.
	OnExpire func(key string, v V, now int64)
}

// slot is one key's state, its recorded expiry and its position in the
// expiry order.
type slot[V any] struct {
	key   string
	state V
	exp   int64
	pos   int32
}

// MaxEntries bounds the states of one table (a StateTable or a
// BucketTable), so that refs (a slot's index times four plus its shape, in
// a BucketTable) and heap positions fit their 32-bit fields; fsm.New caps
// Options.MaxBuckets at it.
const MaxEntries = 1<<30 - 1

// NewStateTable returns an empty table whose states expire under a policy
// as expires says.
func NewStateTable[V any](expires func(admission.Policy, V) int64) *StateTable[V] {
	return &StateTable[V]{index: refindex.New(maphash.String), expires: expires}
}

// Len is the number of states held.
func (t *StateTable[V]) Len() int { return len(t.slots) }

// keyOf is the key of the slot ref.
func (t *StateTable[V]) keyOf(ref uint32) string { return t.slots[ref].key }

// before orders refs by (expiry, key) for the expiry order.
func (t *StateTable[V]) before(a, b uint32) bool {
	x, y := &t.slots[a], &t.slots[b]
	if x.exp != y.exp {
		return x.exp < y.exp
	}
	return x.key < y.key
}

// setPos records the position of the slot ref in the expiry order.
func (t *StateTable[V]) setPos(ref uint32, i int) { t.slots[ref].pos = int32(i) }

// Get returns key's state, and false when there is none.
func (t *StateTable[V]) Get(key string) (V, bool) {
	ref, ok := t.index.Find(key, t.keyOf)
	if !ok {
		var zero V
		return zero, false
	}
	return t.slots[ref].state, true
}

// Lookup returns key's state with its recorded expiry, false when none.
func (t *StateTable[V]) Lookup(key string) (Record[V], bool) {
	ref, ok := t.index.Find(key, t.keyOf)
	if !ok {
		return Record[V]{}, false
	}
	e := &t.slots[ref]
	return Record[V]{Key: e.key, State: e.state, ExpiresAt: e.exp}, true
}

// Has reports whether key has a state.
func (t *StateTable[V]) Has(key string) bool {
	_, ok := t.index.Find(key, t.keyOf)
	return ok
}

// Put stores key's state and its recorded expiry.
func (t *StateTable[V]) Put(key string, s V, expiresAt int64) {
	if ref, ok := t.index.Find(key, t.keyOf); ok {
		e := &t.slots[ref]
		e.state, e.exp = s, expiresAt
		t.order.fix(t, int(e.pos))
		return
	}
	if len(t.slots) >= MaxEntries {
		panic(fmt.Sprintf("fsm: more than %d states in one table", MaxEntries))
	}
	ref := uint32(len(t.slots))
	t.slots = append(t.slots, slot[V]{key: key, state: s, exp: expiresAt})
	t.index.Insert(key, ref)
	t.order.push(t, ref)
}

// Sweep deletes expired states, smallest (expiry, key) first, looking at up
// to limit entries. An entry whose recorded expiry has passed is checked
// again under its policy's current definition (policyOf): if that keeps it
// alive longer, its expiry moves instead. States of deleted policies go.
func (t *StateTable[V]) Sweep(now int64, limit int, policyOf func(stateKey string) (admission.Policy, bool)) {
	for i := 0; i < limit && t.order.len() > 0; i++ {
		ref := t.order.min()
		e := &t.slots[ref]
		if e.exp > now {
			return
		}
		if p, ok := policyOf(e.key); ok {
			if at := t.expires(p, e.state); at > now {
				e.exp = at
				t.order.fix(t, 0)
				continue
			}
		}
		if t.OnExpire != nil {
			t.OnExpire(e.key, e.state, now)
		}
		t.delete(ref)
	}
}

// Remove deletes key's entry, if any.
func (t *StateTable[V]) Remove(key string) {
	if ref, ok := t.index.Find(key, t.keyOf); ok {
		t.delete(ref)
	}
}

// delete removes the slot ref from the order and the index, and moves the
// last slot into its place. The slice shrinks when at most a quarter full.
func (t *StateTable[V]) delete(ref uint32) {
	e := &t.slots[ref]
	t.order.remove(t, int(e.pos))
	t.index.Remove(e.key, ref)
	last := uint32(len(t.slots) - 1)
	var moved bool
	if t.slots, moved = take(t.slots, int(ref)); moved {
		t.index.Replace(t.slots[ref].key, last, ref)
		t.order.set(t, int(t.slots[ref].pos), ref)
	}
}

// take removes s[i] by moving the last element into its place, and reports
// whether one moved. The slice shrinks when it is at most a quarter full.
func take[S any](s []S, i int) ([]S, bool) {
	last := len(s) - 1
	moved := i != last
	if moved {
		s[i] = s[last]
	}
	var zero S
	s[last] = zero
	s = s[:last]
	if c := cap(s); c > 1024 && len(s) <= c/4 {
		s = append(make([]S, 0, 2*len(s)), s...)
	}
	return s, moved
}

// NextExpiry is the smallest recorded expiry, and false when empty.
func (t *StateTable[V]) NextExpiry() (int64, bool) {
	if t.order.len() == 0 {
		return 0, false
	}
	return t.slots[t.order.min()].exp, true
}

// Record is a table's state of one key, copied for a snapshot.
type Record[V any] struct {
	Key       string
	State     V
	ExpiresAt int64
}

// Entries copies every state, unsorted (Persist sorts). Slices inside
// states are shared, not copied: states are values that their algorithms
// never modify in place.
func (t *StateTable[V]) Entries() []Record[V] {
	out := make([]Record[V], 0, len(t.slots))
	for i := range t.slots {
		e := &t.slots[i]
		out = append(out, Record[V]{Key: e.key, State: e.state, ExpiresAt: e.exp})
	}
	return out
}

// Range calls fn with every key and its state, in the order of the table's
// slots (which depends on history, not only on the keys held); fn must not
// change the table.
func (t *StateTable[V]) Range(fn func(key string, s V)) {
	for i := range t.slots {
		fn(t.slots[i].key, t.slots[i].state)
	}
}

// Each calls fn for every entry, in no particular order; fn may change the
// state and its expiry (the order is repaired afterwards).
func (t *StateTable[V]) Each(fn func(key string, s V, expiresAt int64) (V, int64)) {
	for i := range t.slots {
		e := &t.slots[i]
		e.state, e.exp = fn(e.key, e.state, e.exp)
	}
	t.order.init(t)
}
