// Package shard owns the placement of keys: key → slot → group → nodes.
//
// Slots. A key's slot is xxhash64(tag) % SlotCount (4096), where tag is the
// part of the key inside the first {...} (Redis Cluster's hash tag) or else
// the whole key; keys that share a tag share a slot, so one request may
// update them atomically. The hash itself is package client/slot's, which
// the client routes by: one implementation for both. SlotRange is half-open, [Start, End), so
// {0, SlotCount} is the whole space.
//
// The shard map. Map assigns contiguous slot ranges to data groups (GroupID
// 1..N; MetaGroup, 0, holds the map and owns no slots) and lists each group's
// replica nodes, preferred leader first. Map.Epoch is bumped by every change;
// each range also carries the epoch at which its slots got their current
// owner, so a router holding an older map can tell which routes still hold.
// Map.Validate states the invariants (full coverage without overlap, sorted,
// canonical merging, known groups, distinct replicas, epochs ≤ Map.Epoch);
// Lookup is a binary search over the ranges.
//
// Plans. InitialMap and PlaceReplicas place a new cluster (slots split
// evenly; replicas on distinct nodes; replicas and preferred leaders even
// across nodes within 1). Map.MoveSlots plans a slot move. Plans are pure
// functions returning a new map; applying one (through the meta group's log)
// and migrating the slots' state belong to fsm and node. Node add, drain and
// removal, group splits and rebalancing are to join them here as plans.
//
// The package does no I/O, reads no clock and uses no randomness: the same
// inputs give the same map on every replica. Errors are
// *admission.FieldError values (Source "shard") naming the field or
// parameter at fault. Maps are values: methods never
// modify their receiver, so concurrent reads are safe.
package shard
