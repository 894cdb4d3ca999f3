package node

// PeerConnsAccepted is how many connections n's peer port has accepted.
func PeerConnsAccepted(n *Node) int64 { return n.mux.stats.accepted.Load() }
