package fsm

import (
	"container/heap"
	"strings"

	"github.com/quorate/quorate/admission"
)

// bucketTable holds the live state of each (policy, key) — a "bucket",
// whatever the algorithm — and an index ordered by (expiry, key), so expired
// states are reclaimed in a deterministic order. Each entry keeps the expiry
// computed when it was last written; since a policy may change afterwards,
// sweep checks the expiry again under the current policy before deleting.
// It is not safe for concurrent use; FSM's lock guards it.
type bucketTable struct {
	byKey map[string]*bucketEntry
	order expiryHeap
}

type bucketEntry struct {
	key       string
	state     admission.State
	expiresAt int64
	pos       int // index in order
}

func newBucketTable() *bucketTable {
	return &bucketTable{byKey: make(map[string]*bucketEntry)}
}

func (t *bucketTable) len() int { return len(t.byKey) }

func (t *bucketTable) get(key string) (admission.State, bool) {
	e, ok := t.byKey[key]
	if !ok {
		return admission.State{}, false
	}
	return e.state, true
}

func (t *bucketTable) put(key string, s admission.State, expiresAt int64) {
	if e, ok := t.byKey[key]; ok {
		e.state, e.expiresAt = s, expiresAt
		heap.Fix(&t.order, e.pos)
		return
	}
	e := &bucketEntry{key: key, state: s, expiresAt: expiresAt}
	t.byKey[key] = e
	heap.Push(&t.order, e)
}

// sweep deletes expired states, smallest (expiry, key) first, looking at up
// to limit entries. An entry whose recorded expiry has passed is checked
// again under its policy's current definition (policyOf): if that keeps it
// alive longer, its expiry moves instead. States of deleted policies go.
func (t *bucketTable) sweep(now int64, limit int, policyOf func(bucketKey string) (admission.Policy, bool)) {
	for i := 0; i < limit && len(t.order) > 0; i++ {
		e := t.order[0]
		if e.expiresAt > now {
			return
		}
		if p, ok := policyOf(e.key); ok {
			if at := admission.ExpiresAt(p, e.state); at > now {
				e.expiresAt = at
				heap.Fix(&t.order, 0)
				continue
			}
		}
		heap.Pop(&t.order)
		delete(t.byKey, e.key)
	}
}

// nextExpiry is the smallest recorded expiry, and false when empty.
func (t *bucketTable) nextExpiry() (int64, bool) {
	if len(t.order) == 0 {
		return 0, false
	}
	return t.order[0].expiresAt, true
}

type bucketRecord struct {
	key       string
	state     admission.State
	expiresAt int64
}

// entries copies every state, unsorted (Persist sorts). Logs are shared, not
// copied: states are values that algorithms never modify in place.
func (t *bucketTable) entries() []bucketRecord {
	out := make([]bucketRecord, 0, len(t.byKey))
	for _, e := range t.byKey {
		out = append(out, bucketRecord{key: e.key, state: e.state, expiresAt: e.expiresAt})
	}
	return out
}

// expiryHeap is a min-heap of entries by (expiry, key): a total order, so
// the minimum is the same on every replica with the same entries.
type expiryHeap []*bucketEntry

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, j int) bool {
	if h[i].expiresAt != h[j].expiresAt {
		return h[i].expiresAt < h[j].expiresAt
	}
	return strings.Compare(h[i].key, h[j].key) < 0
}
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos = i
	h[j].pos = j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*bucketEntry)
	e.pos = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	e.pos = -1
	return e
}
