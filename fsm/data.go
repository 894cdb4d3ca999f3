package fsm

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/dedupe"
	"github.com/quorate/quorate/fsm/internal/table"
	"github.com/quorate/quorate/lease"
	"github.com/quorate/quorate/shard"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// dataState is the state a group holds for the keys it serves: the state
// tables (buckets, semaphores, reservations), the request-ID table, and
// for a data group its ownership of slots, the meta index of its copy of
// the policy table and its slot migrations. A data group holds it, and so
// does a single-group cluster's meta group, which serves every key.
//
// Its commands are its methods, deciding with the FSM's policy table
// (policies) at the time the FSM passes in an op: Admit, Peek, Refund
// (admit.go), Lease (leases.go), Reserve, Commit (reserve.go),
// SetOwnership and SetPolicies (route.go), FreezeSlots, UnfreezeSlots,
// ImportSlots (its part without the time) and DropImport (migrate.go).
// Its part of a snapshot is dataSnapshot.
type dataState struct {
	policies *policyTable // the FSM's
	// maxStates bounds the buckets and, apart, the semaphores
	// (Options.MaxBuckets); maxDedupe the request-ID entries.
	maxStates, maxDedupe int

	buckets *table.BucketTable
	sems    *table.StateTable[lease.Semaphore]
	// reservations are keyed by reservation ID.
	reservations *table.StateTable[reservation]
	// grants are the budget leases (grant.go), by grant ID.
	grants  *grantTable
	dedupe  *dedupe.Table
	callers callerNames // one copy of each caller's name for dedupe
	// An Admit's record is built in recordScratch and encoded into
	// recordBuf before the dedupe table copies it.
	recordScratch recordScratch
	recordBuf     []byte

	// owned is a data group's owned slots (nil: it applies every data
	// command if it is the meta group, none if it is a data group);
	// policiesMetaIndex the meta index of its policy table.
	owned             *ownership
	policiesMetaIndex uint64

	// Slot migrations: slots frozen by migrations out of the group, and
	// its record of migrations into it (migrate.go).
	frozen  map[uint64]shard.SlotRange
	imports map[uint64]*importState

	// exportCache is the index of the last migration this replica
	// exported (migrate.go): not replicated state, guarded by exportMu.
	exportMu    sync.Mutex
	exportCache *exportIndex

	// wastedUnits counts the units of grants that ended without a release
	// (GrantStats): not replicated state, it decides nothing.
	wastedUnits int64
	// syncOvershoot counts the units local-plus-global holders reported
	// admitting beyond what their key had left when charged (SyncStats):
	// not replicated state, it decides nothing.
	syncOvershoot int64
}

// init makes d empty, with the bounds of opts (already defaulted).
func (d *dataState) init(policies *policyTable, opts Options) {
	d.policies, d.maxStates, d.maxDedupe = policies, opts.MaxBuckets, opts.MaxDedupeEntries
	d.install(d.empty())
}

// empty returns an empty set of d's replicated state, built apart from d.
func (d *dataState) empty() *dataState {
	return &dataState{
		buckets:      table.NewBucketTable(),
		sems:         table.NewStateTable(semExpires),
		reservations: d.newReservationTable(),
		grants:       newGrantTable(d.expireGrant),
		dedupe:       dedupe.New(d.maxDedupe),
		callers:      callerNames{},
		frozen:       map[uint64]shard.SlotRange{},
		imports:      map[uint64]*importState{},
	}
}

// install replaces d's replicated state by n's (the FSM's lock held, or d
// not shared yet). The export cache and the waste count stay: they decide
// nothing.
func (d *dataState) install(n *dataState) {
	d.buckets, d.sems, d.reservations, d.dedupe, d.callers = n.buckets, n.sems, n.reservations, n.dedupe, n.callers
	d.grants = n.grants
	d.owned, d.policiesMetaIndex = n.owned, n.policiesMetaIndex
	d.frozen, d.imports = n.frozen, n.imports
}

// newReservationTable returns an empty reservation table whose sweep gives
// an expired reservation's units back to d's buckets.
func (d *dataState) newReservationTable() *table.StateTable[reservation] {
	t := table.NewStateTable(reservationExpires)
	t.OnExpire = d.expireReservation
	return t
}

// sweep deletes up to limit expired states from each table, in the order
// of their (expiry, key): reservations first, so that their units are back
// before any decision, then grants (which give nothing back), buckets,
// semaphores and request-ID entries.
func (d *dataState) sweep(now int64, limit int) {
	d.reservations.Sweep(now, limit, noPolicy)
	d.grants.sweep(now, limit)
	d.buckets.Sweep(now, limit, d.policies.ofStateKey)
	d.sems.Sweep(now, limit, d.policies.ofStateKey)
	d.dedupe.Sweep(now, limit)
}

// stateKeySlot is the slot of a state key ("policy/key") of a bucket or a
// semaphore.
func stateKeySlot(stateKey string) shard.Slot {
	_, key, _ := strings.Cut(stateKey, "/")
	return shard.SlotOf(key)
}

// dataSnapshot is dataState's part of a snapshot: the header's ownership,
// policies_meta_index, frozen and imports, and the records of buckets,
// request-ID entries, semaphores and reservations, which follow the
// nodes' in that order.
type dataSnapshot struct {
	buckets  []table.BucketRecord
	sems     []table.Record[lease.Semaphore]
	reserved []table.Record[reservation]
	grants   []table.Record[grant]
	dedupe   []dedupe.Entry
	// dedupeFrozen is the request-ID table as snapshot captured it;
	// sort makes dedupe of it, off the apply path.
	dedupeFrozen      dedupe.Frozen
	ownership         *raftcmdv1.SetOwnership
	policiesMetaIndex uint64
	frozen            []*raftcmdv1.FreezeSlots
	imports           []*raftcmdv1.ImportProgress
}

// snapshot copies d's part of a snapshot, unsorted (the FSM's lock held).
func (d *dataState) snapshot() dataSnapshot {
	s := dataSnapshot{
		buckets:           d.buckets.Entries(),
		sems:              d.sems.Entries(),
		reserved:          d.reservations.Entries(),
		grants:            d.grants.entries(),
		dedupeFrozen:      d.dedupe.Freeze(),
		ownership:         ownershipToProto(d.owned),
		policiesMetaIndex: d.policiesMetaIndex,
	}
	s.frozen, s.imports = d.migrateSnapshot()
	return s
}

// sort orders each table's records as they are written: by key, and
// request-ID entries by caller, then request ID (made first of the frozen
// table).
func (s *dataSnapshot) sort() {
	if s.dedupeFrozen.Len() > 0 {
		s.dedupe, s.dedupeFrozen = s.dedupeFrozen.Entries(), dedupe.Frozen{}
	}
	slices.SortFunc(s.buckets, func(a, b table.BucketRecord) int { return cmp.Compare(a.Key, b.Key) })
	slices.SortFunc(s.dedupe, dedupe.Compare)
	slices.SortFunc(s.sems, func(a, b table.Record[lease.Semaphore]) int { return cmp.Compare(a.Key, b.Key) })
	slices.SortFunc(s.reserved, func(a, b table.Record[reservation]) int { return cmp.Compare(a.Key, b.Key) })
	sortGrants(s.grants)
}

// header fills the header fields of the data part.
func (s *dataSnapshot) header(h *raftcmdv1.SnapshotHeader) {
	h.BucketCount, h.DedupeCount = uint64(len(s.buckets)), uint64(len(s.dedupe))
	h.SemaphoreCount, h.ReservationCount = uint64(len(s.sems)), uint64(len(s.reserved))
	h.GrantCount = uint64(len(s.grants)) // 0, absent, when none
	h.Ownership, h.PoliciesMetaIndex = s.ownership, s.policiesMetaIndex
	h.Frozen, h.Imports = s.frozen, s.imports
}

// writeRecords writes the data part's records, sorted.
func (s *dataSnapshot) writeRecords(enc *recordWriter) {
	var rec raftcmdv1.BucketRecord
	for _, b := range s.buckets {
		bucketToRecord(&rec, b)
		enc.write(&rec)
	}
	var drec raftcmdv1.DedupeRecord
	for _, e := range s.dedupe {
		drec.Caller, drec.RequestId, drec.Fingerprint = e.Key.Caller, e.Key.RequestID, e.Fingerprint[:]
		drec.Result, drec.ExpiresAtUnixNano, drec.Kind = e.Result, e.ExpiresAt, uint32(e.Kind)
		drec.SlotPlusOne = 0
		if e.Slot != dedupe.NoSlot {
			drec.SlotPlusOne = uint32(e.Slot) + 1
		}
		enc.write(&drec)
	}
	var srec raftcmdv1.SemaphoreRecord
	for _, r := range s.sems {
		semToRecord(&srec, r)
		enc.write(&srec)
	}
	var rrec raftcmdv1.ReservationRecord
	for _, r := range s.reserved {
		reservationToRecord(&rrec, r)
		enc.write(&rrec)
	}
	var grec raftcmdv1.GrantRecord
	for _, r := range s.grants {
		grantToRecord(&grec, r.State)
		enc.write(&grec)
	}
}

// readDataSnapshot reads the data part of a snapshot: from its header, and
// the records of each table.
func readDataSnapshot(h *raftcmdv1.SnapshotHeader, dec *recordReader) (dataSnapshot, error) {
	s := dataSnapshot{ownership: h.GetOwnership(), policiesMetaIndex: h.GetPoliciesMetaIndex(),
		frozen: h.GetFrozen(), imports: h.GetImports()}
	var rec raftcmdv1.BucketRecord
	for range h.GetBucketCount() {
		if err := dec.read(&rec); err != nil {
			return s, err
		}
		s.buckets = append(s.buckets, bucketFromRecord(&rec))
	}
	for range h.GetDedupeCount() {
		var d raftcmdv1.DedupeRecord
		if err := dec.read(&d); err != nil {
			return s, err
		}
		e, err := dedupeFromRecord(&d)
		if err != nil {
			return s, err
		}
		if err := proto.Unmarshal(d.GetResult(), &raftcmdv1.AdmitRecord{}); err != nil {
			return s, fmt.Errorf("%w: dedupe record %q/%q: result: %v", ErrBadSnapshot, d.GetCaller(), d.GetRequestId(), err)
		}
		s.dedupe = append(s.dedupe, e)
	}
	for range h.GetSemaphoreCount() {
		var r raftcmdv1.SemaphoreRecord
		if err := dec.read(&r); err != nil {
			return s, err
		}
		s.sems = append(s.sems, semFromRecord(&r))
	}
	for range h.GetReservationCount() {
		var r raftcmdv1.ReservationRecord
		if err := dec.read(&r); err != nil {
			return s, err
		}
		s.reserved = append(s.reserved, reservationFromRecord(&r))
	}
	for range h.GetGrantCount() {
		var r raftcmdv1.GrantRecord
		if err := dec.read(&r); err != nil {
			return s, err
		}
		id, g := grantFromRecord(&r)
		s.grants = append(s.grants, table.Record[grant]{Key: id, State: g, ExpiresAt: g.expiresAt})
	}
	return s, nil
}

// restored returns the replicated state of a snapshot's data part, built
// apart from d (outside the FSM's lock) for install. Request-ID entries
// are put at the snapshot's time and may exceed a smaller bound of this
// binary: they are all kept, never lost.
func (d *dataState) restored(s *dataSnapshot) *dataState {
	n := d.empty()
	for _, e := range s.buckets {
		n.buckets.Put(e.Key, e.State, e.ExpiresAt)
	}
	for _, e := range s.sems {
		n.sems.Put(e.Key, e.State, e.ExpiresAt)
	}
	for _, e := range s.reserved {
		n.reservations.Put(e.Key, e.State, e.ExpiresAt)
	}
	for _, e := range s.grants {
		n.grants.put(e.Key, e.State) // rebuilds the per-key aggregates
	}
	for _, e := range s.dedupe {
		e.Key.Caller = n.callers.intern(e.Key.Caller)
		n.dedupe.Restore(e)
	}
	n.owned, n.policiesMetaIndex = ownershipFromProto(s.ownership), s.policiesMetaIndex
	n.restoreMigrate(s.frozen, s.imports)
	return n
}
