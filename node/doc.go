// Package node is a Quorate process: it hosts a replica of the cluster's
// Raft group (hashicorp/raft over TCP, raft-boltdb/v2 for the log and stable
// store, file snapshots), serves the public API (Connect, gRPC, gRPC-Web and
// JSON on one port, with cleartext HTTP/2), forwards decisions to the leader
// when it is not the leader, and joins and registers itself in the cluster.
//
// It owns the one table from errors to Connect codes (errors.go). Raft types
// never leave this package.
//
// # Request path
//
// A request is first checked for what needs no state (empty key, cost < 1).
// If this node leads, it stamps the entry with its clock and appends it to
// the log (propose); the FSM decides when the entry is applied, and the
// result goes back to the caller. Otherwise the request is forwarded, as a
// Connect call marked with the Quorate-Forwarded-By header, to the leader's
// API address from the replicated node registry; a forwarded request is never
// forwarded again. Requests that were certainly not applied (no leader, the
// node asked is not the leader, the leader was unreachable) are retried
// within the request deadline. When the outcome is unknown (leadership lost
// after proposing, deadline while committing, forwarded call failed midway),
// the caller gets Unavailable with an OutcomeUnknown detail.
//
// # Addresses
//
// Each node listens on its API and Raft addresses and advertises them (or
// the --advertise-* addresses) in the replicated registry. When a listener
// is bound to a specific IP rather than 0.0.0.0 or ::, the node's own
// connections of that kind — Raft to its peers, API calls to other nodes —
// leave from that IP, so a multi-homed host talks to its peers from the
// address they know it by, and per-address firewall rules apply to it.
// Config.DebugDialMap can redirect node-to-node dials through proxies for
// fault-injection tests.
//
// # Threading
//
// Node's methods are safe for concurrent use. Run blocks until its context
// is done; Close may be called at any time, from any goroutine.
package node
