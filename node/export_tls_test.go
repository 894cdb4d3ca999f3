package node

import "github.com/quorate/quorate/peermux"

// PeerStats is the counts of n's peer port mux.
func PeerStats(n *Node) peermux.Stats { return n.mux.Stats() }
