package node

import (
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/shard"
)

// GroupLastNow is the time of n's replica of data group gid as of its last
// applied entry (ok false when n hosts none).
func GroupLastNow(n *Node, gid uint32) (int64, bool) {
	g := n.engine.DataGroup(shard.GroupID(gid))
	if g == nil {
		return 0, false
	}
	return g.FSM.LastNow(), true
}

// GroupImport is n's replica's record of migration into data group gid.
func GroupImport(n *Node, gid uint32, migration uint64) (fsm.ImportStatus, bool) {
	g := n.engine.DataGroup(shard.GroupID(gid))
	if g == nil {
		return fsm.ImportStatus{}, false
	}
	return g.FSM.Import(migration)
}

// GroupFrozen is the slots of data group gid that n's replica has frozen,
// by migration.
func GroupFrozen(n *Node, gid uint32) map[uint64]shard.SlotRange {
	g := n.engine.DataGroup(shard.GroupID(gid))
	if g == nil {
		return nil
	}
	return g.FSM.Frozen()
}

// GroupHasPolicy reports whether n's replica of data group gid holds a copy
// of policy name (false when n hosts none).
func GroupHasPolicy(n *Node, gid uint32, name string) bool {
	g := n.engine.DataGroup(shard.GroupID(gid))
	if g == nil {
		return false
	}
	for _, p := range g.FSM.Policies() {
		if p.Policy.Name == name {
			return true
		}
	}
	return false
}
