package fsm

import (
	"container/heap"
	"strings"

	"github.com/quorate/quorate/admission"
)

// stateTable holds the live state of each (policy, key) — a "bucket" of a
// rate algorithm (V = admission.State) or a semaphore of leases (V =
// lease.Semaphore) — and an index ordered by (expiry, key), so expired
// states are reclaimed in a deterministic order. Each entry keeps the expiry
// computed when it was last written; since a policy may change afterwards,
// sweep checks the expiry again (expires) under the current policy before
// deleting. It is not safe for concurrent use; FSM's lock guards it.
type stateTable[V any] struct {
	byKey   map[string]*bucketEntry[V]
	order   expiryHeap[V]
	expires func(admission.Policy, V) int64
	// onExpire, if set, runs for each entry sweep deletes, before it goes.
	onExpire func(key string, v V, now int64)
}

// bucketTable is the table of rate-algorithm states.
type bucketTable = stateTable[admission.State]

type bucketEntry[V any] struct {
	key       string
	state     V
	expiresAt int64
	pos       int // index in order
}

func newBucketTable() *bucketTable {
	return newStateTable(admission.ExpiresAt)
}

func newStateTable[V any](expires func(admission.Policy, V) int64) *stateTable[V] {
	return &stateTable[V]{byKey: make(map[string]*bucketEntry[V]), expires: expires}
}

func (t *stateTable[V]) len() int { return len(t.byKey) }

func (t *stateTable[V]) get(key string) (V, bool) {
	e, ok := t.byKey[key]
	if !ok {
		var zero V
		return zero, false
	}
	return e.state, true
}

func (t *stateTable[V]) put(key string, s V, expiresAt int64) {
	if e, ok := t.byKey[key]; ok {
		e.state, e.expiresAt = s, expiresAt
		heap.Fix(&t.order, e.pos)
		return
	}
	e := &bucketEntry[V]{key: key, state: s, expiresAt: expiresAt}
	t.byKey[key] = e
	heap.Push(&t.order, e)
}

// sweep deletes expired states, smallest (expiry, key) first, looking at up
// to limit entries. An entry whose recorded expiry has passed is checked
// again under its policy's current definition (policyOf): if that keeps it
// alive longer, its expiry moves instead. States of deleted policies go.
func (t *stateTable[V]) sweep(now int64, limit int, policyOf func(bucketKey string) (admission.Policy, bool)) {
	for i := 0; i < limit && len(t.order) > 0; i++ {
		e := t.order[0]
		if e.expiresAt > now {
			return
		}
		if p, ok := policyOf(e.key); ok {
			if at := t.expires(p, e.state); at > now {
				e.expiresAt = at
				heap.Fix(&t.order, 0)
				continue
			}
		}
		if t.onExpire != nil {
			t.onExpire(e.key, e.state, now)
		}
		heap.Pop(&t.order)
		delete(t.byKey, e.key)
	}
}

// remove deletes key's entry, if any.
func (t *stateTable[V]) remove(key string) {
	if e, ok := t.byKey[key]; ok {
		heap.Remove(&t.order, e.pos)
		delete(t.byKey, key)
	}
}

// nextExpiry is the smallest recorded expiry, and false when empty.
func (t *stateTable[V]) nextExpiry() (int64, bool) {
	if len(t.order) == 0 {
		return 0, false
	}
	return t.order[0].expiresAt, true
}

type stateRecord[V any] struct {
	key       string
	state     V
	expiresAt int64
}

type bucketRecord = stateRecord[admission.State]

// entries copies every state, unsorted (Persist sorts). Slices inside
// states are shared, not copied: states are values that their algorithms
// never modify in place.
func (t *stateTable[V]) entries() []stateRecord[V] {
	out := make([]stateRecord[V], 0, len(t.byKey))
	for _, e := range t.byKey {
		out = append(out, stateRecord[V]{key: e.key, state: e.state, expiresAt: e.expiresAt})
	}
	return out
}

// each calls fn for every entry, in no particular order; fn may change the
// state and its expiry (the index is repaired afterwards).
func (t *stateTable[V]) each(fn func(key string, s V, expiresAt int64) (V, int64)) {
	for _, e := range t.byKey {
		e.state, e.expiresAt = fn(e.key, e.state, e.expiresAt)
	}
	heap.Init(&t.order)
}

// expiryHeap is a min-heap of entries by (expiry, key): a total order, so
// the minimum is the same on every replica with the same entries.
type expiryHeap[V any] []*bucketEntry[V]

func (h expiryHeap[V]) Len() int { return len(h) }
func (h expiryHeap[V]) Less(i, j int) bool {
	if h[i].expiresAt != h[j].expiresAt {
		return h[i].expiresAt < h[j].expiresAt
	}
	return strings.Compare(h[i].key, h[j].key) < 0
}
func (h expiryHeap[V]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos = i
	h[j].pos = j
}
func (h *expiryHeap[V]) Push(x any) {
	e := x.(*bucketEntry[V])
	e.pos = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap[V]) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	e.pos = -1
	return e
}
