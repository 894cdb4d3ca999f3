package fsm

import (
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strings"

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
	case *raftcmdv1.Envelope_Commit:
		_, key, _ := parseReservationID(b.Commit.GetReservationId())
		return key, true
	}
	return "", false
}

// parseReservationID splits a ReservationID into policy and key.
func parseReservationID(id string) (policy, key string, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(id)
	parts := strings.Split(string(b), "\x00")
	if err != nil || len(parts) != 3 {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// checkRoute refuses a data command this group must not apply, and returns
// the slot of one it applies (dedupe.NoSlot for a command that is not a
// data command, or in a group without ownership). The meta group without
// ownership (a single-group cluster) applies everything; a data group
// applies nothing before its first SetOwnership.
func (f *FSM) checkRoute(env *raftcmdv1.Envelope) (uint16, error) {
	if f.owned == nil && !f.opts.DataGroup {
		return dedupe.NoSlot, nil
	}
	key, data := routeKey(env)
	if !data {
		return dedupe.NoSlot, nil
	}
	if f.owned == nil {
		return dedupe.NoSlot, &RouteError{Slot: shard.SlotOf(key), Epoch: env.GetMapEpoch(), Err: ErrWrongGroup}
	}
	slot := shard.SlotOf(key)
	a, ok := f.owned.lookup(slot)
	if !ok {
		return dedupe.NoSlot, &RouteError{Slot: slot, Group: f.owned.group, Epoch: env.GetMapEpoch(), Err: ErrWrongGroup}
	}
	if env.GetMapEpoch() < a.Epoch {
		return dedupe.NoSlot, &RouteError{Slot: slot, Group: f.owned.group, Epoch: env.GetMapEpoch(), OwnerEpoch: a.Epoch, Err: ErrStaleEpoch}
	}
	if len(f.frozen) > 0 {
		if _, frozen := f.frozenAt(slot); frozen {
			return dedupe.NoSlot, &RouteError{Slot: slot, Group: f.owned.group, Epoch: env.GetMapEpoch(), Err: ErrSlotMoving}
		}
	}
	return uint16(slot), nil
}

func (f *FSM) applySetShardMap(c *raftcmdv1.SetShardMap) interface{} {
	var cur uint64
	if f.shardMap != nil {
		cur = f.shardMap.Epoch
	}
	if c.GetExpectEpoch() != cur {
		return fmt.Errorf("%w: expected epoch %d, the map is at %d", ErrMapConflict, c.GetExpectEpoch(), cur)
	}
	m := ShardMapFromProto(c.GetMap())
	if err := m.Validate(); err != nil {
		return &admission.FieldError{Field: "map", Reason: err.Error(), Err: admission.ErrInvalidRequest}
	}
	if m.Epoch <= cur {
		return &admission.FieldError{Field: "map.epoch",
			Reason: fmt.Sprintf("must be above the current epoch %d (got %d)", cur, m.Epoch), Err: admission.ErrInvalidRequest}
	}
	f.shardMap = &m
	return nil
}

func (f *FSM) applySetOwnership(c *raftcmdv1.SetOwnership) interface{} {
	if f.owned != nil && c.GetMapEpoch() <= f.owned.mapEpoch {
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
	old := f.owned
	f.owned = o
	f.ownershipChanged(old)
	return nil
}

func (f *FSM) applySetPolicies(c *raftcmdv1.SetPolicies) interface{} {
	if c.GetMetaIndex() <= f.policiesMetaIndex && f.policiesMetaIndex != 0 {
		return nil // an older or repeated table
	}
	next := make(map[string]PolicyVersion, len(c.GetPolicies()))
	for i, r := range c.GetPolicies() {
		p := PolicyFromProto(r.GetPolicy())
		if err := p.Validate(); err != nil {
			return fmt.Errorf("fsm: policies[%d]: %w", i, err)
		}
		next[p.Name] = PolicyVersion{Policy: p.WithDefaults(), Version: r.GetVersion()}
	}
	f.policies = next
	f.policiesMetaIndex = c.GetMetaIndex()
	return nil
}

// ShardMap returns the meta group's shard map, false when there is none.
func (f *FSM) ShardMap() (shard.Map, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.shardMap == nil {
		return shard.Map{}, false
	}
	return f.shardMap.Clone(), true
}

// ShardMapEpoch returns the meta group's shard-map epoch, false when there
// is no map (cheaper than ShardMap: nothing is copied).
func (f *FSM) ShardMapEpoch() (uint64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.shardMap == nil {
		return 0, false
	}
	return f.shardMap.Epoch, true
}

// Ownership returns the data group's owned ranges and the map epoch they
// are as of; ok is false before the first SetOwnership.
func (f *FSM) Ownership() (group shard.GroupID, mapEpoch uint64, ranges []shard.Assignment, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.owned == nil {
		return 0, 0, nil, false
	}
	return f.owned.group, f.owned.mapEpoch, append([]shard.Assignment(nil), f.owned.ranges...), true
}

// PoliciesMetaIndex is the meta index of the last SetPolicies applied.
func (f *FSM) PoliciesMetaIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.policiesMetaIndex
}

// ShardMapToProto converts a shard map to its stored form.
func ShardMapToProto(m shard.Map) *raftcmdv1.ShardMap {
	out := &raftcmdv1.ShardMap{Epoch: m.Epoch, Cordoned: append([]string(nil), m.Cordoned...)}
	for _, g := range m.Groups {
		out.Groups = append(out.Groups, &raftcmdv1.ShardGroup{Id: uint32(g.ID), Replicas: append([]string(nil), g.Replicas...),
			Founders: append([]string(nil), g.Founders...), Forming: g.Forming})
	}
	for _, a := range m.Ranges {
		out.Ranges = append(out.Ranges, AssignmentToProto(a))
	}
	return out
}

// ShardMapFromProto converts the stored form of a shard map.
func ShardMapFromProto(p *raftcmdv1.ShardMap) shard.Map {
	m := shard.Map{Epoch: p.GetEpoch(), Cordoned: append([]string(nil), p.GetCordoned()...)}
	for _, g := range p.GetGroups() {
		m.Groups = append(m.Groups, shard.Group{ID: shard.GroupID(g.GetId()), Replicas: append([]string(nil), g.GetReplicas()...),
			Founders: append([]string(nil), g.GetFounders()...), Forming: g.GetForming()})
	}
	for _, a := range p.GetRanges() {
		m.Ranges = append(m.Ranges, assignmentFromProto(a))
	}
	return m
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

// routeState is the multi-group state in a snapshot, in stored form.
type routeState struct {
	shardMap          *raftcmdv1.ShardMap
	ownership         *raftcmdv1.SetOwnership
	policiesMetaIndex uint64
}

func (f *FSM) routeSnapshot() routeState {
	r := routeState{ownership: ownershipToProto(f.owned), policiesMetaIndex: f.policiesMetaIndex}
	if f.shardMap != nil {
		r.shardMap = ShardMapToProto(*f.shardMap)
	}
	return r
}

// restoreRoute installs a snapshot's multi-group state (f.mu held).
func (f *FSM) restoreRoute(r routeState) {
	f.shardMap, f.owned, f.policiesMetaIndex = nil, nil, r.policiesMetaIndex
	if r.shardMap != nil {
		m := ShardMapFromProto(r.shardMap)
		f.shardMap = &m
	}
	if o := r.ownership; o != nil {
		f.owned = &ownership{group: shard.GroupID(o.GetGroup()), mapEpoch: o.GetMapEpoch()}
		for _, a := range o.GetRanges() {
			f.owned.ranges = append(f.owned.ranges, assignmentFromProto(a))
		}
	}
}

// KeyRoute is where a key goes by the meta group's shard map.
type KeyRoute struct {
	Group shard.GroupID // the data group owning the key's slot
	// SlotEpoch is the map epoch at which the slot got that owner.
	SlotEpoch uint64
	// MapEpoch is the epoch of the map looked up.
	MapEpoch uint64
	// Replicas are the group's replicas, read-only: maps are replaced,
	// never changed in place.
	Replicas []string
}

// Route looks key up in the meta group's shard map. ok is false when there
// is no map.
func (f *FSM) Route(key string) (r KeyRoute, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.shardMap == nil {
		return KeyRoute{}, false
	}
	g, slotEpoch, ok := f.shardMap.Lookup(shard.SlotOf(key))
	if !ok {
		return KeyRoute{}, false
	}
	grp, _ := f.shardMap.Group(g)
	return KeyRoute{Group: g, SlotEpoch: slotEpoch, MapEpoch: f.shardMap.Epoch, Replicas: grp.Replicas}, true
}

// ReservationKey returns the key a reservation ID names ("" when id is not
// one), so that a Commit routes to the key's group.
func ReservationKey(id string) string {
	_, key, _ := parseReservationID(id)
	return key
}
