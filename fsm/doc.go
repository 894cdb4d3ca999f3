// Package fsm is the replicated state machine of one Quorate Raft group: it
// decodes log entries (raftcmdv1.Envelope), applies them to the group's state
// — policies, node addresses and token buckets — and writes and restores
// snapshots.
//
// # Determinism
//
// Every replica applies the same entries in the same order and must reach the
// same state byte for byte (DESIGN.md §2). Time comes only from the entries:
// the FSM decides with now = max(last now, entry now), so time never runs
// backwards when a new leader's clock is behind, and the local clock is never
// read. There are no floats, no randomness and no map iteration that reaches a
// result or a snapshot. An entry this binary cannot decode, or whose envelope
// version it does not know, panics rather than diverge.
//
// # Threading
//
// raft calls Apply, Snapshot and Restore from one goroutine; FSMSnapshot's
// Persist runs concurrently with later Applies on a copy taken by Snapshot.
// The read methods (Policy, Policies, Nodes, LastNow, BucketCount) may be
// called from any goroutine: they take a read lock and see the state as of
// the last applied entry on this replica, which may lag the leader.
//
// # Memory
//
// A token bucket that has refilled completely is equal to no bucket at all,
// so each Apply reclaims up to SweepPerApply such buckets in order of expiry
// (a deterministic index ordered by (expiry, key)). State is bounded by the
// keys active within their refill time, and by Options.MaxBuckets: a new key
// beyond it is refused with ErrGroupFull; nothing existing is evicted.
package fsm
