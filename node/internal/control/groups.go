package control

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	"github.com/quorate/quorate/node/internal/replica"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// groupInterval is how often a node reconciles its data groups with the
// shard map.
const groupInterval = 100 * time.Millisecond

// groupLoop keeps this node's data groups in line with the shard map until
// ctx is done: the meta leader creates the map once the expected nodes have
// registered; every node opens the replicas the map places on it; the leader
// of each data group brings the group's ownership and policy table up to the
// meta group's.
func (c *Controller) groupLoop(ctx context.Context) {
	every(ctx, groupInterval, func() { c.reconcile(ctx) })
}

func (c *Controller) reconcile(ctx context.Context) {
	m, ok := c.meta.FSM.ShardMap()
	if !ok {
		if c.cfg.DataGroups > 0 && c.meta.IsLeader() {
			c.createShardMap(ctx)
		}
		return
	}
	for _, g := range m.Groups {
		if !slices.Contains(g.Replicas, c.cfg.ID) || c.replicas.Get(g.ID) != nil || !c.replicas.OpenDue(g.ID) {
			continue
		}
		if err := c.openDataGroup(g); err != nil {
			c.replicas.OpenFailed(g.ID, err, c.log)
		}
	}
	c.replicas.ForgetDamaged(func(id shard.GroupID) bool {
		sg, ok := m.Group(id)
		return ok && slices.Contains(sg.Replicas, c.cfg.ID)
	})
	for _, g := range c.replicas.Sorted() {
		p := c.paceOf(g)
		if !g.IsLeader() {
			p.leadingSince = time.Time{}
			continue
		}
		if p.leadingSince.IsZero() {
			p.leadingSince = time.Now()
		}
		c.syncGroup(ctx, g, m)
		if sg, ok := m.Group(g.ID); ok {
			c.syncMembers(ctx, g, sg)
		}
	}
	c.closeUnplaced(m)
	c.forgetPacing()
	if c.meta.IsLeader() {
		c.markFormed(ctx, m)
	}
}

// markFormed, on the meta leader, clears Forming on the groups a replica
// reports working (it applied the group's ownership): from then on their
// replicas may move.
func (c *Controller) markFormed(ctx context.Context, m shard.Map) {
	var formed []shard.GroupID
	for _, g := range m.Groups {
		if g.Forming && c.groupWorking(ctx, g) {
			formed = append(formed, g.ID)
		}
	}
	if len(formed) == 0 {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	_, _, err := c.changeMap(pctx, nil, func(m shard.Map) (shard.Map, uint32, error) {
		out := m.Clone()
		changed := uint32(0)
		for i, g := range out.Groups {
			if g.Forming && slices.Contains(formed, g.ID) {
				out.Groups[i].Forming = false
				changed++
			}
		}
		if changed > 0 {
			out.Epoch++
		}
		return out, changed, nil
	})
	if err != nil {
		c.log.Debug("marking groups formed", "groups", formed, "err", err)
		return
	}
	c.log.Info("groups formed", "groups", formed)
}

// groupWorking reports whether a replica of g (this node's, else one asked
// over the peer port) has applied g's ownership.
func (c *Controller) groupWorking(ctx context.Context, g shard.Group) bool {
	if dg := c.replicas.Get(g.ID); dg != nil {
		if _, _, _, ok := dg.FSM.Ownership(); ok {
			return true
		}
	}
	return c.askReplicas(ctx, g, time.Second, func(gs *quoratev1.GroupState) bool { return gs.GetMapEpoch() > 0 })
}

// createShardMap proposes the first shard map once ExpectNodes nodes have
// registered: DataGroups groups over them, DataReplicas replicas each.
func (c *Controller) createShardMap(ctx context.Context) {
	nodes := c.meta.FSM.Nodes()
	if len(nodes) < max(1, c.cfg.ExpectNodes) {
		return
	}
	ids := make([]string, len(nodes))
	for i, m := range nodes {
		ids[i] = m.ID
	}
	m, err := shard.InitialMap(ids, c.cfg.DataGroups, DataReplicas)
	if err != nil {
		c.log.Error("planning the shard map", "err", err)
		return
	}
	pctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	_, err = c.req.ProposeTo(pctx, engine.Dest{Replica: c.meta}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_SetShardMap{
		SetShardMap: &raftcmdv1.SetShardMap{ExpectEpoch: 0, Map: fsm.ShardMapToProto(m)}}})
	switch {
	case err == nil:
		c.log.Info("created the shard map", "groups", len(m.Groups), "nodes", len(ids), "epoch", m.Epoch)
	case !errors.Is(err, fsm.ErrMapConflict):
		c.log.Debug("creating the shard map", "err", err)
	}
}

// openDataGroup starts this node's replica of g. A founder of g without
// state bootstraps it with the founders at their registered Raft addresses;
// any other replica starts empty and waits for g's leader to add it.
func (c *Controller) openDataGroup(g shard.Group) error {
	var boot []raft.Server
	founders := g.Founders
	if !slices.Contains(founders, c.cfg.ID) {
		founders = nil
	}
	for _, id := range founders {
		m, ok := c.meta.FSM.Node(id)
		if !ok {
			return errors.New("replica " + id + " is not registered yet")
		}
		boot = append(boot, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(m.RaftAddr)})
	}
	rg, err := c.replicas.Open(g.ID, func() (*replica.Replica, error) { return c.open(g.ID, boot) })
	if rg != nil {
		c.log.Info("opened data group", "group", g.ID, "replicas", g.Replicas, "had_state", rg.HadState)
	}
	return err
}

// syncGroup, on the leader of data group g, proposes the group's ownership
// when the map moved on, and the meta group's policy table when it differs.
func (c *Controller) syncGroup(ctx context.Context, g *replica.Replica, m shard.Map) {
	pctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	if _, epoch, _, ok := g.FSM.Ownership(); !ok || epoch < m.Epoch {
		set := &raftcmdv1.SetOwnership{Group: uint32(g.ID), MapEpoch: m.Epoch}
		for _, a := range m.Owned(g.ID) {
			set.Ranges = append(set.Ranges, fsm.AssignmentToProto(a))
		}
		if _, err := c.req.ProposeTo(pctx, engine.Dest{Replica: g, ID: g.ID}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_SetOwnership{SetOwnership: set}}); err != nil {
			c.log.Debug("setting ownership", "group", g.ID, "err", err)
			return
		}
	}
	if err := c.req.SyncPolicies(pctx, g); err != nil {
		c.log.Debug("copying policies", "group", g.ID, "err", err)
	}
}
