package node

import (
	"context"
	"fmt"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/peermux"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// PeerConnsAccepted is how many connections n's peer port has accepted.
func PeerConnsAccepted(n *Node) int64 { return n.mux.Stats().Accepted }

// MetaClusterID is the cluster ID n's meta group replica holds.
func MetaClusterID(n *Node) string { return n.meta.FSM.ClusterID() }

// FeatureLevel is the log feature level of this binary.
func FeatureLevel() uint32 { return fsm.FeatureLevel }

// RegisterAtLevel rewrites, through n (the meta leader), the registry entry
// of node id with feature level level, as the node would register running
// a binary of that level.
func RegisterAtLevel(n *Node, id string, level uint32) error {
	m, ok := n.meta.FSM.Node(id)
	if !ok {
		return fmt.Errorf("node %s is not registered", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := n.engine.Propose(ctx, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_RegisterNode{RegisterNode: &raftcmdv1.RegisterNode{
		Id: m.ID, RaftAddr: m.RaftAddr, ApiAddr: m.APIAddr, FeatureLevel: level}}})
	return err
}

// ForwardingHeader is the header that opens a connection on a peer port's
// forwarding channel from a node of cluster (a cluster ID, or "").
func ForwardingHeader(cluster string) []byte {
	return peermux.AppendHeader(nil, peermux.ChannelForward, cluster)
}
