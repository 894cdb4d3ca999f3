package shard

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/quorate/quorate/admission"
)

// GroupID names a Raft group. MetaGroup (0) holds the shard map itself and
// owns no slots; data groups are 1..N.
type GroupID uint32

// MetaGroup is the reserved ID of the meta group.
const MetaGroup GroupID = 0

// Group is a data group and the nodes holding its replicas.
type Group struct {
	ID GroupID
	// Replicas are node IDs, distinct and non-empty. Replicas[0] is the
	// preferred leader: the node leadership is transferred to when it is up.
	Replicas []string
	// Founders are the replicas that bootstrap the group's Raft log when it
	// is created: each starts it with Founders as its first configuration.
	// A replica added later starts empty and is brought in by the group's
	// leader (a non-voter catching up, then a voter), so two different first
	// configurations never meet in one log. A node leaves Founders when it
	// leaves Replicas, so a node that comes back later joins as new.
	// Founders ⊆ Replicas; empty in maps written before founders existed.
	Founders []string
	// Forming is true from the group's creation until one of its replicas
	// has been seen working: until then its replicas do not change (the
	// plans refuse), so its founders all stay to bootstrap it.
	Forming bool
}

// Assignment gives the slots of Range to Group.
type Assignment struct {
	Range SlotRange
	Group GroupID
	// Epoch is the map epoch at which these slots got their current owner
	// (1..Map.Epoch). It changes only when the owner changes, so a router
	// holding an older map can tell which of its routes are still good.
	Epoch uint64
}

// Map is the shard map: slot ranges → group, group → replica nodes, and an
// epoch bumped by every change. A valid map (see Validate) is canonical: two
// valid maps route every slot alike, with the same slot epochs and groups,
// exactly when they are Equal.
//
// A Map is a value. Its methods never modify it; plans such as MoveSlots
// return a new map sharing no memory with the old one. Concurrent reads are
// safe; a caller that holds a map for others to read must not modify it.
type Map struct {
	Epoch  uint64       // bumped by every change; a valid map has Epoch ≥ 1
	Groups []Group      // sorted by ID, no MetaGroup, no duplicates
	Ranges []Assignment // sorted, contiguous, covering every slot exactly once
	// Cordoned are nodes that get no new replica from the plans (Drain,
	// Rebalance, LeastLoaded): drained nodes, until uncordoned. Sorted,
	// distinct.
	Cordoned []string
}

// ErrNoChange is wrapped by plans that would change nothing, such as moving
// slots to the group that already owns them.
var ErrNoChange = errors.New("no change")

// ErrForming is wrapped by plans that would change the replicas of a group
// that is still forming (Group.Forming): retry once it formed.
var ErrForming = errors.New("group still forming")

// errSource is the Source of this package's *admission.FieldErrors: their
// messages start "shard: ".
const errSource = "shard"

// at names element i of slice field name, then sub: at("Ranges", 3, ".Group").
func at(name string, i int, sub string) string {
	return name + "[" + strconv.Itoa(i) + "]" + sub
}

// fieldErr returns the error of Validate and the plans: field names what is
// at fault (a struct field path such as "Ranges[3].Range.Start", or a
// parameter such as "to"), the rest says what.
func fieldErr(field, format string, args ...any) *admission.FieldError {
	return &admission.FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Source: errSource}
}

// Validate reports the first way in which m is not a valid map:
//   - Epoch is at least 1;
//   - Groups are sorted by ID without duplicates, none is MetaGroup, each has
//     at least one replica, and replicas are non-empty and distinct;
//   - Ranges are non-empty, start at slot 0, each starts where the previous
//     ended, the last ends at SlotCount, each names a group in Groups and an
//     epoch in 1..Epoch, and no two adjacent ranges share both group and
//     epoch (they would be one range).
//
// Groups that own no slots are allowed. The error is an
// *admission.FieldError naming the field at fault.
func (m *Map) Validate() error {
	if m.Epoch == 0 {
		return fieldErr("Epoch", "is 0, want at least 1")
	}
	for i, g := range m.Groups {
		if g.ID == MetaGroup {
			return fieldErr(at("Groups", i, ".ID"), "is %d, the meta group, which owns no slots", MetaGroup)
		}
		if i > 0 && g.ID <= m.Groups[i-1].ID {
			return fieldErr(at("Groups", i, ".ID"), "is %d after %d, want IDs strictly increasing", g.ID, m.Groups[i-1].ID)
		}
		if len(g.Replicas) == 0 {
			return fieldErr(at("Groups", i, ".Replicas"), "group %d has no replicas", g.ID)
		}
		for j, n := range g.Replicas {
			if n == "" {
				return fieldErr(at("Groups", i, fmt.Sprintf(".Replicas[%d]", j)), "is an empty node ID")
			}
			if k := slices.Index(g.Replicas[:j], n); k >= 0 {
				return fieldErr(at("Groups", i, fmt.Sprintf(".Replicas[%d]", j)), "node %q is also Replicas[%d] of group %d", n, k, g.ID)
			}
		}
		for j, n := range g.Founders {
			if !slices.Contains(g.Replicas, n) {
				return fieldErr(at("Groups", i, fmt.Sprintf(".Founders[%d]", j)), "node %q is not a replica of group %d", n, g.ID)
			}
			if k := slices.Index(g.Founders[:j], n); k >= 0 {
				return fieldErr(at("Groups", i, fmt.Sprintf(".Founders[%d]", j)), "node %q is also Founders[%d] of group %d", n, k, g.ID)
			}
		}
	}
	for i, n := range m.Cordoned {
		if n == "" || (i > 0 && n <= m.Cordoned[i-1]) {
			return fieldErr(at("Cordoned", i, ""), "is %q, want non-empty node IDs, sorted and distinct", n)
		}
	}
	if len(m.Ranges) == 0 {
		return fieldErr("Ranges", "is empty, want every slot covered")
	}
	next := Slot(0) // the slot the next range must start at
	for i, a := range m.Ranges {
		if err := a.Range.Validate(); err != nil {
			fe := err.(*admission.FieldError)
			fe.Field = at("Ranges", i, ".Range."+fe.Field)
			return fe
		}
		switch {
		case a.Range.Start > next && slices.ContainsFunc(m.Ranges[i+1:], func(b Assignment) bool { return b.Range.Start == next }):
			return fieldErr(at("Ranges", i, ".Range.Start"), "is %d, want %d (ranges out of order: a later one starts at %d)", a.Range.Start, next, next)
		case a.Range.Start > next:
			return fieldErr(at("Ranges", i, ".Range.Start"), "is %d, want %d (gap: slots [%d,%d) are in no range)", a.Range.Start, next, next, a.Range.Start)
		case a.Range.Start < next:
			return fieldErr(at("Ranges", i, ".Range.Start"), "is %d, want %d (overlaps or is out of order with Ranges[%d] %v)", a.Range.Start, next, i-1, m.Ranges[i-1].Range)
		}
		next = a.Range.End
		if _, ok := m.Group(a.Group); !ok {
			return fieldErr(at("Ranges", i, ".Group"), "is %d, not in Groups", a.Group)
		}
		if a.Epoch == 0 || a.Epoch > m.Epoch {
			return fieldErr(at("Ranges", i, ".Epoch"), "is %d, want 1..%d (the map's Epoch)", a.Epoch, m.Epoch)
		}
		if i > 0 && a.Group == m.Ranges[i-1].Group && a.Epoch == m.Ranges[i-1].Epoch {
			return fieldErr(at("Ranges", i, ""), "has the group (%d) and epoch (%d) of Ranges[%d], want them merged", a.Group, a.Epoch, i-1)
		}
	}
	if next != SlotCount {
		return fieldErr(fmt.Sprintf("Ranges[%d].Range.End", len(m.Ranges)-1), "is %d, want %d (slots [%d,%d) are in no range)", next, SlotCount, next, SlotCount)
	}
	return nil
}

// Lookup returns the group owning slot s and the epoch at which it got it, in
// O(log len(Ranges)) without allocating. ok is false when s is beyond the
// last slot or no range holds it (never, in a valid map).
func (m *Map) Lookup(s Slot) (g GroupID, epoch uint64, ok bool) {
	// The last range starting at or before s.
	lo, hi := 0, len(m.Ranges)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if m.Ranges[mid].Range.Start <= s {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return 0, 0, false
	}
	a := &m.Ranges[lo-1]
	if !a.Range.Contains(s) {
		return 0, 0, false
	}
	return a.Group, a.Epoch, true
}

// GroupSlots returns how many slots each group owns. Every group in Groups
// has an entry, 0 for groups owning no slots.
func (m *Map) GroupSlots() map[GroupID]int {
	counts := make(map[GroupID]int, len(m.Groups))
	for _, g := range m.Groups {
		counts[g.ID] = 0
	}
	for _, a := range m.Ranges {
		counts[a.Group] += a.Range.Len()
	}
	return counts
}

// Group returns the group with the given ID, in O(log len(Groups)). The
// returned Replicas share memory with m: read them, do not modify them.
func (m *Map) Group(id GroupID) (Group, bool) {
	i := sort.Search(len(m.Groups), func(i int) bool { return m.Groups[i].ID >= id })
	if i < len(m.Groups) && m.Groups[i].ID == id {
		return m.Groups[i], true
	}
	return Group{}, false
}

// Owned returns the ranges group g owns, in slot order (none for an unknown
// group). The slice is new; the caller may keep or modify it.
func (m *Map) Owned(g GroupID) []Assignment {
	var out []Assignment
	for _, a := range m.Ranges {
		if a.Group == g {
			out = append(out, a)
		}
	}
	return out
}

// IsCordoned reports whether node gets no new replica from the plans.
func (m *Map) IsCordoned(node string) bool {
	_, ok := slices.BinarySearch(m.Cordoned, node)
	return ok
}

// Cordon returns m with node cordoned (or not), at the next epoch; m itself
// when nothing changes.
func (m *Map) Cordon(node string, on bool) Map {
	if m.IsCordoned(node) == on || node == "" {
		return *m
	}
	out := m.Clone()
	out.Epoch++
	if on {
		out.Cordoned = append(out.Cordoned, node)
		slices.Sort(out.Cordoned)
	} else {
		out.Cordoned = slices.DeleteFunc(out.Cordoned, func(n string) bool { return n == node })
	}
	return out
}

// Clone returns a deep copy of m, sharing no memory with it.
func (m *Map) Clone() Map {
	c := Map{Epoch: m.Epoch, Ranges: slices.Clone(m.Ranges), Cordoned: slices.Clone(m.Cordoned)}
	if m.Groups != nil {
		c.Groups = make([]Group, len(m.Groups))
		for i, g := range m.Groups {
			c.Groups[i] = Group{ID: g.ID, Replicas: slices.Clone(g.Replicas), Founders: slices.Clone(g.Founders), Forming: g.Forming}
		}
	}
	return c
}

// Equal reports whether m and o have the same epoch, the same groups with
// the same replicas in the same order, and the same ranges. Nil and empty
// slices are equal.
func (m *Map) Equal(o Map) bool {
	if m.Epoch != o.Epoch || len(m.Groups) != len(o.Groups) || !slices.Equal(m.Ranges, o.Ranges) || !slices.Equal(m.Cordoned, o.Cordoned) {
		return false
	}
	for i, g := range m.Groups {
		if g.ID != o.Groups[i].ID || !slices.Equal(g.Replicas, o.Groups[i].Replicas) || !slices.Equal(g.Founders, o.Groups[i].Founders) ||
			g.Forming != o.Groups[i].Forming {
			return false
		}
	}
	return true
}
