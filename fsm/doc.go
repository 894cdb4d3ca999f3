// Package fsm is the replicated state machine of one Quorate Raft group: it
// decodes log entries (raftcmdv1.Envelope), applies them to the group's state
// — policies, node addresses, the states of keys (buckets, semaphores,
// reservations, budget leases) and the request-ID table — and writes and
// restores snapshots.
//
// # Meta and data groups
//
// One FSM type serves both kinds of group, its state split by what it
// serves (DESIGN.md, "State ownership"): metaState, the meta group's nodes,
// shard map (SetShardMap, compare-and-set on its epoch), plans and cluster
// ID; dataState, the keys' state, ownership and slot migrations; the policy
// table, time and term are shared. Each part applies its own commands and
// writes its own part of the snapshot.
// A data group (Options.DataGroup) holds keys' state; its leader writes
// SetOwnership (the slot ranges it owns, with the epoch at which each got
// that owner) and SetPolicies (a copy of the meta group's table with its
// versions) into its log, so every decision reads only the group's own
// state. A data command names its key, and with it its slot; the envelope
// carries the router's map epoch. A data group refuses, with a RouteError
// and nothing applied, any data command before its first SetOwnership, for
// a slot it does not own, or stamped with an epoch older than its slot's
// owner (route.go). It refuses the meta group's commands (RegisterNode,
// SetShardMap, PutPolicies, the plans' and the like) with ErrNotMetaGroup,
// so its meta part stays empty. Without a shard map, the meta group applies
// data too: a single-group cluster.
//
// # Slot migrations and plans
//
// A data group's slots move to another group without losing or
// duplicating state (migrate.go, migrate_export.go): FreezeSlots makes the source refuse
// commands for them (ErrSlotMoving, retryable, nothing applied); the state
// of frozen slots — buckets, semaphores, reservations, request-ID entries,
// which remember their slot — is read with ExportSlots and written into the
// target with ImportSlots chunks, fenced by attempt and applied in order,
// each raising the target's time to at least the source's so fencing
// tokens never go back; when its ownership shrinks, a group deletes the
// state of the slots it lost. The meta group keeps plans (plans.go): steps
// with phases moved on by compare-and-set UpdatePlan entries; a slot move's
// flip changes the shard map in the same entry.
// It also keeps an audit trail (audit.go): the admin
// commands whose entry names an Actor, with the entry's index and time.
//
// # Exactly-once
//
// An Admit that carries a request ID is looked up in the request-ID table
// (package dedupe) first: a repeat within the policy's dedupe_retention gets
// the recorded first answer with Duplicate set and changes nothing; the same
// ID with another policy, key or cost is refused (ErrRequestIDReused). A new
// decision, allowed or denied, is recorded before the bucket is spent, so a
// full table (ErrDedupeFull) refuses the request without spending.
//
// # Budget leases
//
// A Grant (grant.go) gives a holder units of a key
// of a policy with local decisions, spent from the key's state when
// granted, sized by the holder's share of the key's reported demand; the
// holder spends them in memory, renews (seq+1) to top up, and releases to
// give back what it did not use. An expired grant gives nothing back: its
// unspent units are waste, bounded by max_grant and counted
// (GrantStats). Strict decisions and local ones together never exceed the
// policy. A policy in local.mode sync gives allowances instead
// (grant_sync.go): nothing spent ahead, what holders report is charged
// (Charge), and a key's allowances never add up to more than its
// SyncBound, the most it may be over-admitted by (SyncStats counts it).
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
// The read methods (Policy, Policies, Nodes, LastNow, BucketCount, …) may be
// called from any goroutine: they take a read lock and see the state as of
// the last applied entry on this replica, which may lag the leader.
//
// # Memory
//
// A state past its expiry — a token bucket that has refilled completely, a
// semaphore without a live lease, a reservation or a grant past its TTL, a
// request-ID entry past its retention — is equal to none, so each Apply reclaims up to
// SweepPerApply from each table in order of expiry (deterministic indexes
// ordered by (expiry, key)), and an Expire entry, which the leader proposes
// when its replica holds expired state, reclaims up to ExpireBatch more.
// State is bounded by what is live, and by Options.MaxBuckets (buckets and,
// apart, semaphores) and Options.MaxDedupeEntries: beyond them new keys or
// request IDs are refused (ErrGroupFull, ErrDedupeFull); nothing live is
// evicted.
package fsm
