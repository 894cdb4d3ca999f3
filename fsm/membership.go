package fsm

import (
	"fmt"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// applyRegisterNode records a node's addresses and feature level. Nodes
// always send their level; a registration without one comes from a binary
// older than feature levels, which a cluster whose nodes all run
// FeatureClusterID or later no longer lets join. Such a cluster refuses it
// (the gate keeps older logs applying as they did); a nameless one is
// refused always, as no node proposes it.
func (m *metaState) applyRegisterNode(r *raftcmdv1.RegisterNode) interface{} {
	if r.GetId() == "" {
		return fmt.Errorf("%w: id: must not be empty", ErrBadRegistration)
	}
	if r.GetFeatureLevel() == 0 && len(m.nodes) > 0 && m.minFeatureLevel() >= FeatureClusterID {
		return fmt.Errorf("%w: node %q: feature_level: must be set (the cluster's nodes are all at level %d or above)",
			ErrBadRegistration, r.GetId(), FeatureClusterID)
	}
	m.nodes[r.GetId()] = Node{ID: r.GetId(), RaftAddr: r.GetRaftAddr(), APIAddr: r.GetApiAddr(), FeatureLevel: r.GetFeatureLevel()}
	return nil
}
