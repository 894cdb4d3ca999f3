package fsm

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/dedupe"
	"github.com/quorate/quorate/lease"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// The source side of a slot migration: pages of the frozen slots' state,
// read from any replica of the source group (not through its log).

// ExportPage is one page of a migration's state.
type ExportPage struct {
	State     *raftcmdv1.SlotState
	Records   int
	Next      []byte // cursor of the next page
	Done      bool
	SourceNow int64
}

// The tables of an export, in the order pages walk them. Reservations go
// with their buckets.
const (
	exportBuckets byte = iota
	exportSems
	exportDedupe
	exportTables
)

// ExportSlots reads the state of migration's frozen slots r after cursor
// (nil: from the start), up to about maxBytes of records: buckets with the
// reservations that hold units of them, then semaphores and request-ID
// entries (those of unknown slot too), each table in key order. The frozen
// slots change only by expiry, so pages read one after the other, from any
// replica that applied the freeze, add up to the state at some point after
// it: the only expiry that changes another record, a reservation giving its
// units back to its bucket, reads both on one page (records of one key are
// never split between pages).
func (f *FSM) ExportSlots(migration uint64, r shard.SlotRange, cursor []byte, maxBytes int) (ExportPage, error) {
	idx, err := f.exportIndexOf(migration, r)
	if err != nil {
		return ExportPage{}, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if fr, ok := f.data.frozen[migration]; !ok || fr != r {
		return ExportPage{}, fmt.Errorf("%w: migration %d, slots %v", ErrNotFrozen, migration, r)
	}
	table, after := exportBuckets, ""
	if len(cursor) > 0 {
		table, after = cursor[0], string(cursor[1:])
	}
	page := ExportPage{State: &raftcmdv1.SlotState{}, SourceNow: f.lastNow}
	size := 0
	for ; table < exportTables; table, after = table+1, "" {
		refs := idx.tables[table]
		first := sort.Search(len(refs), func(i int) bool { return refs[i].key > after })
		for i := first; i < len(refs); i++ {
			ref := &refs[i]
			if size >= maxBytes && page.Records > 0 && (i == first || ref.key != refs[i-1].key) {
				page.Next = []byte{table} // from the table's start
				if i > first {
					page.Next = append(page.Next, refs[i-1].key...)
				}
				return page, nil
			}
			msg, ok := f.data.exportRecord(ref)
			if !ok {
				continue // expired and reclaimed since the index was built
			}
			size += proto.Size(msg)
			page.Records++
			switch m := msg.(type) {
			case *raftcmdv1.BucketRecord:
				page.State.Buckets = append(page.State.Buckets, m)
			case *raftcmdv1.SemaphoreRecord:
				page.State.Semaphores = append(page.State.Semaphores, m)
			case *raftcmdv1.ReservationRecord:
				page.State.Reservations = append(page.State.Reservations, m)
			case *raftcmdv1.DedupeRecord:
				page.State.Dedupe = append(page.State.Dedupe, m)
			}
		}
	}
	page.Done = true
	return page, nil
}

// exportIndex is the sorted list of what a migration exports: built once,
// on its first page (frozen slots get no new state), and read again, record
// by record, on each page.
type exportIndex struct {
	migration uint64
	r         shard.SlotRange
	tables    [exportTables][]exportRef
}

// exportRef names one record of an export.
type exportRef struct {
	key  string // the cursor key
	sub  string // orders records of one key
	kind byte   // refBucket, refReservation, refSem, refDedupe
	id   string // the record's key in its table
	dk   dedupe.Key
}

const (
	refBucket byte = iota
	refReservation
	refSem
	refDedupe
)

// exportIndexOf returns migration's export index, building it when this
// replica has none: the keys in r are gathered under the read lock, sorted
// after it (a large group's Applies wait only for the gathering).
// exportMu guards the cache, which decides nothing: it only remembers which
// keys to read.
func (f *FSM) exportIndexOf(migration uint64, r shard.SlotRange) (*exportIndex, error) {
	f.data.exportMu.Lock()
	defer f.data.exportMu.Unlock()
	if x := f.data.exportCache; x != nil && x.migration == migration && x.r == r {
		return x, nil
	}
	x := &exportIndex{migration: migration, r: r}
	f.mu.RLock()
	if fr, ok := f.data.frozen[migration]; !ok || fr != r {
		f.mu.RUnlock()
		return nil, fmt.Errorf("%w: migration %d, slots %v", ErrNotFrozen, migration, r)
	}
	f.data.buckets.EachKey(func(key string) {
		if r.Contains(stateKeySlot(key)) {
			x.tables[exportBuckets] = append(x.tables[exportBuckets], exportRef{key: key, kind: refBucket, id: key})
		}
	})
	f.data.reservations.Range(func(id string, v reservation) {
		if r.Contains(shard.SlotOf(v.key)) {
			x.tables[exportBuckets] = append(x.tables[exportBuckets],
				exportRef{key: BucketKey(v.policy, v.key), sub: id, kind: refReservation, id: id})
		}
	})
	f.data.sems.Range(func(key string, _ lease.Semaphore) {
		if r.Contains(stateKeySlot(key)) {
			x.tables[exportSems] = append(x.tables[exportSems], exportRef{key: key, kind: refSem, id: key})
		}
	})
	f.data.dedupe.EachKey(func(k dedupe.Key, slot uint16) {
		if slot == dedupe.NoSlot || r.Contains(shard.Slot(slot)) {
			x.tables[exportDedupe] = append(x.tables[exportDedupe], exportRef{key: dedupeCursorKey(k), sub: k.Caller, kind: refDedupe, dk: k})
		}
	})
	f.mu.RUnlock()
	for t := range x.tables {
		slices.SortFunc(x.tables[t], func(a, b exportRef) int {
			if c := cmp.Compare(a.key, b.key); c != 0 {
				return c
			}
			return cmp.Compare(a.sub, b.sub)
		})
	}
	f.data.exportCache = x
	return x, nil
}

// exportRecord reads ref's record as it is now; false when it is gone.
func (d *dataState) exportRecord(ref *exportRef) (proto.Message, bool) {
	switch ref.kind {
	case refBucket:
		b, ok := d.buckets.Lookup(ref.id)
		if !ok {
			return nil, false
		}
		rec := new(raftcmdv1.BucketRecord)
		bucketToRecord(rec, b)
		return rec, true
	case refReservation:
		v, ok := d.reservations.Lookup(ref.id)
		if !ok {
			return nil, false
		}
		rec := new(raftcmdv1.ReservationRecord)
		reservationToRecord(rec, v)
		return rec, true
	case refSem:
		sm, ok := d.sems.Lookup(ref.id)
		if !ok {
			return nil, false
		}
		rec := new(raftcmdv1.SemaphoreRecord)
		semToRecord(rec, sm)
		return rec, true
	default:
		e, ok := d.dedupe.Lookup(ref.dk)
		if !ok {
			return nil, false
		}
		return dedupeToRecord(e), true
	}
}

// dedupeCursorKey orders request-ID entries as snapshots do (caller, then
// request ID). Two keys may share one (a NUL byte in a caller or request
// ID): pages never split them.
func dedupeCursorKey(k dedupe.Key) string { return k.Caller + "\x00" + k.RequestID }

func dedupeToRecord(e dedupe.Entry) *raftcmdv1.DedupeRecord {
	rec := &raftcmdv1.DedupeRecord{Caller: e.Key.Caller, RequestId: e.Key.RequestID, Fingerprint: bytes.Clone(e.Fingerprint[:]),
		Result: e.Result, ExpiresAtUnixNano: e.ExpiresAt, Kind: uint32(e.Kind)}
	if e.Slot != dedupe.NoSlot {
		rec.SlotPlusOne = uint32(e.Slot) + 1
	}
	return rec
}
