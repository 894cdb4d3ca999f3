// Package groupcommit gathers the commands bound for one Raft group into
// shared log entries (DESIGN.md §4): strict decisions are cheap only many to
// a Raft entry, as an RPC between nodes is cheap only many to a call.
//
// Queue is the mechanism, for entries and calls alike: an item is sent at
// once when fewer than the queue's limit of batches are in flight (so a
// lone caller never waits for a timer), and otherwise waits with the others
// that arrive meanwhile until a batch in flight completes; then all go
// together, up to the queue's batch size. Hold stops sending and reports
// when nothing is in flight any more (a leader quiesces its group so before
// handing leadership over); Release sends what queued meanwhile.
//
// Committer is a Raft group's commit queue on its leader: one entry in
// flight, up to 512 commands in it. A lone command is its own entry; several
// go in one Batch entry. The Log (the node's replica of the group) stamps, appends
// and applies the entry; the Committer hands each op its own result of a
// Batch (fsm.BatchResult), a result that is an error as the op's error, and
// the entry's error to every op of it.
//
// Results come back through Item, which every queued item embeds: its
// caller waits with a context. When the context ends before the item was
// claimed for a batch, the item is abandoned (it is never sent, so the
// caller may say "not proposed"); after, the caller learns only that the
// item was sent (its outcome is unknown to it). The package does not
// choose those errors: the caller does.
//
// Threading: Add, Hold, Release and Wait are safe from any goroutine. Each
// batch in flight is sent on a goroutine of the queue, which then sends
// whatever queued meanwhile before it exits; the send function answers
// every item it claimed, through a buffered channel that never blocks it.
// Nothing here keeps global state.
package groupcommit
