package shard

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/quorate/quorate/admission"
)

// PlaceReplicas places the replicas of groups data groups on nodes and
// returns them, one slice per group (index i for group i+1), preferred
// leader first. It is the placement of InitialMap; it depends only on the set
// of nodes (it sorts and de-duplicates a copy, ignoring empty IDs), never on
// their order. It returns nil if there is no node, or groups or replicas is
// below 1.
//
// With n nodes and r = min(replicas, n), the j-th replica of the i-th group
// (0-based) is on sorted node (i + ⌊j·n/r⌋) mod n. So:
//   - a group's replicas are distinct (the offsets ⌊j·n/r⌋ are distinct and
//     below n);
//   - preferred leaders (j = 0) go round-robin: per-node counts differ by ≤ 1;
//   - every replica index j is round-robin too, and the nodes that get one
//     more of it form a window of groups mod n nodes starting at offset
//     ⌊j·n/r⌋; offsets spaced evenly make these windows cover every node
//     equally often ±1, so per-node replica counts differ by ≤ 1.
func PlaceReplicas(nodes []string, groups, replicas int) [][]string {
	sorted := sortedNodes(nodes)
	n := len(sorted)
	if n == 0 || groups < 1 || replicas < 1 {
		return nil
	}
	r := min(replicas, n)
	offsets := make([]int, r)
	for j := range offsets {
		offsets[j] = j * n / r
	}
	all := make([]string, groups*r) // one backing array, capped per group
	out := make([][]string, groups)
	for i := range out {
		g := all[i*r : (i+1)*r : (i+1)*r]
		for j, off := range offsets {
			g[j] = sorted[(i+off)%n]
		}
		out[i] = g
	}
	return out
}

// sortedNodes returns the distinct non-empty IDs of nodes, sorted.
func sortedNodes(nodes []string) []string {
	s := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == "" })
	slices.Sort(s)
	return slices.Compact(s)
}

// InitialMap returns the first shard map of a cluster: Epoch 1; data groups
// 1..groups with replicas placed by PlaceReplicas (min(replicas, len(nodes))
// per group on distinct nodes; per-node replica and preferred-leader counts
// each even within 1); the slot space split into groups contiguous ranges in
// ID order whose sizes differ by at most 1, each at epoch 1.
//
// The result depends only on the set of nodes, not their order. Errors name
// the parameter at fault: no nodes, an empty or duplicate node ID, groups
// outside 1..SlotCount (every group needs a slot), replicas below 1.
func InitialMap(nodes []string, groups, replicas int) (Map, error) {
	if len(nodes) == 0 {
		return Map{}, fieldErr("nodes", "is empty, want at least one node")
	}
	for i, n := range nodes {
		if n == "" {
			return Map{}, fieldErr(fmt.Sprintf("nodes[%d]", i), "is an empty node ID")
		}
		if k := slices.Index(nodes[:i], n); k >= 0 {
			return Map{}, fieldErr(fmt.Sprintf("nodes[%d]", i), "%q is also nodes[%d]", n, k)
		}
	}
	if groups < 1 || groups > SlotCount {
		return Map{}, fieldErr("groups", "is %d, want 1..%d", groups, SlotCount)
	}
	if replicas < 1 {
		return Map{}, fieldErr("replicas", "is %d, want at least 1", replicas)
	}
	placed := PlaceReplicas(nodes, groups, replicas)
	m := Map{Epoch: 1, Groups: make([]Group, groups), Ranges: make([]Assignment, groups)}
	for i := range groups {
		id := GroupID(i + 1)
		m.Groups[i] = Group{ID: id, Replicas: placed[i], Founders: slices.Clone(placed[i]), Forming: true}
		m.Ranges[i] = Assignment{
			Range: SlotRange{Start: Slot(i * SlotCount / groups), End: Slot((i + 1) * SlotCount / groups)},
			Group: id,
			Epoch: 1,
		}
	}
	return m, nil
}

// MoveSlots plans moving the slots of r to group to. It returns a new map at
// Epoch m.Epoch+1 in which every slot of r belongs to to, and m is untouched.
//
// Slot epochs stay exact: the slots of r that change owner get the new epoch;
// slots of r that to already owned keep theirs, as do all slots outside r.
// Adjacent ranges are merged only when they share both group and epoch, so a
// moved range is not merged with a neighbour of to that got its slots
// earlier; the map then has at most SlotCount ranges however many moves it
// saw. (Merging under the larger epoch would make untouched slots look newly
// moved, sending routers that hold an older map to refresh for nothing, and
// would blur which migration a slot arrived by.)
//
// Errors are *admission.FieldErrors naming the parameter at fault: "m" if m does not
// Validate (the field path follows), "r.Start"/"r.End" for an empty range or
// one beyond the last slot, "to" for MetaGroup or a group not in m.Groups,
// "r" wrapping ErrNoChange when to already owns every slot of r.
func (m *Map) MoveSlots(r SlotRange, to GroupID) (Map, error) {
	if err := m.Validate(); err != nil {
		fe := err.(*admission.FieldError)
		return Map{}, &admission.FieldError{Source: errSource, Field: "m." + fe.Field, Reason: fe.Reason, Err: fe.Err}
	}
	if err := r.Validate(); err != nil {
		fe := err.(*admission.FieldError)
		fe.Field = "r." + fe.Field
		return Map{}, fe
	}
	if to == MetaGroup {
		return Map{}, fieldErr("to", "is %d, the meta group, which owns no slots", MetaGroup)
	}
	if _, ok := m.Group(to); !ok {
		return Map{}, fieldErr("to", "group %d is not in the map", to)
	}
	if m.Epoch == math.MaxUint64 {
		return Map{}, fieldErr("m.Epoch", "is at its maximum, %d", m.Epoch)
	}
	epoch := m.Epoch + 1
	moved := false
	ranges := make([]Assignment, 0, len(m.Ranges)+2)
	add := func(a Assignment) {
		if a.Range.Len() == 0 {
			return
		}
		if k := len(ranges) - 1; k >= 0 && ranges[k].Group == a.Group && ranges[k].Epoch == a.Epoch {
			ranges[k].Range.End = a.Range.End
			return
		}
		ranges = append(ranges, a)
	}
	for _, a := range m.Ranges {
		lo, hi := max(a.Range.Start, r.Start), min(a.Range.End, r.End)
		if lo >= hi || a.Group == to { // outside r, or already to's
			add(a)
			continue
		}
		moved = true
		add(Assignment{Range: SlotRange{a.Range.Start, lo}, Group: a.Group, Epoch: a.Epoch})
		add(Assignment{Range: SlotRange{lo, hi}, Group: to, Epoch: epoch})
		add(Assignment{Range: SlotRange{hi, a.Range.End}, Group: a.Group, Epoch: a.Epoch})
	}
	if !moved {
		return Map{}, &admission.FieldError{Source: errSource, Field: "r", Reason: fmt.Sprintf("every slot of %v already belongs to group %d", r, to), Err: ErrNoChange}
	}
	out := m.Clone()
	out.Epoch = epoch
	out.Ranges = slices.Clip(ranges)
	return out, nil
}

// MoveReplica returns m with group's replica on node from replaced by node
// to, at the next epoch: to takes from's place in Replicas (so a preferred
// leader's successor is preferred in turn) and from leaves Founders. Slot
// ranges are unchanged. Errors are *admission.FieldErrors naming the parameter at
// fault: "m" if m does not Validate, "group" for a group not in the map,
// "from" for a node that is not its replica, "to" for an empty ID or a node
// that already is one.
func (m *Map) MoveReplica(group GroupID, from, to string) (Map, error) {
	if err := m.Validate(); err != nil {
		fe := err.(*admission.FieldError)
		return Map{}, &admission.FieldError{Source: errSource, Field: "m." + fe.Field, Reason: fe.Reason, Err: fe.Err}
	}
	i := slices.IndexFunc(m.Groups, func(g Group) bool { return g.ID == group })
	if i < 0 {
		return Map{}, fieldErr("group", "group %d is not in the map", group)
	}
	g := m.Groups[i]
	j := slices.Index(g.Replicas, from)
	switch {
	case g.Forming:
		return Map{}, &admission.FieldError{Source: errSource, Field: "group", Reason: fmt.Sprintf("group %d is still forming (no replica has been seen working yet): retry in a moment", group), Err: ErrForming}
	case j < 0:
		return Map{}, fieldErr("from", "node %q is not a replica of group %d (replicas %v)", from, group, g.Replicas)
	case to == "":
		return Map{}, fieldErr("to", "is an empty node ID")
	case slices.Contains(g.Replicas, to):
		return Map{}, fieldErr("to", "node %q already is a replica of group %d", to, group)
	case m.Epoch == math.MaxUint64:
		return Map{}, fieldErr("m.Epoch", "is at its maximum, %d", m.Epoch)
	}
	out := m.Clone()
	out.Epoch++
	out.Groups[i].Replicas[j] = to
	out.Groups[i].Founders = slices.DeleteFunc(out.Groups[i].Founders, func(n string) bool { return n == from })
	return out, nil
}

// Drain returns m with every replica on node moved to other nodes, at the
// next epoch, and node cordoned: each group's replica goes to the node of
// nodes (the cluster's nodes) that is not cordoned, not already in that
// group and holds the fewest replicas so far (ties to the smaller ID), and
// takes node's place in Replicas.
// Errors are *admission.FieldErrors: "m" if m does not Validate, "node" when node
// holds no replica and is cordoned already (ErrNoChange) or a group has no
// other node to go to.
func (m *Map) Drain(node string, nodes []string) (Map, error) {
	if err := m.Validate(); err != nil {
		fe := err.(*admission.FieldError)
		return Map{}, &admission.FieldError{Source: errSource, Field: "m." + fe.Field, Reason: fe.Reason, Err: fe.Err}
	}
	if m.Epoch == math.MaxUint64 {
		return Map{}, fieldErr("m.Epoch", "is at its maximum, %d", m.Epoch)
	}
	load := map[string]int{}
	for _, n := range nodes {
		if n != node && !m.IsCordoned(n) {
			load[n] = 0
		}
	}
	for _, g := range m.Groups {
		for _, r := range g.Replicas {
			if _, ok := load[r]; ok {
				load[r]++
			}
		}
	}
	candidates := sortedNodes(slices.Collect(maps.Keys(load)))
	out := m.Clone()
	out.Epoch++
	moved := 0
	for i, g := range out.Groups {
		j := slices.Index(g.Replicas, node)
		if j < 0 {
			continue
		}
		if g.Forming {
			return Map{}, &admission.FieldError{Source: errSource, Field: "node", Reason: fmt.Sprintf("group %d, which has a replica on %q, is still forming: retry in a moment", g.ID, node), Err: ErrForming}
		}
		best := ""
		for _, c := range candidates {
			if !slices.Contains(g.Replicas, c) && (best == "" || load[c] < load[best]) {
				best = c
			}
		}
		if best == "" {
			return Map{}, fieldErr("node", "group %d has no other node to move %q's replica to (replicas %v)", g.ID, node, g.Replicas)
		}
		out.Groups[i].Replicas[j] = best
		out.Groups[i].Founders = slices.DeleteFunc(out.Groups[i].Founders, func(n string) bool { return n == node })
		load[best]++
		moved++
	}
	if moved == 0 && m.IsCordoned(node) {
		return Map{}, &admission.FieldError{Source: errSource, Field: "node", Reason: fmt.Sprintf("%q holds no replica", node), Err: ErrNoChange}
	}
	if !out.IsCordoned(node) {
		out.Cordoned = append(out.Cordoned, node)
		slices.Sort(out.Cordoned)
	}
	return out, nil
}

// LeastLoaded returns k of nodes that are not cordoned (fewer when there
// are fewer), those
// holding the fewest replicas in m first, ties to the smaller ID: where a
// new group's replicas go.
func (m *Map) LeastLoaded(nodes []string, k int) []string {
	load := map[string]int{}
	for _, g := range m.Groups {
		for _, r := range g.Replicas {
			load[r]++
		}
	}
	c := slices.DeleteFunc(sortedNodes(nodes), m.IsCordoned)
	slices.SortStableFunc(c, func(a, b string) int { return load[a] - load[b] })
	return c[:min(k, len(c))]
}

// LastSlots returns the ranges of the last count slots group g owns, in
// slot order, adjacent ones merged, and false when g owns fewer than count (or count is not
// positive).
func (m *Map) LastSlots(g GroupID, count int) ([]SlotRange, bool) {
	if count <= 0 {
		return nil, false
	}
	owned := m.Owned(g)
	var out []SlotRange
	for i := len(owned) - 1; i >= 0 && count > 0; i-- {
		r := owned[i].Range
		take := min(count, r.Len())
		if k := len(out) - 1; k >= 0 && out[k].Start == r.End {
			out[k].Start = r.End - Slot(take) // adjacent: one range
		} else {
			out = append(out, SlotRange{Start: r.End - Slot(take), End: r.End})
		}
		count -= take
	}
	if count > 0 {
		return nil, false
	}
	slices.Reverse(out)
	return out, true
}

// Rebalance returns m with replicas and preferred leaders (Replicas[0])
// evened across nodes (the cluster's nodes), at the next epoch, and the
// changes it made, in order ("group 3: node1 → node4", "group 2: leader
// node1 → node3"). Replicas move one at a time from the node holding the
// most to the node holding the fewest that is not in the group, until the
// counts differ by at most one; then, within each group's replicas,
// preferred leaders move the same way. Nodes not in nodes keep their
// replicas (drain them first), and so do cordoned nodes. With nothing to change it returns m itself
// and no changes. Errors: "m" when m does not Validate.
func (m *Map) Rebalance(nodes []string) (Map, []string, error) {
	if err := m.Validate(); err != nil {
		fe := err.(*admission.FieldError)
		return Map{}, nil, &admission.FieldError{Source: errSource, Field: "m." + fe.Field, Reason: fe.Reason, Err: fe.Err}
	}
	ns := slices.DeleteFunc(sortedNodes(nodes), m.IsCordoned)
	if len(ns) == 0 {
		return *m, nil, nil
	}
	out := m.Clone()
	var changes []string
	count := func(leaders bool) map[string]int {
		c := make(map[string]int, len(ns))
		for _, n := range ns {
			c[n] = 0
		}
		for _, g := range out.Groups {
			for j, r := range g.Replicas {
				if _, ok := c[r]; ok && (!leaders || j == 0) {
					c[r]++
				}
			}
		}
		return c
	}
	// extremes returns the nodes with the most and the fewest, ties to
	// the smaller ID.
	extremes := func(c map[string]int) (hi, lo string) {
		for _, n := range ns {
			if hi == "" || c[n] > c[hi] {
				hi = n
			}
			if lo == "" || c[n] < c[lo] {
				lo = n
			}
		}
		return hi, lo
	}
	for range len(out.Groups) * len(ns) {
		c := count(false)
		hi, lo := extremes(c)
		if c[hi]-c[lo] <= 1 {
			break
		}
		moved := false
		for i, g := range out.Groups {
			j := slices.Index(g.Replicas, hi)
			if j < 0 || slices.Contains(g.Replicas, lo) || g.Forming {
				continue
			}
			out.Groups[i].Replicas[j] = lo
			out.Groups[i].Founders = slices.DeleteFunc(out.Groups[i].Founders, func(n string) bool { return n == hi })
			changes = append(changes, fmt.Sprintf("group %d: replica %s → %s", g.ID, hi, lo))
			moved = true
			break
		}
		if !moved {
			break
		}
	}
	for range len(out.Groups) * len(ns) {
		c := count(true)
		hi, lo := extremes(c)
		if c[hi]-c[lo] <= 1 {
			break
		}
		moved := false
		for i, g := range out.Groups {
			j := slices.Index(g.Replicas, lo)
			if g.Replicas[0] != hi || j < 0 || g.Forming {
				continue
			}
			r := out.Groups[i].Replicas
			r[0], r[j] = r[j], r[0]
			changes = append(changes, fmt.Sprintf("group %d: leader %s → %s", g.ID, hi, lo))
			moved = true
			break
		}
		if !moved {
			break
		}
	}
	if len(changes) == 0 {
		return *m, nil, nil
	}
	if out.Epoch == math.MaxUint64 {
		return Map{}, nil, fieldErr("m.Epoch", "is at its maximum, %d", m.Epoch)
	}
	out.Epoch++
	return out, changes, nil
}
