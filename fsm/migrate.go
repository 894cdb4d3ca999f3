package fsm

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	"github.com/quorate/quorate/lease"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// MaxClockSkew is how far ahead of the time its leader stamps an entry a
// command may move a group's time: only an import does (its source's time
// becomes the target's), and a chunk further ahead is refused rather than
// clamped — a clamped time would let the target issue fencing tokens below
// the source's. A slot move between groups whose clocks disagree by more
// rolls back, with an error that names the skew.
const MaxClockSkew = time.Minute

// importState is a target group's record of one migration into it.
type importState struct {
	r        shard.SlotRange
	attempt  uint64
	nextSeq  uint32
	complete bool
	dropped  bool
	records  uint64
}

// slotSet is a set of slots.
type slotSet [shard.SlotCount / 64]uint64

func (s *slotSet) add(r shard.SlotRange) {
	for x := r.Start; x < r.End; x++ {
		s[x/64] |= 1 << (x % 64)
	}
}

func (s *slotSet) has(x shard.Slot) bool { return x < shard.SlotCount && s[x/64]&(1<<(x%64)) != 0 }

func (s *slotSet) empty() bool { return *s == slotSet{} }

// owns reports whether the group owns every slot of r.
func (o *ownership) owns(r shard.SlotRange) bool {
	for x := r.Start; x < r.End; {
		a, ok := o.lookup(x)
		if !ok {
			return false
		}
		x = a.Range.End
	}
	return true
}

// ownsAny reports whether the group owns some slot of r.
func (o *ownership) ownsAny(r shard.SlotRange) bool {
	for _, a := range o.ranges {
		if a.Range.Start < r.End && r.Start < a.Range.End {
			return true
		}
	}
	return false
}

// frozenAt returns the migration freezing slot s, if any.
func (d *dataState) frozenAt(s shard.Slot) (uint64, bool) {
	for m, r := range d.frozen {
		if r.Contains(s) {
			return m, true
		}
	}
	return 0, false
}

func rangeOf(start, end uint32) (shard.SlotRange, error) {
	r := shard.SlotRange{Start: 1, End: 0}
	if start <= shard.SlotCount && end <= shard.SlotCount {
		r = shard.SlotRange{Start: shard.Slot(start), End: shard.Slot(end)}
	}
	if err := r.Validate(); err != nil {
		return r, &admission.FieldError{Field: "start", Reason: fmt.Sprintf("[%d,%d) is not a valid slot range", start, end), Err: admission.ErrInvalidRequest}
	}
	return r, nil
}

func (d *dataState) applyFreeze(c *raftcmdv1.FreezeSlots) interface{} {
	r, err := rangeOf(c.GetStart(), c.GetEnd())
	if err != nil {
		return err
	}
	if old, ok := d.frozen[c.GetMigration()]; ok {
		if old == r {
			return nil
		}
		return fmt.Errorf("%w: migration %d already froze %v", ErrImportRefused, c.GetMigration(), old)
	}
	if d.owned == nil || !d.owned.owns(r) {
		return fmt.Errorf("%w: cannot freeze %v, not all owned here", ErrNotOwnedYet, r)
	}
	d.frozen[c.GetMigration()] = r
	return nil
}

// importChunk is an ImportSlots chunk acceptImport let through.
type importChunk struct {
	st      *importState
	r       shard.SlotRange
	entries []dedupe.Entry // decoded request-ID entries
}

// applyImport applies an ImportSlots chunk: the data part accepts it, the
// group's time moves to its source's, and the data part stores its state.
func (f *FSM) applyImport(c *raftcmdv1.ImportSlots, stamp int64) interface{} {
	ch, err := f.data.acceptImport(c, stamp)
	if err != nil {
		return err
	}
	if ch == nil {
		return nil // a chunk applied already (a retried proposal)
	}
	// Time: the group's time becomes at least the source's, so tokens
	// issued here stay above the source's. Leases keep the time they have
	// left, on either side.
	src := c.GetSourceNowUnixNano()
	if src > f.lastNow {
		f.data.shiftLeases(src - f.lastNow)
		f.lastNow = src
	}
	var shift int64 // how far the target's time is ahead of the source's
	if src > 0 {
		shift = f.lastNow - src
	}
	f.data.storeImport(ch, c, shift)
	return nil
}

// acceptImport decides whether an ImportSlots chunk applies: it refuses
// one whose source time is too far ahead, one the group cannot take yet
// or any more, and one out of order (error, nothing changed), returns nil
// for one applied already, and else the chunk to store (the first chunk
// of an attempt has deleted what an older attempt left).
func (d *dataState) acceptImport(c *raftcmdv1.ImportSlots, stamp int64) (*importChunk, error) {
	r, err := rangeOf(c.GetStart(), c.GetEnd())
	if err != nil {
		return nil, err
	}
	if src := c.GetSourceNowUnixNano(); src > addSaturating(stamp, int64(MaxClockSkew)) {
		return nil, &admission.FieldError{Field: "source_now_unix_nano", Err: ErrClockSkew, Reason: fmt.Sprintf(
			"clock skew: migration %d's source time %s is %v ahead of this group's leader (at most %v)",
			c.GetMigration(), time.Unix(0, src).UTC().Format(time.RFC3339Nano), time.Duration(src-stamp), MaxClockSkew)}
	}
	if d.owned == nil || d.owned.mapEpoch < c.GetMapEpoch() {
		return nil, fmt.Errorf("%w: import of migration %d wants epoch %d", ErrNotOwnedYet, c.GetMigration(), c.GetMapEpoch())
	}
	if d.owned.ownsAny(r) {
		return nil, fmt.Errorf("%w: group %d owns slots of %v", ErrImportRefused, d.owned.group, r)
	}
	// Decoded first: a chunk refused for a bad record changes nothing.
	entries := make([]dedupe.Entry, 0, len(c.GetState().GetDedupe()))
	for _, rec := range c.GetState().GetDedupe() {
		e, err := dedupeFromRecord(rec)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	st := d.imports[c.GetMigration()]
	switch {
	case st != nil && st.r != r:
		// A migration's range never changes (plans are immutable): only a
		// hostile peer sends another, so refusing it changes no decision
		// of a log written by Quorate.
		return nil, fmt.Errorf("%w: migration %d imports %v, not %v", ErrImportRefused, c.GetMigration(), st.r, r)
	case st != nil && st.dropped:
		return nil, fmt.Errorf("%w: migration %d was dropped", ErrImportRefused, c.GetMigration())
	case st != nil && c.GetAttempt() < st.attempt:
		return nil, fmt.Errorf("%w: attempt %d of migration %d is older than %d", ErrImportRefused, c.GetAttempt(), c.GetMigration(), st.attempt)
	case st != nil && c.GetAttempt() == st.attempt && c.GetSeq() < st.nextSeq:
		return nil, nil // a chunk applied already (a retried proposal)
	case (st == nil || c.GetAttempt() > st.attempt) && c.GetSeq() == 0:
		var set slotSet
		set.add(r)
		d.deleteSlots(&set) // what an older attempt left
		st = &importState{r: r, attempt: c.GetAttempt()}
		d.imports[c.GetMigration()] = st
	case st != nil && c.GetAttempt() == st.attempt && c.GetSeq() == st.nextSeq && !st.complete && st.r == r:
	default:
		return nil, fmt.Errorf("%w: chunk %d of attempt %d of migration %d out of order", ErrImportRefused, c.GetSeq(), c.GetAttempt(), c.GetMigration())
	}
	return &importChunk{st: st, r: r, entries: entries}, nil
}

// storeImport stores an accepted chunk's state, whose times are shift
// behind the group's (0: the source sent no time).
func (d *dataState) storeImport(ch *importChunk, c *raftcmdv1.ImportSlots, shift int64) {
	st, s := ch.st, c.GetState()
	d.storeState(s, ch.entries, shift, ch.r.Contains)
	st.records += uint64(len(s.GetBuckets()) + len(s.GetSemaphores()) + len(s.GetReservations()) + len(s.GetDedupe()))
	st.nextSeq++
	st.complete = c.GetLast()
}

// storeState stores the records of s (with entries, its decoded request-ID
// entries) whose slot keep accepts, their times shift behind the group's:
// leases, reservations and request-ID retention keep the time they had
// left. Request-ID entries without a slot are stored too; one the group
// has already is kept.
func (d *dataState) storeState(s *raftcmdv1.SlotState, entries []dedupe.Entry, shift int64, keep func(shard.Slot) bool) {
	for _, rec := range s.GetBuckets() {
		b := bucketFromRecord(rec)
		if keep(stateKeySlot(b.Key)) {
			d.buckets.Put(b.Key, b.State, b.ExpiresAt)
		}
	}
	for _, rec := range s.GetSemaphores() {
		sr := semFromRecord(rec)
		if keep(stateKeySlot(sr.Key)) {
			sem := lease.Shift(sr.State, shift)
			d.sems.Put(sr.Key, sem, max(sr.ExpiresAt, lease.ExpiresAt(sem)))
		}
	}
	for _, rec := range s.GetReservations() {
		rr := reservationFromRecord(rec)
		if keep(shard.SlotOf(rr.State.key)) {
			rr.State.expiresAt = addSaturating(rr.State.expiresAt, shift)
			d.reservations.Put(rr.Key, rr.State, rr.State.expiresAt)
		}
	}
	for _, e := range entries {
		if (e.Slot == dedupe.NoSlot || keep(shard.Slot(e.Slot))) && !d.dedupe.Has(e.Key) {
			e.Key.Caller = d.callers.intern(e.Key.Caller)
			e.ExpiresAt = addSaturating(e.ExpiresAt, shift) // the retention it had left
			d.dedupe.Restore(e)
		}
	}
}

// applyUnfreeze forgets a migration's freeze: its slots serve again.
func (d *dataState) applyUnfreeze(c *raftcmdv1.UnfreezeSlots) interface{} {
	delete(d.frozen, c.GetMigration())
	return nil
}

func (d *dataState) applyDropImport(c *raftcmdv1.DropImport) interface{} {
	r, err := rangeOf(c.GetStart(), c.GetEnd())
	if err != nil {
		return err
	}
	if d.owned != nil && d.owned.ownsAny(r) {
		return fmt.Errorf("%w: group %d owns slots of %v: the migration completed", ErrImportRefused, d.owned.group, r)
	}
	st := d.imports[c.GetMigration()]
	if st != nil && st.r != r {
		// As in applyImport: only a hostile peer names another range.
		return fmt.Errorf("%w: migration %d imports %v, not %v", ErrImportRefused, c.GetMigration(), st.r, r)
	}
	if st == nil {
		st = &importState{r: r}
		d.imports[c.GetMigration()] = st
	}
	if !st.dropped {
		var set slotSet
		set.add(r)
		d.deleteSlots(&set)
		st.dropped = true
	}
	return nil
}

// ownershipChanged runs after SetOwnership replaced old (nil: none) by
// d.owned: the state of slots the group no longer owns goes, and freezes
// and finished imports that no longer matter are forgotten.
func (d *dataState) ownershipChanged(old *ownership) {
	var lost slotSet
	if old != nil {
		for _, a := range old.ranges {
			for x := a.Range.Start; x < a.Range.End; x++ {
				if _, ok := d.owned.lookup(x); !ok {
					lost[x/64] |= 1 << (x % 64)
				}
			}
		}
	}
	if !lost.empty() {
		d.deleteSlots(&lost)
	}
	for m, r := range d.frozen {
		if !d.owned.owns(r) {
			delete(d.frozen, m)
		}
	}
	for m, st := range d.imports {
		if st.complete && d.owned.owns(st.r) {
			delete(d.imports, m)
		}
	}
}

// deleteSlots deletes every state of the slots in set (grants too). Request-ID entries
// of unknown slot stay.
func (d *dataState) deleteSlots(set *slotSet) {
	var keys []string
	for _, b := range d.buckets.Entries() {
		if set.has(stateKeySlot(b.Key)) {
			keys = append(keys, b.Key)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		d.buckets.Remove(k)
	}
	keys = keys[:0]
	for _, s := range d.sems.Entries() {
		if set.has(stateKeySlot(s.Key)) {
			keys = append(keys, s.Key)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		d.sems.Remove(k)
	}
	keys = keys[:0]
	for _, r := range d.reservations.Entries() {
		if set.has(shard.SlotOf(r.State.key)) {
			keys = append(keys, r.Key)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		d.reservations.Remove(k)
	}
	// Grants do not move with their slots: the units they hold stay spent
	// in the moved bucket, and count as waste here.
	for _, g := range d.grants.deleteSlots(set) {
		d.wasteGrant(g)
	}
	d.dedupe.DeleteFunc(func(e *dedupe.Entry) bool { return e.Slot != dedupe.NoSlot && set.has(shard.Slot(e.Slot)) })
}

func dedupeFromRecord(d *raftcmdv1.DedupeRecord) (dedupe.Entry, error) {
	if len(d.GetFingerprint()) != 16 {
		return dedupe.Entry{}, fmt.Errorf("%w: dedupe record with a %d-byte fingerprint", ErrBadSnapshot, len(d.GetFingerprint()))
	}
	slot := uint16(dedupe.NoSlot)
	if s := d.GetSlotPlusOne(); s > 0 && s <= shard.SlotCount {
		slot = uint16(s - 1)
	}
	return dedupe.Entry{
		Key:         dedupe.Key{Caller: d.GetCaller(), RequestID: d.GetRequestId()},
		Kind:        uint8(d.GetKind()),
		Slot:        slot,
		Fingerprint: [16]byte(d.GetFingerprint()),
		Result:      d.GetResult(),
		ExpiresAt:   d.GetExpiresAtUnixNano(),
	}, nil
}

// migrateSnapshot is the migration state in stored form, sorted.
func (d *dataState) migrateSnapshot() (frozen []*raftcmdv1.FreezeSlots, imports []*raftcmdv1.ImportProgress) {
	for m, r := range d.frozen {
		frozen = append(frozen, &raftcmdv1.FreezeSlots{Migration: m, Start: uint32(r.Start), End: uint32(r.End)})
	}
	slices.SortFunc(frozen, func(a, b *raftcmdv1.FreezeSlots) int { return cmp.Compare(a.GetMigration(), b.GetMigration()) })
	for m, st := range d.imports {
		imports = append(imports, &raftcmdv1.ImportProgress{Migration: m, Attempt: st.attempt, Start: uint32(st.r.Start), End: uint32(st.r.End),
			NextSeq: st.nextSeq, Complete: st.complete, Dropped: st.dropped, Records: st.records})
	}
	slices.SortFunc(imports, func(a, b *raftcmdv1.ImportProgress) int { return cmp.Compare(a.GetMigration(), b.GetMigration()) })
	return frozen, imports
}

// restoreMigrate installs a snapshot's migration state in d.
func (d *dataState) restoreMigrate(frozen []*raftcmdv1.FreezeSlots, imports []*raftcmdv1.ImportProgress) {
	d.frozen, d.imports = map[uint64]shard.SlotRange{}, map[uint64]*importState{}
	for _, fr := range frozen {
		d.frozen[fr.GetMigration()] = shard.SlotRange{Start: shard.Slot(fr.GetStart()), End: shard.Slot(fr.GetEnd())}
	}
	for _, im := range imports {
		d.imports[im.GetMigration()] = &importState{r: shard.SlotRange{Start: shard.Slot(im.GetStart()), End: shard.Slot(im.GetEnd())},
			attempt: im.GetAttempt(), nextSeq: im.GetNextSeq(), complete: im.GetComplete(), dropped: im.GetDropped(), records: im.GetRecords()}
	}
}
