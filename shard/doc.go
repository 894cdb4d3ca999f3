// Package shard maps keys to slots: slot = xxhash64(tag) % SlotCount, where
// tag is the part of the key inside the first {...} (Redis Cluster's hash
// tag) or else the whole key. Keys that share a tag share a slot, so one
// request may update them atomically. Later this package also holds the shard
// map (slot ranges → groups, with an epoch) and the pure planning of
// placements and migrations. It does no I/O and is safe for concurrent use.
package shard
