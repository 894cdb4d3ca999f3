package fsm

import (
	"fmt"

	"github.com/quorate/quorate/admission"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// The meta group's shard map: which data group owns each slot, at which
// epoch (metaState.shardMap). Data groups do not hold it: their leaders
// write the part they own into their logs (SetOwnership, route.go).

func (m *metaState) applySetShardMap(c *raftcmdv1.SetShardMap) interface{} {
	var cur uint64
	if m.shardMap != nil {
		cur = m.shardMap.Epoch
	}
	if c.GetExpectEpoch() != cur {
		return fmt.Errorf("%w: expected epoch %d, the map is at %d", ErrMapConflict, c.GetExpectEpoch(), cur)
	}
	next := ShardMapFromProto(c.GetMap())
	if err := next.Validate(); err != nil {
		return &admission.FieldError{Field: "map", Reason: err.Error(), Err: admission.ErrInvalidRequest}
	}
	if next.Epoch <= cur {
		return &admission.FieldError{Field: "map.epoch",
			Reason: fmt.Sprintf("must be above the current epoch %d (got %d)", cur, next.Epoch), Err: admission.ErrInvalidRequest}
	}
	m.shardMap = &next
	return nil
}

// ShardMap returns the meta group's shard map, false when there is none.
func (f *FSM) ShardMap() (shard.Map, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.meta.shardMap == nil {
		return shard.Map{}, false
	}
	return f.meta.shardMap.Clone(), true
}

// ShardMapEpoch returns the meta group's shard-map epoch, false when there
// is no map (cheaper than ShardMap: nothing is copied).
func (f *FSM) ShardMapEpoch() (uint64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.meta.shardMap == nil {
		return 0, false
	}
	return f.meta.shardMap.Epoch, true
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
	if f.meta.shardMap == nil {
		return KeyRoute{}, false
	}
	g, slotEpoch, ok := f.meta.shardMap.Lookup(shard.SlotOf(key))
	if !ok {
		return KeyRoute{}, false
	}
	grp, _ := f.meta.shardMap.Group(g)
	return KeyRoute{Group: g, SlotEpoch: slotEpoch, MapEpoch: f.meta.shardMap.Epoch, Replicas: grp.Replicas}, true
}
