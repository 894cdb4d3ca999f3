package node

import (
	"github.com/quorate/quorate/raftmux"
)

// RaftMuxStats returns the counters of n's shared Raft connections.
func RaftMuxStats(n *Node) raftmux.Stats { return n.raftMux.Stats() }

// AppliedIndexes returns the applied index of every replica on n, by group.
func AppliedIndexes(n *Node) map[uint32]uint64 {
	out := make(map[uint32]uint64)
	for _, g := range n.controller.hosted() {
		out[uint32(g.id)] = g.raft.AppliedIndex()
	}
	return out
}
