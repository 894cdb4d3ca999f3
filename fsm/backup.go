package fsm

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// Backup is a group's key state as a backup (quorate admin snapshot save)
// holds it: copied under the FSM's lock at one applied index, then
// encoded outside it. Grants are not part of it (the units they hold stay
// spent in their buckets), nor are migrations in flight.
type Backup struct {
	// AppliedIndex is the index of the last entry the copy includes, Now
	// the group's log time then.
	AppliedIndex uint64
	Now          int64
	// Records are the buckets by key, request-ID entries by caller and
	// request ID, semaphores and reservations by key, as the snapshot
	// orders them.
	Records []proto.Message
}

// Backup copies the group's key state (see Backup): of the slots it owns
// (all in a group without ownership), so state imported by a slot move
// that has not flipped yet is saved once, by its source. A caller that
// wants every acknowledged command in it reads on the leader after a
// barrier.
func (f *FSM) Backup() *Backup {
	f.mu.RLock()
	s := f.data.snapshot()
	owned := f.data.owned // never changed once installed
	b := &Backup{AppliedIndex: f.appliedIndex, Now: f.lastNow}
	f.mu.RUnlock()
	s.sort()
	keep := func(slot shard.Slot) bool {
		if owned == nil {
			return true
		}
		_, ok := owned.lookup(slot)
		return ok
	}
	b.Records = make([]proto.Message, 0, len(s.buckets)+len(s.dedupe)+len(s.sems)+len(s.reserved))
	for _, r := range s.buckets {
		if !keep(stateKeySlot(r.Key)) {
			continue
		}
		rec := new(raftcmdv1.BucketRecord)
		bucketToRecord(rec, r)
		b.Records = append(b.Records, rec)
	}
	for _, e := range s.dedupe {
		if e.Slot != dedupe.NoSlot && !keep(shard.Slot(e.Slot)) {
			continue
		}
		b.Records = append(b.Records, dedupeToRecord(e))
	}
	for _, r := range s.sems {
		if !keep(stateKeySlot(r.Key)) {
			continue
		}
		rec := new(raftcmdv1.SemaphoreRecord)
		semToRecord(rec, r)
		b.Records = append(b.Records, rec)
	}
	for _, r := range s.reserved {
		if !keep(shard.SlotOf(r.State.key)) {
			continue
		}
		rec := new(raftcmdv1.ReservationRecord)
		reservationToRecord(rec, r)
		b.Records = append(b.Records, rec)
	}
	return b
}

// Page returns the records from offset on, about maxBytes of them (at
// least one while any is left), and the offset after them.
func (b *Backup) Page(offset, maxBytes int) (*raftcmdv1.SlotState, int) {
	s := new(raftcmdv1.SlotState)
	size := 0
	for ; offset < len(b.Records) && (size < maxBytes || size == 0); offset++ {
		rec := b.Records[offset]
		size += proto.Size(rec)
		appendRecord(s, rec)
	}
	return s, offset
}

func appendRecord(s *raftcmdv1.SlotState, rec proto.Message) {
	switch m := rec.(type) {
	case *raftcmdv1.BucketRecord:
		s.Buckets = append(s.Buckets, m)
	case *raftcmdv1.SemaphoreRecord:
		s.Semaphores = append(s.Semaphores, m)
	case *raftcmdv1.ReservationRecord:
		s.Reservations = append(s.Reservations, m)
	case *raftcmdv1.DedupeRecord:
		s.Dedupe = append(s.Dedupe, m)
	}
}

// SlotStateRecords is how many records s holds.
func SlotStateRecords(s *raftcmdv1.SlotState) int {
	return len(s.GetBuckets()) + len(s.GetSemaphores()) + len(s.GetReservations()) + len(s.GetDedupe())
}

// SplitByGroup splits a backup page by the group that owns each record's
// slot (owner); request-ID entries without a slot go to every group of
// all. A record whose slot no group owns is an error naming it.
func SplitByGroup(s *raftcmdv1.SlotState, all []shard.GroupID, owner func(shard.Slot) (shard.GroupID, bool)) (map[shard.GroupID]*raftcmdv1.SlotState, error) {
	out := make(map[shard.GroupID]*raftcmdv1.SlotState)
	put := func(slot shard.Slot, rec proto.Message, what string) error {
		g, ok := owner(slot)
		if !ok {
			return fmt.Errorf("%w: no group owns slot %d of %s", ErrNotOwnedYet, slot, what)
		}
		if out[g] == nil {
			out[g] = new(raftcmdv1.SlotState)
		}
		appendRecord(out[g], rec)
		return nil
	}
	for _, r := range s.GetBuckets() {
		if err := put(stateKeySlot(r.GetKey()), r, "bucket "+r.GetKey()); err != nil {
			return nil, err
		}
	}
	for _, r := range s.GetSemaphores() {
		if err := put(stateKeySlot(r.GetKey()), r, "semaphore "+r.GetKey()); err != nil {
			return nil, err
		}
	}
	for _, r := range s.GetReservations() {
		rr := reservationFromRecord(r)
		if err := put(shard.SlotOf(rr.State.key), r, "reservation "+rr.Key); err != nil {
			return nil, err
		}
	}
	for _, r := range s.GetDedupe() {
		if sp := r.GetSlotPlusOne(); sp > 0 && sp <= shard.SlotCount {
			if err := put(shard.Slot(sp-1), r, "request ID "+r.GetRequestId()); err != nil {
				return nil, err
			}
			continue
		}
		for _, g := range all {
			if out[g] == nil {
				out[g] = new(raftcmdv1.SlotState)
			}
			out[g].Dedupe = append(out[g].Dedupe, r)
		}
	}
	return out, nil
}

// applyRestore applies a RestoreSlots page: refused whole (nothing
// changed) when its time is too far ahead, when the group has not applied
// ownership at its map epoch, or when it names a slot the group does not
// own; else the group's time moves to at least the page's, and its records
// are stored as an import's are.
func (f *FSM) applyRestore(c *raftcmdv1.RestoreSlots, stamp int64) interface{} {
	d := &f.data
	src := c.GetSourceNowUnixNano()
	if src > addSaturating(stamp, int64(MaxClockSkew)) {
		return &admission.FieldError{Field: "source_now_unix_nano", Err: ErrClockSkew, Reason: fmt.Sprintf(
			"clock skew: the backup's time %s is %v ahead of this group's leader (at most %v)",
			time.Unix(0, src).UTC().Format(time.RFC3339Nano), time.Duration(src-stamp), MaxClockSkew)}
	}
	owns := func(shard.Slot) bool { return true } // a single-group cluster's meta group
	if d.owned != nil || f.opts.DataGroup {
		if d.owned == nil || d.owned.mapEpoch < c.GetMapEpoch() {
			return fmt.Errorf("%w: restore wants map epoch %d", ErrNotOwnedYet, c.GetMapEpoch())
		}
		owns = func(s shard.Slot) bool { _, ok := d.owned.lookup(s); return ok }
	}
	s := c.GetState()
	entries := make([]dedupe.Entry, 0, len(s.GetDedupe()))
	for _, rec := range s.GetDedupe() {
		e, err := dedupeFromRecord(rec)
		if err != nil {
			return err
		}
		if e.Slot != dedupe.NoSlot && !owns(shard.Slot(e.Slot)) {
			return fmt.Errorf("%w: restore names slot %d, not owned here", ErrNotOwnedYet, e.Slot)
		}
		entries = append(entries, e)
	}
	for _, slot := range recordSlots(s) {
		if !owns(slot) {
			return fmt.Errorf("%w: restore names slot %d, not owned here", ErrNotOwnedYet, slot)
		}
	}
	if src > f.lastNow {
		d.shiftLeases(src - f.lastNow)
		f.lastNow = src
	}
	var shift int64
	if src > 0 {
		shift = f.lastNow - src
	}
	d.storeState(s, entries, shift, func(shard.Slot) bool { return true })
	return nil
}

// recordSlots lists the slots of s's buckets, semaphores and reservations.
func recordSlots(s *raftcmdv1.SlotState) []shard.Slot {
	var out []shard.Slot
	for _, r := range s.GetBuckets() {
		out = append(out, stateKeySlot(r.GetKey()))
	}
	for _, r := range s.GetSemaphores() {
		out = append(out, stateKeySlot(r.GetKey()))
	}
	for _, r := range s.GetReservations() {
		out = append(out, shard.SlotOf(reservationFromRecord(r).State.key))
	}
	return out
}
