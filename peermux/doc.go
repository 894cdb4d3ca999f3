// Package peermux is a Quorate node's peer port: one TCP listener shared by
// every service between nodes — the Raft connections all hosted groups
// share (ChannelRaft, ChannelRaftSnapshot: package raftmux) and
// follower→leader forwarding (ChannelForward) — and the dialer that opens
// the node's connections to other nodes (Dialer).
//
// It owns the peer connection header (magic byte, channel ID, and the
// cluster ID when the dialer knows one; header.go), the handshake and idle
// deadlines and the caps on what the port accepts (peerconn.go), and the
// refusal of dialers of another cluster (cluster.go). A Mux is created
// with New, run with Serve, and closed with Close once the node's Raft
// groups are shut down.
//
// With Options.ServerTLS and ClientTLS the whole connection is TLS: an
// accepted connection's TLS handshake completes, within the handshake
// deadline, before the mux reads the first byte of its header, so a peer
// whose certificate the config refuses never reaches the header parser, a
// Raft transport or the forwarding channel; a dialed connection writes its
// header only once its handshake is done. Which certificates and nodes the
// configs accept is the caller's (package node builds them with package
// certs).
//
// With Options.Secret, the cluster's peer secret, every connection also
// runs a challenge–response after its header (auth.go): each end proves
// with an HMAC over fresh nonces that it holds the secret, which never
// crosses the wire, before any of the channel's bytes; a dialer that knows
// only the cluster ID is closed there. It is how a plaintext peer port
// authenticates its peers, and adds to TLS where both are set.
//
// The node decides what the mux knows of its cluster ID (SetClusterID):
// recording the ID, learning it from a join address or the meta group, is
// package node's. This package knows nothing of nodes, groups' state or
// configuration files.
package peermux
