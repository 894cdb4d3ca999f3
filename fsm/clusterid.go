package fsm

import (
	"fmt"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// ValidClusterID reports whether id has the form of a cluster ID: 32
// lowercase hex digits.
func ValidClusterID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, r := range id {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// ClusterID is the cluster's ID as the meta group recorded it ("" before).
func (f *FSM) ClusterID() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.meta.clusterID
}

// applySetClusterID records the cluster ID once; the same ID again is a
// no-op (a retried proposal), another is refused. A data group refuses
// any before it gets here (refuseMetaCommand).
func (m *metaState) applySetClusterID(c *raftcmdv1.SetClusterID) interface{} {
	id := c.GetId()
	switch {
	case !ValidClusterID(id):
		return fmt.Errorf("%w: id: %q is not 32 lowercase hex digits", ErrClusterID, id)
	case m.clusterID != "" && m.clusterID != id:
		return fmt.Errorf("%w: the cluster's ID is %s, not %s", ErrClusterID, m.clusterID, id)
	}
	m.clusterID = id
	return nil
}
