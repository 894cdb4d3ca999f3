// Package node is a Quorate process: it hosts replicas of the cluster's Raft
// groups (hashicorp/raft; every replica's log in the node's one shared log,
// package nodelog, under <data-dir>/log; every replica's term and vote in
// one raft-boltdb/v2 file, <data-dir>/stable.db; file snapshots; the data
// directory marked with Quorate's data format 0, and an earlier build's
// refused), serves the public API (Connect, gRPC, gRPC-Web and JSON on one
// port, with cleartext HTTP/2), forwards decisions to the leader of the
// key's group when it is not that leader, and joins and registers itself in
// the cluster.
//
// # Groups
//
// Every node hosts a replica of the meta group (ID 0: nodes, policies, the
// shard map; voters are the first MetaVoters nodes of a cluster with data
// groups, the rest follow as non-voters). With Config.DataGroups > 0 the
// meta leader creates the shard map (package shard) once ExpectNodes nodes
// registered, and each node opens the data group replicas the map places on
// it (the control plane's group loop). All groups' Raft traffic shares the
// node's one Raft listener, a peer mux (package peermux) that reads a
// header from each connection — a magic byte, a uvarint channel ID (the group ID, or the
// forwarding channel) and the dialer's cluster ID — and refuses another
// cluster's, a silent or an idle connection. The leader of each data group
// copies the group's ownership (its slots, at a map epoch) and the meta
// group's policy table into the group's log. Without data groups, the meta
// group holds the data too (a single-group cluster).
//
// It owns the one table from errors to Connect codes (errors.go). A
// replica, its stores and its Raft transport are package
// node/internal/replica's, the request path package node/internal/engine's,
// the control plane package node/internal/control's. Raft types never
// leave node and its internal packages.
//
// # Health and logs
//
// Each API and admin server answers /healthz (live), /readyz and the gRPC
// health service (ready: registered, not stopping, every hosted replica
// has a leader and has applied to within 1,024 entries of its commit
// index; ready.go) to anyone, and gRPC reflection (reflect.go) to any
// caller with a role. The node logs through one slog logger; raft's hclog
// calls go through an adapter (package replica's raftlog.go) that lowers Raft's expected
// start-up and shutdown messages and never the node's storage errors.
//
// # Cluster administration
//
// The control plane is package node/internal/control's Controller, made by
// New and started by Run: its loops follow the replicated state and act
// only where this node leads the group concerned, and the admin calls that
// change the cluster (admin_cluster.go) run through it on the meta leader.
// It reaches replicas and the request path only through named
// dependencies. Replica moves, drains and rebalancing are shard-map
// changes; each data group's leader makes the group's Raft configuration
// follow the map one change at a time and hands leadership to the group's
// preferred leader. Slot moves, group additions and splits are plans
// recorded in the meta group and driven by the meta leader: a
// slot move freezes the slots at the source, copies their state page by
// page (PeerService.ExportSlots from a source replica, ImportSlots entries
// in the target's log, through PeerService.ApplyToGroup to the target's
// leader), flips the map, and the source deletes its copy when its
// ownership shrinks. Each phase is recorded, so a new meta leader resumes;
// a copy restarted by a new leader is a new attempt, and the target refuses
// an older attempt's chunks. PeerService is served only on the peer port's
// forwarding channel (peer_service.go).
//
// # Request path
//
// A request is first checked for what needs no state (empty key, cost < 1).
// Then every request, a unary call or each of an AdmitBatch's, goes through
// one engine (package engine's engine.go), a unary call as a batch of one. Its key's slot picks the data group by this node's replica of the shard
// map (package engine's route.go); data commands carry the map epoch, and a group refuses a
// slot it does not own or an epoch older than the slot's owner, so the
// request is routed again. If this node leads the group, it stamps the entry with its clock and appends it to
// the log (propose); the FSM decides when the entry is applied, and the
// result goes back to the caller. Otherwise the request is forwarded, as a
// Connect call marked with the Quorate-Forwarded-By header, over the peer
// port's forwarding channel to the leader's Raft address from the replicated
// node registry; a forwarded request is never
// forwarded again. Requests that were certainly not applied (no leader, the
// node asked is not the leader, the leader was unreachable) are retried
// within the request deadline. When the outcome is unknown (leadership lost
// after proposing, deadline while committing, forwarded call failed midway),
// the caller gets Unavailable with an OutcomeUnknown detail. A program
// embedding a node can follow each command it proposes as leader through
// Config.Observer.
//
// # Limits
//
// Both HTTP servers (the API and the peer port's forwarding channel) bound
// what they accept (limits.go, codec.go): a request's message after
// decompression and its body as sent (Config.MaxRequestBytes,
// MaxPeerRequestBytes), the messages it decodes to, and the time its body
// takes to arrive (Config.RequestBodyTimeout; bodies still arriving are cut
// when the server shuts down), and the request bytes all their requests
// hold at once, a compressed body counted as what it may inflate to
// (Config.MaxInflightBytes, inflight.go; past it a call is refused at once
// with resource_exhausted). JSON requests with fields their message does
// not declare are refused; binary protobuf keeps unknown fields.
//
// # Callers and rights
//
// With Config.AccessFile, the API server authenticates every call (a
// verified client certificate, or a bearer token of Config.TokenFile) and
// allows it by the caller's roles and policies (package access; auth.go);
// a call without a credential that checks out is refused before its body
// is read. The caller of a request's ID is the authenticated one. Without it the
// node is open, which Validate allows only on loopback addresses. The peer
// port's forwarding server serves nodes and does not authenticate callers
// again: what a node forwards, its own API edge authorized.
//
// With Config.EnvoyConfig the API also serves Envoy's rate-limit service
// (package envoyrls; envoy.go): each call is authorized as the Admit it
// becomes and decided as one, and the files' policies are applied through
// the meta group before the first decision under each version of them.
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
// # TLS
//
// With Config.TLSCertFile, TLSKeyFile and TLSCAFile (tls.go) both ports
// are TLS, from one certificate that must name the node
// (quorate://node/<ID>): the API with callers' certificates optional and
// verified when given, the peer port with mutual TLS completed before the
// mux reads a header, the peer naming a node the meta replica registers.
// The files are reloaded when they change. Without them, Config.Validate
// refuses a non-loopback address unless Config.InsecurePlaintext.
//
// # Status
//
// NodeStatus reports, besides the replicas' Raft state, what this node
// decided as a group's leader since it started (decisions.go): each group's
// hot keys, from a bounded top-k sketch (package hotkeys), and per-policy
// decision counts and rates; in memory only, never replicated. GET /status
// on the port that serves admin calls renders the cluster as this node
// sees it (status_page.go, package statuspage), for the admin role.
//
// # Threading
//
// Node's methods are safe for concurrent use. Run blocks until its context
// is done; Close may be called at any time, from any goroutine.
package node
