package engine

import (
	"errors"
	"fmt"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/replica"
	"github.com/quorate/quorate/shard"
)

// Dest is the Raft group a request goes to, as this node's replica of the
// meta group sees it now.
type Dest struct {
	Replica *replica.Replica // the group's replica on this node; nil when it hosts none
	ID      shard.GroupID
	Epoch   uint64   // shard-map epoch stamped on data commands
	Nodes   []string // node IDs of the group's replicas (data groups)
}

// ErrNoShardMap: the cluster is configured with data groups but has no shard
// map yet; nothing is proposed (retry).
var ErrNoShardMap = fmt.Errorf("%w: the cluster has no shard map yet", ErrNotProposed)

// DestFor resolves where r goes: the meta group, or the data group of r.key
// by the shard map. Without a shard map, data stays in the meta group (a
// single-group cluster) unless this node expects data groups.
func (n *Engine) DestFor(r Routing) (Dest, error) {
	if !r.Data {
		return n.MetaDest(), nil
	}
	rt, ok := n.meta.FSM.Route(r.Key)
	if !ok {
		if n.cfg.DataGroups > 0 {
			return Dest{}, ErrNoShardMap
		}
		return n.MetaDest(), nil
	}
	return Dest{Replica: n.DataGroup(rt.Group), ID: rt.Group, Epoch: rt.MapEpoch, Nodes: rt.Replicas}, nil
}

// ForwardAddr is the peer-mux (Raft) address to forward a request for d to
// on attempt number attempt: the group leader's when this node has a
// replica that knows it, else one of the group's replicas in turn ("" when
// none is known).
func (n *Engine) ForwardAddr(d Dest, attempt int) (addr, leaderID string) {
	if d.Replica != nil {
		id := d.Replica.LeaderID()
		if id == "" {
			return "", ""
		}
		m, _ := n.meta.FSM.Node(id)
		return m.RaftAddr, id
	}
	for i := range d.Nodes {
		id := d.Nodes[(attempt+i)%len(d.Nodes)]
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

// MetaDest is the meta group as a destination.
func (n *Engine) MetaDest() Dest { return Dest{Replica: n.meta, ID: shard.MetaGroup} }

// HasShardMap reports whether this node's meta replica has a shard map (the
// cluster has data groups) or expects one.
func (n *Engine) HasShardMap() bool {
	_, ok := n.meta.FSM.ShardMapEpoch()
	return ok || n.cfg.DataGroups > 0
}
