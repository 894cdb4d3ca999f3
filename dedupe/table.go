package dedupe

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"strings"
)

var (
	// ErrFull is returned by Put when the table holds MaxEntries unexpired
	// entries. Nothing is evicted: an entry is only ever removed once its
	// retention has passed.
	ErrFull = errors.New("dedupe: table full")
	// ErrExists is returned by Put for a key that already has an unexpired
	// entry; callers look up first.
	ErrExists = errors.New("dedupe: entry exists")
)

// Bounds on the parts of a Key, checked by the servers before a request
// reaches the log.
const (
	MaxCallerBytes    = 128
	MaxRequestIDBytes = 128
)

// NoSlot is Entry.Slot when the entry's slot is unknown.
const NoSlot = 0xFFFF

// Key identifies a request: the caller's namespace and its request ID.
type Key struct {
	Caller    string
	RequestID string
}

func (k Key) compare(o Key) int {
	if c := strings.Compare(k.Caller, o.Caller); c != 0 {
		return c
	}
	return strings.Compare(k.RequestID, o.RequestID)
}

// Entry is a recorded request: what it asked (Fingerprint), what it was
// answered (Result, opaque to this package) and until when a repeat gets that
// answer (ExpiresAt, Unix nanoseconds of logged time).
type Entry struct {
	Key Key
	// Kind says which operation recorded the entry, for its owner to read
	// Result (the FSM: admit, lease, reserve, commit).
	Kind uint8
	// Slot is the shard slot of the key the request was for, so that the
	// entry can move with its slot to another group; NoSlot when unknown.
	Slot        uint16
	Fingerprint [16]byte
	Result      []byte
	ExpiresAt   int64
}

// entryOverhead is the estimated fixed memory of one entry beyond its
// strings and result: the map slot, the entry struct and the heap slot. It
// was measured with runtime.MemStats (see TestMemoryPerEntry).
const entryOverhead = 160

// size is the estimated memory of e, counted against nothing but reported by
// Bytes.
func (e *Entry) size() int64 {
	// The map key and the entry share the key's string bytes.
	return entryOverhead + int64(len(e.Key.Caller)+len(e.Key.RequestID)+len(e.Result))
}

// Table is the request-ID table of one Raft group. It is deterministic: for
// the same sequence of calls it holds the same entries and returns the same
// results on every replica, and sweeps expired entries in one total order,
// (ExpiresAt, Caller, RequestID). It is not safe for concurrent use; the FSM
// serializes access.
type Table struct {
	maxEntries int
	byKey      map[Key]*item
	order      expiryHeap
	bytes      int64
}

type item struct {
	Entry
	pos int
}

// New returns an empty table that holds at most maxEntries unexpired
// entries (maxEntries ≥ 1).
func New(maxEntries int) *Table {
	return &Table{maxEntries: max(1, maxEntries), byKey: make(map[Key]*item)}
}

// Get returns the entry for k if it has not expired at now. An expired entry
// is treated as absent, whether or not it has been swept yet.
func (t *Table) Get(k Key, now int64) (Entry, bool) {
	it, ok := t.byKey[k]
	if !ok || it.ExpiresAt <= now {
		return Entry{}, false
	}
	return it.Entry, true
}

// Put records e. An expired entry under the same key is replaced. When the
// table is full, Put first reclaims expired entries to make room, then fails
// with ErrFull if it is still full of unexpired ones.
func (t *Table) Put(e Entry, now int64) error {
	if old, ok := t.byKey[e.Key]; ok {
		if old.ExpiresAt > now {
			return fmt.Errorf("%w: %q/%q", ErrExists, e.Key.Caller, e.Key.RequestID)
		}
		t.remove(old)
	}
	if excess := len(t.byKey) - t.maxEntries; excess >= 0 {
		// Expired entries are absent: make room from them first (more than
		// one when a restore left the table above its bound).
		t.Sweep(now, excess+1)
	}
	if len(t.byKey) >= t.maxEntries {
		return fmt.Errorf("%w (%d unexpired entries)", ErrFull, t.maxEntries)
	}
	it := &item{Entry: e}
	t.byKey[e.Key] = it
	heap.Push(&t.order, it)
	t.bytes += it.size()
	return nil
}

// Sweep removes up to limit entries whose ExpiresAt ≤ now, smallest
// (ExpiresAt, Caller, RequestID) first, and returns how many it removed.
func (t *Table) Sweep(now int64, limit int) int {
	n := 0
	for n < limit && len(t.order) > 0 && t.order[0].ExpiresAt <= now {
		t.remove(t.order[0])
		n++
	}
	return n
}

func (t *Table) remove(it *item) {
	heap.Remove(&t.order, it.pos)
	delete(t.byKey, it.Key)
	t.bytes -= it.size()
}

// NextExpiry returns the earliest ExpiresAt in the table, and false when it
// is empty.
func (t *Table) NextExpiry() (int64, bool) {
	if len(t.order) == 0 {
		return 0, false
	}
	return t.order[0].ExpiresAt, true
}

// Len is the number of entries held, expired but not yet swept ones
// included.
func (t *Table) Len() int { return len(t.byKey) }

// Bytes is the estimated memory held by the entries.
func (t *Table) Bytes() int64 { return t.bytes }

// MaxEntries is the table's bound.
func (t *Table) MaxEntries() int { return t.maxEntries }

// Entries returns a copy of every entry (Result shared, not copied),
// unsorted.
func (t *Table) Entries() []Entry {
	out := make([]Entry, 0, len(t.byKey))
	for _, it := range t.byKey {
		out = append(out, it.Entry)
	}
	return out
}

// Compare orders entries by key, as snapshots list them.
func Compare(a, b Entry) int { return a.Key.compare(b.Key) }

type expiryHeap []*item

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, j int) bool {
	if h[i].ExpiresAt != h[j].ExpiresAt {
		return h[i].ExpiresAt < h[j].ExpiresAt
	}
	return h[i].Key.compare(h[j].Key) < 0
}
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos = i
	h[j].pos = j
}
func (h *expiryHeap) Push(x any) {
	it := x.(*item)
	it.pos = len(*h)
	*h = append(*h, it)
}
func (h *expiryHeap) Pop() any {
	old := *h
	n := len(old)
	it := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	it.pos = -1
	return it
}

// Restore puts e back as a snapshot recorded it, replacing any entry with
// its key. It does not check the bound: restoring never loses an entry, even
// into a table with a smaller MaxEntries (Put then refuses new entries until
// enough have expired).
func (t *Table) Restore(e Entry) {
	if old, ok := t.byKey[e.Key]; ok {
		t.remove(old)
	}
	it := &item{Entry: e}
	t.byKey[e.Key] = it
	heap.Push(&t.order, it)
	t.bytes += it.size()
}

// Update replaces the recorded result of the unexpired entry under k (a
// refund marks the record it gave units back for) and reports whether there
// was one. Its expiry and fingerprint stay.
func (t *Table) Update(k Key, result []byte) bool {
	it, ok := t.byKey[k]
	if !ok {
		return false
	}
	t.bytes += int64(len(result) - len(it.Result))
	it.Result = result
	return true
}

// DeleteFunc removes every entry del accepts, expired or not, and returns
// how many it removed. What remains does not depend on the order of the
// calls to del.
func (t *Table) DeleteFunc(del func(*Entry) bool) int {
	var doomed []*item
	for _, it := range t.byKey {
		if del(&it.Entry) {
			doomed = append(doomed, it)
		}
	}
	// Removed in key order, so the heap's layout is the same on every
	// replica too.
	slices.SortFunc(doomed, func(a, b *item) int { return a.Key.compare(b.Key) })
	for _, it := range doomed {
		t.remove(it)
	}
	return len(doomed)
}

// Has reports whether an entry (expired or not) is held under k.
func (t *Table) Has(k Key) bool {
	_, ok := t.byKey[k]
	return ok
}

// Lookup returns the entry held under k, expired (not yet swept) or not.
func (t *Table) Lookup(k Key) (Entry, bool) {
	it, ok := t.byKey[k]
	if !ok {
		return Entry{}, false
	}
	return it.Entry, true
}

// EachKey calls fn with the key and slot of every entry held, expired or
// not, in no particular order.
func (t *Table) EachKey(fn func(k Key, slot uint16)) {
	for k, it := range t.byKey {
		fn(k, it.Slot)
	}
}
