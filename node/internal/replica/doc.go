// Package replica owns a node's Raft group replicas and their storage: a
// Replica is one group's raft.Raft with its fsm.FSM, its checked view of the
// node's shared log (package nodelog, <data-dir>/log), its term and vote in
// the node's one raft-boltdb/v2 stable store (<data-dir>/stable.db), its
// file snapshots, and its storage health.
//
// A Host is what the replicas of one node share: the Raft settings, the
// shared log and stable store (SharedLogs, opened by the first replica and
// closed after the last), the Raft hub that carries every group's RPCs over
// the peer port (NewHub, package raftmux), the set of data group replicas
// (Set), and the two calls a replica makes into the rest of the node: its
// group commit (NewBatch, the request engine's) and LeaderChanged. Host.Open
// opens a replica: it checks the data directory's files before raft reads
// them (storage_check.go), bootstraps a new group, and starts its raft.
//
// A replica whose files are found damaged while it runs is stopped
// (damaged.go): a data group's is taken out of the Set and its reopening
// retried with backoff; the meta group's raft is shut down. A leader that
// appended nothing for a while heartbeats at a slower pace (quiet.go). Raft's
// hclog calls are written to the node's slog logger (raftlog.go), with the
// expected noise of start-up and shutdown lowered. A data directory carries
// Quorate's data format marker; an earlier build's is refused
// (dataformat.go).
//
// Only package node and its internal packages use it; raft types never
// leave them.
package replica
