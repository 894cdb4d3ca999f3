package node

import (
	"errors"
	"fmt"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/replica"
	"github.com/quorate/quorate/shard"
)

// dest is the Raft group a request goes to, as this node's replica of the
// meta group sees it now.
type dest struct {
	g        *replica.Replica // the group's replica on this node; nil when it hosts none
	id       shard.GroupID
	epoch    uint64   // shard-map epoch stamped on data commands
	replicas []string // node IDs of the group's replicas (data groups)
}

// errNoShardMap: the cluster is configured with data groups but has no shard
// map yet; nothing is proposed (retry).
var errNoShardMap = fmt.Errorf("%w: the cluster has no shard map yet", ErrNotProposed)

// destFor resolves where r goes: the meta group, or the data group of r.key
// by the shard map. Without a shard map, data stays in the meta group (a
// single-group cluster) unless this node expects data groups.
func (n *Node) destFor(r routing) (dest, error) {
	if !r.data {
		return n.metaDest(), nil
	}
	rt, ok := n.meta.FSM.Route(r.key)
	if !ok {
		if n.cfg.DataGroups > 0 {
			return dest{}, errNoShardMap
		}
		return n.metaDest(), nil
	}
	return dest{g: n.dataGroup(rt.Group), id: rt.Group, epoch: rt.MapEpoch, replicas: rt.Replicas}, nil
}

// forwardAddr is the peer-mux (Raft) address to forward a request for d to
// on attempt number attempt: the group leader's when this node has a
// replica that knows it, else one of the group's replicas in turn ("" when
// none is known).
func (n *Node) forwardAddr(d dest, attempt int) (addr, leaderID string) {
	if d.g != nil {
		id := d.g.LeaderID()
		if id == "" {
			return "", ""
		}
		m, _ := n.meta.FSM.Node(id)
		return m.RaftAddr, id
	}
	for i := range d.replicas {
		id := d.replicas[(attempt+i)%len(d.replicas)]
		if id == n.cfg.ID {
			continue
		}
		if m, ok := n.meta.FSM.Node(id); ok && m.RaftAddr != "" {
			return m.RaftAddr, id
		}
	}
	return "", ""
}

// isRouteError reports a data command refused by a group that does not own
// its slot (or saw a stale epoch, or the slot is moving to another group):
// nothing was applied; the meta replica's
// map catches up and the request is routed again.
func isRouteError(err error) bool {
	return errors.Is(err, fsm.ErrWrongGroup) || errors.Is(err, fsm.ErrStaleEpoch) || errors.Is(err, fsm.ErrSlotMoving)
}

// metaDest is the meta group as a destination.
func (n *Node) metaDest() dest { return dest{g: n.meta, id: shard.MetaGroup} }

// hasShardMap reports whether this node's meta replica has a shard map (the
// cluster has data groups) or expects one.
func (n *Node) hasShardMap() bool {
	_, ok := n.meta.FSM.ShardMapEpoch()
	return ok || n.cfg.DataGroups > 0
}
