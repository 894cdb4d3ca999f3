package fsm

import (
	"container/heap"
	"strings"

	"github.com/quorate/quorate/admission"
)

// bucketTable holds the live token buckets of a group and an index ordered by
// (expiry, key), so expired buckets are reclaimed in a deterministic order.
// It is not safe for concurrent use; FSM's lock guards it.
type bucketTable struct {
	byKey map[string]*bucketEntry
	order expiryHeap
}

type bucketEntry struct {
	key    string
	bucket admission.Bucket
	pos    int // index in order
}

func newBucketTable() *bucketTable {
	return &bucketTable{byKey: make(map[string]*bucketEntry)}
}

func (t *bucketTable) len() int { return len(t.byKey) }

func (t *bucketTable) get(key string) (admission.Bucket, bool) {
	e, ok := t.byKey[key]
	if !ok {
		return admission.Bucket{}, false
	}
	return e.bucket, true
}

func (t *bucketTable) put(key string, b admission.Bucket) {
	if e, ok := t.byKey[key]; ok {
		e.bucket = b
		heap.Fix(&t.order, e.pos)
		return
	}
	e := &bucketEntry{key: key, bucket: b}
	t.byKey[key] = e
	heap.Push(&t.order, e)
}

// sweep deletes up to limit buckets that expire at or before now, smallest
// (expiry, key) first.
func (t *bucketTable) sweep(now int64, limit int) {
	for i := 0; i < limit && len(t.order) > 0; i++ {
		e := t.order[0]
		if e.bucket.ExpiresAt() > now {
			return
		}
		heap.Pop(&t.order)
		delete(t.byKey, e.key)
	}
}

type bucketRecord struct {
	key string
	tat int64
}

// entries copies every bucket, unsorted (Persist sorts).
func (t *bucketTable) entries() []bucketRecord {
	out := make([]bucketRecord, 0, len(t.byKey))
	for _, e := range t.byKey {
		out = append(out, bucketRecord{key: e.key, tat: e.bucket.TAT})
	}
	return out
}

// expiryHeap is a min-heap of entries by (expiry, key): a total order, so
// the minimum is the same on every replica with the same entries.
type expiryHeap []*bucketEntry

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, j int) bool {
	a, b := h[i].bucket.ExpiresAt(), h[j].bucket.ExpiresAt()
	if a != b {
		return a < b
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
