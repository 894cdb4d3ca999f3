package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// groupInterval is how often a node reconciles its data groups with the
// shard map.
const groupInterval = 100 * time.Millisecond

// dataGroups are the data group replicas this node hosts.
type dataGroups struct {
	mu   sync.RWMutex
	m    map[shard.GroupID]*group
	hlog hclog.Logger
	// damaged are the replicas not running because their files are
	// damaged (damaged.go).
	damaged map[shard.GroupID]*damagedReplica
}

// dataGroup returns the replica of data group id hosted here, or nil.
func (n *Node) dataGroup(id shard.GroupID) *group {
	n.groups.mu.RLock()
	defer n.groups.mu.RUnlock()
	return n.groups.m[id]
}

// hosted returns every group replica on this node, the meta group first,
// then data groups by ID.
func (n *Node) hosted() []*group {
	n.groups.mu.RLock()
	out := make([]*group, 0, len(n.groups.m)+1)
	for _, g := range n.groups.m {
		out = append(out, g)
	}
	n.groups.mu.RUnlock()
	slices.SortFunc(out, func(a, b *group) int { return int(a.id) - int(b.id) })
	return append([]*group{n.meta}, out...)
}

// groupLoop keeps this node's data groups in line with the shard map until
// ctx is done: the meta leader creates the map once the expected nodes have
// registered; every node opens the replicas the map places on it; the leader
// of each data group brings the group's ownership and policy table up to the
// meta group's.
func (n *Node) groupLoop(ctx context.Context) {
	every(ctx, groupInterval, func() { n.reconcile(ctx) })
}

func (n *Node) reconcile(ctx context.Context) {
	m, ok := n.meta.fsm.ShardMap()
	if !ok {
		if n.cfg.DataGroups > 0 && n.meta.isLeader() {
			n.createShardMap(ctx)
		}
		return
	}
	for _, g := range m.Groups {
		if !slices.Contains(g.Replicas, n.cfg.ID) || n.dataGroup(g.ID) != nil || !n.openDue(g.ID) {
			continue
		}
		if err := n.openDataGroup(g); err != nil {
			n.openFailed(g.ID, err)
		}
	}
	n.forgetDamaged(func(id shard.GroupID) bool {
		sg, ok := m.Group(id)
		return ok && slices.Contains(sg.Replicas, n.cfg.ID)
	})
	for _, g := range n.hosted()[1:] {
		if !g.isLeader() {
			g.leadingSince = time.Time{}
			continue
		}
		if g.leadingSince.IsZero() {
			g.leadingSince = time.Now()
		}
		n.syncGroup(ctx, g, m)
		if sg, ok := m.Group(g.id); ok {
			n.syncMembers(ctx, g, sg)
		}
	}
	n.closeUnplaced(m)
	if n.meta.isLeader() {
		n.markFormed(ctx, m)
	}
}

// markFormed, on the meta leader, clears Forming on the groups a replica
// reports working (it applied the group's ownership): from then on their
// replicas may move.
func (n *Node) markFormed(ctx context.Context, m shard.Map) {
	var formed []shard.GroupID
	for _, g := range m.Groups {
		if g.Forming && n.groupWorking(ctx, g) {
			formed = append(formed, g.ID)
		}
	}
	if len(formed) == 0 {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	_, _, err := n.changeMap(pctx, func(m shard.Map) (shard.Map, uint32, error) {
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
		n.log.Debug("marking groups formed", "groups", formed, "err", err)
		return
	}
	n.log.Info("groups formed", "groups", formed)
}

// groupWorking reports whether a replica of g (this node's, else one asked
// over the peer port) has applied g's ownership.
func (n *Node) groupWorking(ctx context.Context, g shard.Group) bool {
	if dg := n.dataGroup(g.ID); dg != nil {
		if _, _, _, ok := dg.fsm.Ownership(); ok {
			return true
		}
	}
	return n.askReplicas(ctx, g, time.Second, func(gs *quoratev1.GroupState) bool { return gs.GetMapEpoch() > 0 })
}

// createShardMap proposes the first shard map once ExpectNodes nodes have
// registered: DataGroups groups over them, DataReplicas replicas each.
func (n *Node) createShardMap(ctx context.Context) {
	nodes := n.meta.fsm.Nodes()
	if len(nodes) < max(1, n.cfg.ExpectNodes) {
		return
	}
	ids := make([]string, len(nodes))
	for i, m := range nodes {
		ids[i] = m.ID
	}
	m, err := shard.InitialMap(ids, n.cfg.DataGroups, DataReplicas)
	if err != nil {
		n.log.Error("planning the shard map", "err", err)
		return
	}
	pctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	_, err = n.proposeTo(pctx, dest{g: n.meta}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_SetShardMap{
		SetShardMap: &raftcmdv1.SetShardMap{ExpectEpoch: 0, Map: fsm.ShardMapToProto(m)}}})
	switch {
	case err == nil:
		n.log.Info("created the shard map", "groups", len(m.Groups), "nodes", len(ids), "epoch", m.Epoch)
	case !errors.Is(err, fsm.ErrMapConflict):
		n.log.Debug("creating the shard map", "err", err)
	}
}

// openDataGroup starts this node's replica of g. A founder of g without
// state bootstraps it with the founders at their registered Raft addresses;
// any other replica starts empty and waits for g's leader to add it.
func (n *Node) openDataGroup(g shard.Group) error {
	var boot []raft.Server
	founders := g.Founders
	if !slices.Contains(founders, n.cfg.ID) {
		founders = nil
	}
	for _, id := range founders {
		m, ok := n.meta.fsm.Node(id)
		if !ok {
			return errors.New("replica " + id + " is not registered yet")
		}
		boot = append(boot, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(m.RaftAddr)})
	}
	n.groups.mu.Lock()
	defer n.groups.mu.Unlock()
	if n.groups.m[g.ID] != nil {
		return nil
	}
	rg, err := n.openGroup(g.ID, boot, n.groups.hlog)
	if err != nil {
		return err
	}
	n.groups.m[g.ID] = rg
	delete(n.groups.damaged, g.ID)
	n.log.Info("opened data group", "group", g.ID, "replicas", g.Replicas, "had_state", rg.hadState)
	return nil
}

// syncGroup, on the leader of data group g, proposes the group's ownership
// when the map moved on, and the meta group's policy table when it differs.
func (n *Node) syncGroup(ctx context.Context, g *group, m shard.Map) {
	pctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	if _, epoch, _, ok := g.fsm.Ownership(); !ok || epoch < m.Epoch {
		set := &raftcmdv1.SetOwnership{Group: uint32(g.id), MapEpoch: m.Epoch}
		for _, a := range m.Owned(g.id) {
			set.Ranges = append(set.Ranges, fsm.AssignmentToProto(a))
		}
		if _, err := n.proposeTo(pctx, dest{g: g, id: g.id}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_SetOwnership{SetOwnership: set}}); err != nil {
			n.log.Debug("setting ownership", "group", g.id, "err", err)
			return
		}
	}
	if err := n.syncPolicies(pctx, g); err != nil {
		n.log.Debug("copying policies", "group", g.id, "err", err)
	}
}

// syncPolicies copies the meta group's policy table into data group g (led
// here) when g's copy is older than the table's last change. It compares
// two indexes, not the tables, except right after a restore of the meta
// replica, when the date of the last change is not known.
func (n *Node) syncPolicies(ctx context.Context, g *group) error {
	changed, known := n.meta.fsm.PoliciesChangedAt()
	if known && g.fsm.PoliciesMetaIndex() >= changed {
		return nil
	}
	// The table and its index are read together: a copy dated later than
	// its content could shadow a newer copy dated the same (SetPolicies
	// ignores a table not newer than the group's).
	want, index := n.meta.fsm.PoliciesAt()
	if index == 0 || !known && slices.Equal(g.fsm.Policies(), want) {
		return nil
	}
	set := &raftcmdv1.SetPolicies{MetaIndex: index}
	for _, p := range want {
		set.Policies = append(set.Policies, &raftcmdv1.PolicyRecord{Policy: fsm.PolicyToProto(p.Policy), Version: p.Version})
	}
	_, err := n.proposeTo(ctx, dest{g: g, id: g.id}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_SetPolicies{SetPolicies: set}})
	return err
}

// closeGroups stops every data group replica.
func (n *Node) closeGroups() error {
	n.groups.mu.Lock()
	defer n.groups.mu.Unlock()
	var errs []error
	for id, g := range n.groups.m {
		errs = append(errs, g.close())
		delete(n.groups.m, id)
	}
	return errors.Join(errs...)
}

// catchUpMeta waits until this node's meta replica has applied everything
// the meta leader had committed when asked: then it knows every policy
// change acknowledged before the call.
func (n *Node) catchUpMeta(ctx context.Context) error {
	var commit uint64
	if n.meta.isLeader() {
		return n.caughtUp(ctx, n.meta)
	}
	addr, _ := n.leader()
	if addr == "" {
		return fmt.Errorf("%w: no meta leader known", ErrNotProposed)
	}
	resp, err := n.peers.get("http://"+addr).admin.NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
	if err != nil {
		return err
	}
	// Raft's applied index counts entries handed to the state machine, not
	// applied by it: wait for the state machine itself to reach the last
	// command the leader's applied (a leader from before that field: its
	// commit index, handed over).
	commit = resp.Msg.GetNode().GetMetaFsmAppliedIndex()
	applied := n.meta.fsm.AppliedIndex
	if commit == 0 {
		commit, applied = resp.Msg.GetNode().GetCommitIndex(), n.meta.raft.AppliedIndex
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
func (n *Node) caughtUp(ctx context.Context, g *group) error {
	if term := g.raft.CurrentTerm(); g.caughtUpTerm.Load() != term {
		if err := n.barrier(ctx, g); err != nil {
			return err
		}
		g.caughtUpTerm.Store(term)
	}
	return waitFuture(ctx, g.raft.VerifyLeader())
}

// barrier returns once every command g's log held when it was called is
// applied to this replica, which leads g.
func (n *Node) barrier(ctx context.Context, g *group) error {
	return waitFuture(ctx, g.raft.Barrier(time.Until(deadlineOr(ctx, n.cfg.RequestTimeout))))
}

// deadlineOr is ctx's deadline, or d from now.
func deadlineOr(ctx context.Context, d time.Duration) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(d)
}
