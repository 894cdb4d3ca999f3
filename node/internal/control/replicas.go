package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	"github.com/quorate/quorate/node/internal/replica"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// Replica moves. The shard map says which nodes hold each data group; the
// group's Raft configuration follows it, one membership change at a time,
// driven by whichever replica leads the group (so a move survives the loss
// of any node driving it: the next leader reads the same map and goes on):
//
//  1. a replica in the map but not in the configuration is added as a
//     non-voter; it starts empty (only founders bootstrap) and catches up
//     from the leader's log or a snapshot;
//  2. once it has applied to within maxPromoteLag of the leader's commit
//     index, it is promoted to voter;
//  3. once every replica of the map is a voter, servers the map no longer
//     lists are removed — the leader itself last (it steps down and its
//     raft shuts down once the change commits).
//
// A node closes its replica of a group the map no longer places on it once
// the replica stopped, or it has been out of the map for removeGrace and
// does not lead (a removed follower never hears of its removal), and
// deletes its files.

// maxPromoteLag is how far (in entries) a non-voter may trail the leader's
// commit index and still be promoted.
const maxPromoteLag = 256

// removeGrace is how long a node keeps a replica the map no longer places
// on it before closing it, leaving the group's leader time to hand its
// place to the new replica.
const removeGrace = 30 * time.Second

// syncMembers, on the leader of data group g, makes one change of g's Raft
// configuration toward want's replicas, if one is due.
func (c *Controller) syncMembers(ctx context.Context, g *replica.Replica, want shard.Group) {
	f := g.Raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	servers := f.Configuration().Servers
	have := make(map[string]raft.Server, len(servers))
	for _, s := range servers {
		have[string(s.ID)] = s
	}
	timeout := c.cfg.RequestTimeout
	allVoters := true
	for _, id := range want.Replicas {
		s, ok := have[id]
		if ok && s.Suffrage == raft.Voter {
			continue
		}
		allVoters = false
		m, registered := c.meta.FSM.Node(id)
		if !registered || m.RaftAddr == "" {
			continue
		}
		addr := raft.ServerAddress(m.RaftAddr)
		if !ok {
			err := replica.WaitFuture(ctx, g.Raft.AddNonvoter(raft.ServerID(id), addr, 0, timeout))
			c.log.Info("adding a replica as non-voter", "group", g.ID, "node", id, "err", err)
			return
		}
		if lag, err := c.replicaLag(ctx, g, m.RaftAddr); err != nil || lag > maxPromoteLag {
			c.log.Debug("replica catching up", "group", g.ID, "node", id, "lag", lag, "err", err)
			continue
		}
		err := replica.WaitFuture(ctx, g.Raft.AddVoter(raft.ServerID(id), addr, 0, timeout))
		c.log.Info("promoting a replica to voter", "group", g.ID, "node", id, "err", err)
		return
	}
	if !allVoters {
		return
	}
	// Every wanted replica votes: remove the others, this node last — and
	// rather than remove itself (which costs the group an election), the
	// leader hands leadership to a wanted voter, which removes it.
	for _, last := range []bool{false, true} {
		for _, s := range servers {
			id := string(s.ID)
			if slices.Contains(want.Replicas, id) || (id == c.cfg.ID) != last {
				continue
			}
			if last && c.transferLeadership(ctx, g, have, want.Replicas) {
				return
			}
			err := replica.WaitFuture(ctx, g.Raft.RemoveServer(s.ID, 0, timeout))
			c.log.Info("removing a replica the map no longer lists", "group", g.ID, "node", id, "err", err)
			return
		}
	}
	// The configuration is the map's: the preferred leader leads, once this
	// leader has led for a while (not a transfer per election).
	now, p := time.Now(), c.paceOf(g)
	if want.Replicas[0] != c.cfg.ID && now.Sub(p.leadingSince) > leaderHold && now.Sub(p.lastTransfer) > transferEvery {
		c.transferLeadership(ctx, g, have, want.Replicas[:1])
	}
}

// Leadership transfers (to the preferred leader, or away from a leader
// leaving its group) wait leaderHold after an election and are tried at
// most once per transferEvery per group; the target must be a voter that
// applied to within maxTransferLag of the commit index (raft's transfer
// catches it up, but only for an election timeout).
const (
	leaderHold     = 2 * time.Second
	transferEvery  = 10 * time.Second
	maxTransferLag = 16
)

// quiesce holds g's group commit and waits until every entry proposed
// before is applied, so that a leadership transfer leaves no entry in
// flight (an entry in flight when a leader steps down has an unknown
// outcome for its callers). The caller releases g.batch.
func (c *Controller) quiesce(ctx context.Context, g *replica.Replica) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	select {
	case <-g.Batch.Hold():
	case <-ctx.Done():
		return fmt.Errorf("entries still in flight: %w", ctx.Err())
	}
	return replica.WaitFuture(ctx, g.Raft.Barrier(time.Second))
}

// transferLeadership hands g's leadership to the first of candidates that
// is a caught-up voter (other than this node) and reports whether it did.
func (c *Controller) transferLeadership(ctx context.Context, g *replica.Replica, have map[string]raft.Server, candidates []string) bool {
	for _, id := range candidates {
		s, ok := have[id]
		if id == c.cfg.ID || !ok || s.Suffrage != raft.Voter {
			continue
		}
		m, registered := c.meta.FSM.Node(id)
		if !registered || m.RaftAddr == "" {
			continue
		}
		if lag, err := c.replicaLag(ctx, g, m.RaftAddr); err != nil || lag > maxTransferLag {
			continue
		}
		c.paceOf(g).lastTransfer = time.Now()
		err := c.quiesce(ctx, g)
		if err == nil {
			err = replica.WaitFuture(ctx, g.Raft.LeadershipTransferToServer(s.ID, s.Address))
		}
		g.Batch.Release()
		c.log.Info("handing leadership over", "group", g.ID, "to", id, "err", err)
		return err == nil
	}
	return false
}

// replicaLag asks the node at raftAddr (over the peer mux) how far its
// replica of g trails this leader's commit index.
func (c *Controller) replicaLag(ctx context.Context, g *replica.Replica, raftAddr string) (uint64, error) {
	gs, err := c.peerGroupState(ctx, raftAddr, g.ID, c.cfg.RequestTimeout)
	if err != nil {
		return 0, err
	}
	if gs == nil {
		return 0, fmt.Errorf("node at %s has no replica of group %d yet", raftAddr, g.ID)
	}
	if commit, applied := g.Raft.CommitIndex(), gs.GetLastAppliedIndex(); applied < commit {
		return commit - applied, nil
	}
	return 0, nil
}

// peerGroupState asks the node at raftAddr (over the peer port, within
// timeout) for the state of its replica of group gid: nil when it hosts
// none.
func (c *Controller) peerGroupState(ctx context.Context, raftAddr string, gid shard.GroupID, timeout time.Duration) (*quoratev1.GroupState, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.peerPorts.At(raftAddr).Admin.NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
	if err != nil {
		return nil, err
	}
	for _, gs := range resp.Msg.GetNode().GetGroups() {
		if gs.GetId() == uint32(gid) {
			return gs, nil
		}
	}
	return nil, nil
}

// askReplicas asks g's replicas on the other nodes, in turn, for their
// state of g until found accepts one, and reports whether it did.
func (c *Controller) askReplicas(ctx context.Context, g shard.Group, timeout time.Duration, found func(*quoratev1.GroupState) bool) bool {
	for _, id := range g.Replicas {
		m, ok := c.meta.FSM.Node(id)
		if id == c.cfg.ID || !ok || m.RaftAddr == "" {
			continue
		}
		if gs, err := c.peerGroupState(ctx, m.RaftAddr, g.ID, timeout); err == nil && gs != nil && found(gs) {
			return true
		}
	}
	return false
}

// closeUnplaced closes (and deletes) this node's replicas of groups the map
// no longer places here, once each stopped or removeGrace passed, and
// replicas whose raft stopped (removed from their group) that the map
// places here again.
func (c *Controller) closeUnplaced(m shard.Map) {
	now := time.Now()
	for _, g := range c.replicas.Sorted() {
		p := c.paceOf(g)
		stopped := g.Raft.State() == raft.Shutdown
		if sg, ok := m.Group(g.ID); ok && slices.Contains(sg.Replicas, c.cfg.ID) {
			p.unplacedSince = time.Time{}
			if !stopped {
				continue
			}
			// Removed from the group (its raft stopped) and placed here
			// again since: close it; the next reconcile opens an empty
			// replica, which the group's leader brings in as new.
		} else {
			if p.unplacedSince.IsZero() {
				p.unplacedSince = now
			}
			if !stopped && (g.IsLeader() || now.Sub(p.unplacedSince) < removeGrace) && !c.removedFrom(g, m) {
				continue
			}
		}
		if !c.replicas.Remove(g) {
			continue // closed meanwhile, by the node closing (Close, without Run's stop)
		}
		delete(c.pace, g.ID)
		err := g.Close()
		if err == nil {
			err = errors.Join(c.shared.Drop(uint32(g.ID)), replica.RemoveDir(g.Dir))
		}
		c.log.Info("closed a replica the map no longer places here", "group", g.ID, "err", err)
	}
}

// removedFrom reports whether the current leader of g (asked among the
// group's replicas in the map) leads a configuration without this node: a
// removed follower never hears of its removal from the leader itself.
func (c *Controller) removedFrom(g *replica.Replica, m shard.Map) bool {
	sg, ok := m.Group(g.ID)
	if g.IsLeader() || !ok {
		return false
	}
	removed := false
	c.askReplicas(context.Background(), sg, 500*time.Millisecond, func(gs *quoratev1.GroupState) bool {
		if gs.GetRole() != "leader" {
			return false
		}
		removed = !slices.Contains(gs.GetVoters(), c.cfg.ID) && !slices.Contains(gs.GetNonvoters(), c.cfg.ID)
		return true
	})
	return removed
}

// MoveReplica, on the meta leader, plans the move on the meta leader's map and writes
// it (changeMap). A move already in the map answers its epoch.
func (c *Controller) MoveReplica(ctx context.Context, r *quoratev1.MoveReplicaRequest) (uint64, error) {
	epoch, _, err := c.changeMap(ctx, ActorOf(ctx, fmt.Sprintf("replica move group %d %s→%s", r.GetGroup(), r.GetFrom(), r.GetTo())), func(m shard.Map) (shard.Map, uint32, error) {
		if g, ok := m.Group(shard.GroupID(r.GetGroup())); ok && slices.Contains(g.Replicas, r.GetTo()) && !slices.Contains(g.Replicas, r.GetFrom()) {
			return m, 0, nil // done already (a retry)
		}
		if _, ok := c.meta.FSM.Node(r.GetTo()); !ok && r.GetTo() != "" {
			return shard.Map{}, 0, engine.BadRequest("to", "node %s is not registered", admission.Quote(r.GetTo()))
		}
		next, err := m.MoveReplica(shard.GroupID(r.GetGroup()), r.GetFrom(), r.GetTo())
		return next, 1, err
	})
	return epoch, err
}

// DrainNode, on the meta leader, moves every data group replica off node
// id in one shard map change, onto the nodes that may take replicas
// (placeableNodes).
func (c *Controller) DrainNode(ctx context.Context, id string) (out *quoratev1.DrainNodeResponse, err error) {
	out = &quoratev1.DrainNodeResponse{}
	ids, left, err := c.placeableNodes(ctx)
	if err != nil {
		return nil, err
	}
	out.MapEpoch, out.Moves, err = c.changeMap(ctx, ActorOf(ctx, "node drain "+id), func(m shard.Map) (shard.Map, uint32, error) {
		if _, ok := c.meta.FSM.Node(id); !ok {
			return shard.Map{}, 0, engine.BadRequest("id", "node %s is not registered", admission.Quote(id))
		}
		next, err := m.Drain(id, ids)
		if errors.Is(err, shard.ErrNoChange) {
			return m, 0, nil
		}
		var fe *admission.FieldError
		if errors.As(err, &fe) && len(left) > 0 && !errors.Is(err, shard.ErrForming) {
			return m, 0, engine.BadRequest(fe.Field, "%s; not candidates: %s", fe.Reason, describeLeftOut(left))
		}
		if err != nil {
			return m, 0, err
		}
		moves := uint32(0)
		for i, g := range m.Groups {
			if !slices.Equal(g.Replicas, next.Groups[i].Replicas) {
				moves++
			}
		}
		return next, moves, err
	})
	return out, err
}

// Rebalance, on the meta leader, evens out the replicas over the nodes
// that may take them (placeableNodes) in one shard map change; with
// dryRun, it only answers the changes it would make.
func (c *Controller) Rebalance(ctx context.Context, dryRun bool) (*quoratev1.RebalanceResponse, error) {
	out := &quoratev1.RebalanceResponse{}
	nodes, left, err := c.placeableNodes(ctx)
	if err != nil {
		return nil, err
	}
	if len(left) > 0 {
		c.log.Warn("rebalance leaves nodes out", "nodes", describeLeftOut(left))
	}
	epoch, _, err := c.changeMap(ctx, ActorOf(ctx, "rebalance"), func(m shard.Map) (shard.Map, uint32, error) {
		next, changes, err := m.Rebalance(nodes)
		out.Changes = changes
		if err != nil || dryRun {
			return m, 0, err
		}
		return next, uint32(len(changes)), nil
	})
	out.MapEpoch = epoch
	if err == nil && len(out.Changes) > 0 && !dryRun {
		c.log.Info("rebalanced", "epoch", epoch, "changes", out.Changes)
	}
	return out, err
}

// changeMap plans a change of the meta leader's shard map with plan and
// writes it with a compare-and-set on the epoch, planning again when the map
// changed meanwhile. A plan that returns the map unchanged writes nothing.
// Plan errors that are shard's field errors (an *admission.FieldError not
// wrapping admission.ErrInvalidRequest) become request field errors. The
// change is recorded in the meta group's audit trail with actor (ActorOf),
// or not at all with nil (a change the control plane makes on its own).
func (c *Controller) changeMap(ctx context.Context, actor *raftcmdv1.Actor, plan func(shard.Map) (shard.Map, uint32, error)) (uint64, uint32, error) {
	for {
		m, ok := c.meta.FSM.ShardMap()
		if !ok {
			return 0, 0, engine.ErrNoShardMap
		}
		next, count, err := plan(m)
		if errors.Is(err, shard.ErrForming) {
			// A group forms within moments of its creation: retry.
			return 0, 0, fmt.Errorf("%w: %v", engine.ErrNotProposed, err)
		}
		var fe *admission.FieldError
		if errors.As(err, &fe) && !errors.Is(err, admission.ErrInvalidRequest) {
			return 0, 0, engine.BadRequest(fe.Field, "%s", fe.Reason)
		}
		if err != nil {
			return 0, 0, err
		}
		if next.Epoch == m.Epoch {
			return m.Epoch, count, nil
		}
		_, err = c.req.ProposeTo(ctx, engine.Dest{Replica: c.meta, ID: shard.MetaGroup}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_SetShardMap{
			SetShardMap: &raftcmdv1.SetShardMap{ExpectEpoch: m.Epoch, Map: fsm.ShardMapToProto(next)}}, Actor: actor})
		if errors.Is(err, fsm.ErrMapConflict) {
			continue
		}
		if err != nil {
			return 0, 0, err
		}
		c.log.Info("shard map changed", "epoch", next.Epoch, "changes", count)
		return next.Epoch, count, nil
	}
}
