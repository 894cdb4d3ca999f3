package fsm

import (
	"errors"
	"fmt"
	"sort"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// RouteError says which slot a refused data command was for.
type RouteError struct {
	Slot       shard.Slot
	Group      shard.GroupID // this group
	Epoch      uint64        // the command's map epoch
	OwnerEpoch uint64        // the epoch at which the slot got its owner (ErrStaleEpoch)
	Err        error         // ErrWrongGroup or ErrStaleEpoch
}

func (e *RouteError) Error() string {
	if errors.Is(e.Err, ErrSlotMoving) {
		return fmt.Sprintf("%v: slot %d is leaving group %d (retry)", e.Err, e.Slot, e.Group)
	}
	if errors.Is(e.Err, ErrStaleEpoch) {
		return fmt.Sprintf("%v: slot %d moved to group %d at epoch %d, command routed at epoch %d", e.Err, e.Slot, e.Group, e.OwnerEpoch, e.Epoch)
	}
	return fmt.Sprintf("%v: slot %d is not owned by group %d (command routed at epoch %d)", e.Err, e.Slot, e.Group, e.Epoch)
}

func (e *RouteError) Unwrap() error { return e.Err }

// ownership is the slot ranges a data group owns.
type ownership struct {
	group    shard.GroupID
	mapEpoch uint64
	ranges   []shard.Assignment // sorted by Range.Start
}

// lookup returns the assignment holding s.
func (o *ownership) lookup(s shard.Slot) (shard.Assignment, bool) {
	i := sort.Search(len(o.ranges), func(i int) bool { return o.ranges[i].Range.End > s })
	if i < len(o.ranges) && o.ranges[i].Range.Contains(s) {
		return o.ranges[i], true
	}
	return shard.Assignment{}, false
}

// routeKey returns the key that decides a data command's slot, and false
// for commands that are not data commands (policies, nodes, maps, Expire).
// A Commit routes by the key inside its reservation ID.
func routeKey(env *raftcmdv1.Envelope) (string, bool) {
	switch b := env.GetBody().(type) {
	case *raftcmdv1.Envelope_Admit:
		return b.Admit.GetKey(), true
	case *raftcmdv1.Envelope_Peek:
		return b.Peek.GetKey(), true
	case *raftcmdv1.Envelope_Refund:
		return b.Refund.GetKey(), true
	case *raftcmdv1.Envelope_Lease:
		return b.Lease.GetKey(), true
	case *raftcmdv1.Envelope_Reserve:
		return b.Reserve.GetKey(), true
	case *raftcmdv1.Envelope_Grant:
		return b.Grant.GetKey(), true
	case *raftcmdv1.Envelope_Commit:
		return ReservationKey(b.Commit.GetReservationId()), true
	}
	return "", false
}

// checkRoute refuses a data command this group must not apply, and returns
// the slot of one it applies (dedupe.NoSlot for a command that is not a
// data command, or in a group without ownership). The meta group without
// ownership (a single-group cluster) applies everything; a data group
// applies nothing before its first SetOwnership (dataGroup:
// Options.DataGroup).
func (d *dataState) checkRoute(env *raftcmdv1.Envelope, dataGroup bool) (uint16, error) {
	if d.owned == nil && !dataGroup {
		return dedupe.NoSlot, nil
	}
	key, data := routeKey(env)
	if !data {
		return dedupe.NoSlot, nil
	}
	if d.owned == nil {
		return dedupe.NoSlot, &RouteError{Slot: shard.SlotOf(key), Epoch: env.GetMapEpoch(), Err: ErrWrongGroup}
	}
	slot := shard.SlotOf(key)
	a, ok := d.owned.lookup(slot)
	if !ok {
		return dedupe.NoSlot, &RouteError{Slot: slot, Group: d.owned.group, Epoch: env.GetMapEpoch(), Err: ErrWrongGroup}
	}
	if env.GetMapEpoch() < a.Epoch {
		return dedupe.NoSlot, &RouteError{Slot: slot, Group: d.owned.group, Epoch: env.GetMapEpoch(), OwnerEpoch: a.Epoch, Err: ErrStaleEpoch}
	}
	if len(d.frozen) > 0 {
		if _, frozen := d.frozenAt(slot); frozen {
			return dedupe.NoSlot, &RouteError{Slot: slot, Group: d.owned.group, Epoch: env.GetMapEpoch(), Err: ErrSlotMoving}
		}
	}
	return uint16(slot), nil
}

func (d *dataState) applySetOwnership(c *raftcmdv1.SetOwnership) interface{} {
	if d.owned != nil && c.GetMapEpoch() <= d.owned.mapEpoch {
		return nil // an older or repeated update
	}
	o := &ownership{group: shard.GroupID(c.GetGroup()), mapEpoch: c.GetMapEpoch()}
	for i, r := range c.GetRanges() {
		a := assignmentFromProto(r)
		if err := a.Range.Validate(); err != nil || a.Group != o.group || a.Epoch > o.mapEpoch ||
			(i > 0 && a.Range.Start < o.ranges[i-1].Range.End) {
			return &admission.FieldError{Field: fmt.Sprintf("ranges[%d]", i),
				Reason: fmt.Sprintf("%s of group %d at epoch %d is not a sorted, valid range of group %d at or before epoch %d",
					a.Range, a.Group, a.Epoch, o.group, o.mapEpoch), Err: admission.ErrInvalidRequest}
		}
		o.ranges = append(o.ranges, a)
	}
	old := d.owned
	d.owned = o
	d.ownershipChanged(old)
	return nil
}

func (d *dataState) applySetPolicies(c *raftcmdv1.SetPolicies) interface{} {
	if c.GetMetaIndex() <= d.policiesMetaIndex && d.policiesMetaIndex != 0 {
		return nil // an older or repeated table
	}
	next := make(map[string]PolicyVersion, len(c.GetPolicies()))
	for i, r := range c.GetPolicies() {
		p := PolicyFromProto(r.GetPolicy())
		if err := p.Validate(); err != nil {
			return fmt.Errorf("policies[%d]: %w", i, err)
		}
		next[p.Name] = PolicyVersion{Policy: p.WithDefaults(), Version: r.GetVersion()}
	}
	d.policies.byName = next
	d.policiesMetaIndex = c.GetMetaIndex()
	return nil
}

// Ownership returns the data group's owned ranges and the map epoch they
// are as of; ok is false before the first SetOwnership.
func (f *FSM) Ownership() (group shard.GroupID, mapEpoch uint64, ranges []shard.Assignment, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.data.owned == nil {
		return 0, 0, nil, false
	}
	return f.data.owned.group, f.data.owned.mapEpoch, append([]shard.Assignment(nil), f.data.owned.ranges...), true
}

// PoliciesMetaIndex is the meta index of the last SetPolicies applied.
func (f *FSM) PoliciesMetaIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.data.policiesMetaIndex
}

// AssignmentToProto converts a slot assignment to its stored form.
func AssignmentToProto(a shard.Assignment) *raftcmdv1.SlotAssignment {
	return &raftcmdv1.SlotAssignment{Start: uint32(a.Range.Start), End: uint32(a.Range.End), Group: uint32(a.Group), Epoch: a.Epoch}
}

// assignmentFromProto converts a stored assignment; bounds past SlotCount
// (which would wrap in a Slot) become the invalid range [1, 0), so that
// validation refuses them.
func assignmentFromProto(p *raftcmdv1.SlotAssignment) shard.Assignment {
	r := shard.SlotRange{Start: 1, End: 0}
	if p.GetStart() <= shard.SlotCount && p.GetEnd() <= shard.SlotCount {
		r = shard.SlotRange{Start: shard.Slot(p.GetStart()), End: shard.Slot(p.GetEnd())}
	}
	return shard.Assignment{Range: r, Group: shard.GroupID(p.GetGroup()), Epoch: p.GetEpoch()}
}

func ownershipToProto(o *ownership) *raftcmdv1.SetOwnership {
	if o == nil {
		return nil
	}
	out := &raftcmdv1.SetOwnership{Group: uint32(o.group), MapEpoch: o.mapEpoch}
	for _, a := range o.ranges {
		out.Ranges = append(out.Ranges, AssignmentToProto(a))
	}
	return out
}

// ownershipFromProto converts the stored form of a data group's ownership
// (nil: none).
func ownershipFromProto(o *raftcmdv1.SetOwnership) *ownership {
	if o == nil {
		return nil
	}
	out := &ownership{group: shard.GroupID(o.GetGroup()), mapEpoch: o.GetMapEpoch()}
	for _, a := range o.GetRanges() {
		out.ranges = append(out.ranges, assignmentFromProto(a))
	}
	return out
}
