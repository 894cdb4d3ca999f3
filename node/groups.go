package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/replica"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// groupInterval is how often a node reconciles its data groups with the
// shard map.
const groupInterval = 100 * time.Millisecond

// dataGroup returns the replica of data group id hosted here, or nil.
func (n *Node) dataGroup(id shard.GroupID) *replica.Replica { return n.groups.Get(id) }

// hosted returns every group replica on this node, the meta group first,
// then data groups by ID.
func (n *Node) hosted() []*replica.Replica {
	return append([]*replica.Replica{n.meta}, n.groups.Sorted()...)
}

// groupLoop keeps this node's data groups in line with the shard map until
// ctx is done: the meta leader creates the map once the expected nodes have
// registered; every node opens the replicas the map places on it; the leader
// of each data group brings the group's ownership and policy table up to the
// meta group's.
func (c *controller) groupLoop(ctx context.Context) {
	every(ctx, groupInterval, func() { c.reconcile(ctx) })
}

func (c *controller) reconcile(ctx context.Context) {
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
func (c *controller) markFormed(ctx context.Context, m shard.Map) {
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
func (c *controller) groupWorking(ctx context.Context, g shard.Group) bool {
	if dg := c.replicas.Get(g.ID); dg != nil {
		if _, _, _, ok := dg.FSM.Ownership(); ok {
			return true
		}
	}
	return c.askReplicas(ctx, g, time.Second, func(gs *quoratev1.GroupState) bool { return gs.GetMapEpoch() > 0 })
}

// createShardMap proposes the first shard map once ExpectNodes nodes have
// registered: DataGroups groups over them, DataReplicas replicas each.
func (c *controller) createShardMap(ctx context.Context) {
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
	_, err = c.req.proposeTo(pctx, dest{g: c.meta}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_SetShardMap{
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
func (c *controller) openDataGroup(g shard.Group) error {
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
func (c *controller) syncGroup(ctx context.Context, g *replica.Replica, m shard.Map) {
	pctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	if _, epoch, _, ok := g.FSM.Ownership(); !ok || epoch < m.Epoch {
		set := &raftcmdv1.SetOwnership{Group: uint32(g.ID), MapEpoch: m.Epoch}
		for _, a := range m.Owned(g.ID) {
			set.Ranges = append(set.Ranges, fsm.AssignmentToProto(a))
		}
		if _, err := c.req.proposeTo(pctx, dest{g: g, id: g.ID}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_SetOwnership{SetOwnership: set}}); err != nil {
			c.log.Debug("setting ownership", "group", g.ID, "err", err)
			return
		}
	}
	if err := c.req.syncPolicies(pctx, g); err != nil {
		c.log.Debug("copying policies", "group", g.ID, "err", err)
	}
}

// syncPolicies copies the meta group's policy table into data group g (led
// here) when g's copy is older than the table's last change. It compares
// two indexes, not the tables, except right after a restore of the meta
// replica, when the date of the last change is not known.
func (n *Node) syncPolicies(ctx context.Context, g *replica.Replica) error {
	changed, known := n.meta.FSM.PoliciesChangedAt()
	if known && g.FSM.PoliciesMetaIndex() >= changed {
		return nil
	}
	// The table and its index are read together: a copy dated later than
	// its content could shadow a newer copy dated the same (SetPolicies
	// ignores a table not newer than the group's).
	want, index := n.meta.FSM.PoliciesAt()
	if index == 0 || !known && slices.Equal(g.FSM.Policies(), want) {
		return nil
	}
	set := &raftcmdv1.SetPolicies{MetaIndex: index}
	for _, p := range want {
		set.Policies = append(set.Policies, &raftcmdv1.PolicyRecord{Policy: fsm.PolicyToProto(p.Policy), Version: p.Version})
	}
	_, err := n.proposeTo(ctx, dest{g: g, id: g.ID}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_SetPolicies{SetPolicies: set}})
	return err
}

// closeGroups stops every data group replica.
func (n *Node) closeGroups() error { return n.groups.CloseAll() }

// catchUpMeta waits until this node's meta replica has applied everything
// the meta leader had committed when asked: then it knows every policy
// change acknowledged before the call.
func (n *Node) catchUpMeta(ctx context.Context) error {
	var commit uint64
	if n.meta.IsLeader() {
		return n.caughtUp(ctx, n.meta)
	}
	addr, _ := n.meta.Raft.LeaderWithID()
	if addr == "" {
		return fmt.Errorf("%w: no meta leader known", ErrNotProposed)
	}
	resp, err := n.peerPorts.at(string(addr)).admin.NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
	if err != nil {
		return err
	}
	// Raft's applied index counts entries handed to the state machine, not
	// applied by it: wait for the state machine itself to reach the last
	// command the leader's applied (a leader from before that field: its
	// commit index, handed over).
	commit = resp.Msg.GetNode().GetMetaFsmAppliedIndex()
	applied := n.meta.FSM.AppliedIndex
	if commit == 0 {
		commit, applied = resp.Msg.GetNode().GetCommitIndex(), n.meta.Raft.AppliedIndex
	}
	for applied() < commit {
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// caughtUp returns once g's replica here, as leader, has applied every
// command acknowledged before the call (a linearizable read of its FSM).
// Commands acknowledged in this term were applied here before they were
// acknowledged; those of earlier terms are once a barrier of this term is
// (one barrier per term, not per call). Confirming leadership then shows
// that no newer leader acknowledged anything.
func (n *Node) caughtUp(ctx context.Context, g *replica.Replica) error {
	if term := g.Raft.CurrentTerm(); g.CaughtUpTerm.Load() != term {
		if err := n.barrier(ctx, g); err != nil {
			return err
		}
		g.CaughtUpTerm.Store(term)
	}
	return replica.WaitFuture(ctx, g.Raft.VerifyLeader())
}

// barrier returns once every command g's log held when it was called is
// applied to this replica, which leads g.
func (n *Node) barrier(ctx context.Context, g *replica.Replica) error {
	return replica.WaitFuture(ctx, g.Raft.Barrier(time.Until(deadlineOr(ctx, n.cfg.RequestTimeout))))
}

// deadlineOr is ctx's deadline, or d from now.
func deadlineOr(ctx context.Context, d time.Duration) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(d)
}
