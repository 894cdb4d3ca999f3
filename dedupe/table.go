package dedupe

import (
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"

	"github.com/quorate/quorate/refindex"
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
// request ID and result: its slot in the slab, its index cell and its place
// in the expiry order, with the spare capacity those keep on average, and
// the rounding of its one allocation. It was measured with runtime.MemStats
// (see TestMemoryPerEntry).
const entryOverhead = 105

// size is the estimated memory of an entry with these parts, counted
// against nothing but reported by Bytes. The caller's name counts in full,
// although the FSM shares one copy of each among its entries: the estimate
// errs on the high side.
func size(caller, requestID, result int) int64 {
	return entryOverhead + int64(caller+requestID+result)
}

// Table is the request-ID table of one Raft group. It is deterministic: for
// the same sequence of calls it holds the same entries and returns the same
// results on every replica, and sweeps expired entries in one total order,
// (ExpiresAt, Caller, RequestID). It is not safe for concurrent use; the FSM
// serializes access.
//
// Entries live by value in a slab (see slot): one allocation per entry,
// holding its request ID, kind, slot and result together, and no pointer
// but the caller's name and that allocation. An index (refindex) maps keys
// to slab positions without storing them. The index, the slab and the
// expiry order all shrink when a quarter full or less (a Go map never
// would), so the memory follows the live entries after a mass expiry.
type Table struct {
	maxEntries int
	idx        refindex.Index[Key]
	slots      []slot
	order      []uint32 // min-heap of slot positions by (ExpiresAt, Key)
	bytes      int64
}

// New returns an empty table that holds at most maxEntries unexpired
// entries (maxEntries ≥ 1).
func New(maxEntries int) *Table {
	return &Table{maxEntries: max(1, maxEntries), idx: refindex.New(hashKey)}
}

// hashKey hashes a key for the index; the zero byte keeps any two (caller,
// request ID) pairs from hashing the same bytes. Client-chosen request IDs
// cannot be crafted to collide: the index's seed is random.
func hashKey(seed maphash.Seed, k Key) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(k.Caller)
	h.WriteByte(0)
	h.WriteString(k.RequestID)
	return h.Sum64()
}

// find returns the slab position of k's entry.
func (t *Table) find(k Key) (uint32, bool) { return t.idx.Find(k, t.keyAt) }

// keyAt is the key of the entry at slab position i.
func (t *Table) keyAt(i uint32) Key { return t.slots[i].key() }

// Get returns the entry for k if it has not expired at now. An expired entry
// is treated as absent, whether or not it has been swept yet. Its Result is
// a copy.
func (t *Table) Get(k Key, now int64) (Entry, bool) {
	i, ok := t.find(k)
	if !ok || t.slots[i].exp <= now {
		return Entry{}, false
	}
	return t.slots[i].entry(), true
}

// Put records e. An expired entry under the same key is replaced. When the
// table is full, Put first reclaims expired entries to make room, then fails
// with ErrFull if it is still full of unexpired ones. The table keeps a
// copy of e.Key.RequestID and e.Result, and e.Key.Caller itself.
func (t *Table) Put(e Entry, now int64) error {
	if i, ok := t.find(e.Key); ok {
		if t.slots[i].exp > now {
			return fmt.Errorf("%w: %q/%q", ErrExists, e.Key.Caller, e.Key.RequestID)
		}
		t.remove(i)
	}
	if excess := len(t.slots) - t.maxEntries; excess >= 0 {
		// Expired entries are absent: make room from them first (more than
		// one when a restore left the table above its bound).
		t.Sweep(now, excess+1)
	}
	if len(t.slots) >= t.maxEntries {
		return fmt.Errorf("%w (%d unexpired entries)", ErrFull, t.maxEntries)
	}
	t.add(e)
	return nil
}

// add stores e, whose key is absent.
func (t *Table) add(e Entry) {
	s := newSlot(e)
	i := uint32(len(t.slots))
	t.slots = append(t.slots, s)
	t.idx.Insert(s.key(), i)
	t.push(i)
	t.bytes += size(len(e.Key.Caller), len(e.Key.RequestID), len(e.Result))
}

// Sweep removes up to limit entries whose ExpiresAt ≤ now, smallest
// (ExpiresAt, Caller, RequestID) first, and returns how many it removed.
func (t *Table) Sweep(now int64, limit int) int {
	n := 0
	for n < limit && len(t.order) > 0 && t.slots[t.order[0]].exp <= now {
		t.remove(t.order[0])
		n++
	}
	return n
}

// remove deletes the entry at slab position i: out of the order and the
// index, and the slab's last slot moves into its place.
func (t *Table) remove(i uint32) {
	s := &t.slots[i]
	t.bytes -= size(len(s.caller), s.ridLen(), s.resultLen())
	t.orderRemove(int(s.pos))
	t.idx.Remove(s.key(), i)
	last := uint32(len(t.slots) - 1)
	if i != last {
		t.slots[i] = t.slots[last]
		t.idx.Replace(t.slots[i].key(), last, i)
		t.order[t.slots[i].pos] = i
	}
	t.slots[last] = slot{}
	t.slots = shrink(t.slots[:last])
}

// minShrink is the capacity below which arrays are kept as they are: small
// ones cost little, and copying them often would cost more.
const minShrink = 1024

// shrink returns s in a new array of twice its length when it fills at
// most a quarter of its capacity (and the capacity is worth freeing).
func shrink[S any](s []S) []S {
	if c := cap(s); c > minShrink && len(s) <= c/4 {
		return append(make([]S, 0, 2*len(s)), s...)
	}
	return s
}

// NextExpiry returns the earliest ExpiresAt in the table, and false when it
// is empty.
func (t *Table) NextExpiry() (int64, bool) {
	if len(t.order) == 0 {
		return 0, false
	}
	return t.slots[t.order[0]].exp, true
}

// Len is the number of entries held, expired but not yet swept ones
// included.
func (t *Table) Len() int { return len(t.slots) }

// Bytes is the estimated memory held by the entries.
func (t *Table) Bytes() int64 { return t.bytes }

// MaxEntries is the table's bound.
func (t *Table) MaxEntries() int { return t.maxEntries }

// Frozen is a table's entries as they were when it was frozen.
type Frozen struct {
	slots []slot
}

// Freeze captures every entry at the cost of one copy of the table's slab:
// an entry's strings are never changed in place (Update gives its slot a
// new one), so the copy shares them. A snapshot freezes the table while
// applies wait, and makes the entries later, off the apply path.
func (t *Table) Freeze() Frozen { return Frozen{slots: slices.Clone(t.slots)} }

// Len is how many entries f holds.
func (f Frozen) Len() int { return len(f.slots) }

// Entries returns a copy of every entry of f (results copied too),
// unsorted.
func (f Frozen) Entries() []Entry {
	out := make([]Entry, 0, len(f.slots))
	for i := range f.slots {
		out = append(out, f.slots[i].entry())
	}
	return out
}

// Compare orders entries by key, as snapshots list them.
func Compare(a, b Entry) int { return a.Key.compare(b.Key) }

// Restore puts e back as a snapshot recorded it, replacing any entry with
// its key. It does not check the bound: restoring never loses an entry, even
// into a table with a smaller MaxEntries (Put then refuses new entries until
// enough have expired).
func (t *Table) Restore(e Entry) {
	if i, ok := t.find(e.Key); ok {
		t.remove(i)
	}
	t.add(e)
}

// Update replaces the recorded result of the unexpired entry under k (a
// refund marks the record it gave units back for) and reports whether there
// was one. Its expiry and fingerprint stay.
func (t *Table) Update(k Key, result []byte) bool {
	i, ok := t.find(k)
	if !ok {
		return false
	}
	s := &t.slots[i]
	t.bytes += int64(len(result) - s.resultLen())
	e := s.entry()
	e.Result = result
	pos := s.pos
	*s = newSlot(e)
	s.pos = pos
	return true
}

// DeleteFunc removes every entry del accepts, expired or not, and returns
// how many it removed. What remains does not depend on the order of the
// calls to del.
func (t *Table) DeleteFunc(del func(*Entry) bool) int {
	var doomed []Key
	for i := range t.slots {
		e := t.slots[i].entry()
		if del(&e) {
			doomed = append(doomed, t.slots[i].key())
		}
	}
	// Removed in key order, so the order's layout is the same on every
	// replica too.
	slices.SortFunc(doomed, Key.compare)
	for _, k := range doomed {
		i, _ := t.find(k)
		t.remove(i)
	}
	return len(doomed)
}

// Has reports whether an entry (expired or not) is held under k.
func (t *Table) Has(k Key) bool {
	_, ok := t.find(k)
	return ok
}

// Lookup returns the entry held under k, expired (not yet swept) or not.
func (t *Table) Lookup(k Key) (Entry, bool) {
	i, ok := t.find(k)
	if !ok {
		return Entry{}, false
	}
	return t.slots[i].entry(), true
}

// EachKey calls fn with the key and slot of every entry held, expired or
// not, in no particular order.
func (t *Table) EachKey(fn func(k Key, slot uint16)) {
	for i := range t.slots {
		fn(t.slots[i].key(), t.slots[i].slot())
	}
}
