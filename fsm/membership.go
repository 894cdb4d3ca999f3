package fsm

import (
	"fmt"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// applyRegisterNode records a node's addresses and feature level. Nodes
// always send both an ID and a level, so a registration without either is
// refused.
func (m *metaState) applyRegisterNode(r *raftcmdv1.RegisterNode) interface{} {
	if r.GetId() == "" {
		return fmt.Errorf("%w: id: must not be empty", ErrBadRegistration)
	}
	if r.GetFeatureLevel() == 0 {
		return fmt.Errorf("%w: node %q: feature_level: must be set", ErrBadRegistration, r.GetId())
	}
	m.nodes[r.GetId()] = Node{ID: r.GetId(), RaftAddr: r.GetRaftAddr(), APIAddr: r.GetApiAddr(), FeatureLevel: r.GetFeatureLevel()}
	return nil
}
