package node

// PeerAuthRefused is how many connections n's peer port closed for not
// proving the cluster's peer secret.
func PeerAuthRefused(n *Node) int64 { return n.mux.Stats().AuthRefused }
