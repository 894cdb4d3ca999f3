package node

import "github.com/quorate/quorate/fsm"

// PeerConnsAccepted is how many connections n's peer port has accepted.
func PeerConnsAccepted(n *Node) int64 { return n.mux.stats.accepted.Load() }

// PeerConnsIdleClosed is how many connections n's peer port closed for
// idleness.
func PeerConnsIdleClosed(n *Node) int64 { return n.mux.stats.idleClosed.Load() }

// PeerRedials is how many of n's Raft connections were replaced before a
// write for having been idle.
func PeerRedials(n *Node) int64 { return n.mux.stats.redials.Load() }

// MetaClusterID is the cluster ID n's meta group replica holds.
func MetaClusterID(n *Node) string { return n.meta.fsm.ClusterID() }

// FeatureLevel is the log feature level of this binary.
func FeatureLevel() uint32 { return fsm.FeatureLevel }
