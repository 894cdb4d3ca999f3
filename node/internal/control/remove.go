package control

import (
	"context"
	"errors"
	"fmt"
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

var (
	// ErrNodeHoldsReplicas refuses to remove a node that still holds data
	// group replicas (drain it first, or force).
	ErrNodeHoldsReplicas = errors.New("the node still holds data group replicas")
	// ErrNodeLive refuses to force the removal of a node that still runs:
	// its replicas would be replaced while it still leads or serves them.
	ErrNodeLive = errors.New("the node is running")
	// ErrNotTheNode refuses a join that says of a registered node what the
	// node does not say of itself (its feature level).
	ErrNotTheNode = errors.New("the join does not match the node")
)

// RemoveNode, on the meta leader, removes node id, each step idempotent so a retry (or a
// new leader) finishes what an interrupted call began: with force, drain its
// replicas (the groups' leaders replace them, from the survivors when it is
// dead); delete it from the registry; give its meta vote to a non-voter;
// remove it from the meta group's configuration (this node's own removal
// last of all: it steps down).
func (c *Controller) RemoveNode(ctx context.Context, id string, force bool) error {
	if force {
		if where, live := c.nodeLive(ctx, id); live {
			return fmt.Errorf("%w: node %s answered a status call on its %s: --force is for a node that is gone; "+
				"drain it (quorate admin node drain %s) and remove it without --force, or stop it first", ErrNodeLive, id, where, id)
		}
	}
	if m, ok := c.meta.FSM.ShardMap(); ok {
		held := 0
		for _, g := range m.Groups {
			if slices.Contains(g.Replicas, id) {
				held++
			}
		}
		if held > 0 && !force {
			return fmt.Errorf("%w: %s holds %d; drain it first (quorate admin node drain %s) or force", ErrNodeHoldsReplicas, id, held, id)
		}
		if held > 0 {
			_, _, err := c.changeMap(ctx, ActorOf(ctx, "node remove --force "+id+": drain"), func(m shard.Map) (shard.Map, uint32, error) {
				var ids []string
				for _, nd := range c.meta.FSM.Nodes() {
					ids = append(ids, nd.ID)
				}
				next, err := m.Drain(id, ids)
				if errors.Is(err, shard.ErrNoChange) {
					return m, 0, nil
				}
				return next, uint32(held), err
			})
			if err != nil {
				return err
			}
		}
	}
	if m, ok := c.meta.FSM.ShardMap(); ok && m.IsCordoned(id) {
		// Out of the cluster, out of the cordon: an ID used again is a new node.
		if _, _, err := c.changeMap(ctx, ActorOf(ctx, "node remove "+id+": uncordon"), func(m shard.Map) (shard.Map, uint32, error) { return m.Cordon(id, false), 1, nil }); err != nil {
			return err
		}
	}
	if _, ok := c.meta.FSM.Node(id); ok {
		if _, err := c.req.ProposeTo(ctx, engine.Dest{Replica: c.meta, ID: shard.MetaGroup}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_RemoveNode{
			RemoveNode: &raftcmdv1.RemoveNode{Id: id}}, Actor: ActorOf(ctx, "")}); err != nil {
			return err
		}
	}
	c.joinMu.Lock() // one meta membership change at a time
	defer c.joinMu.Unlock()
	f := c.meta.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("%w: %v", engine.ErrNotProposed, err)
	}
	servers := f.Configuration().Servers
	i := slices.IndexFunc(servers, func(s raft.Server) bool { return string(s.ID) == id })
	if i < 0 {
		return nil
	}
	timeout := c.cfg.RequestTimeout
	if servers[i].Suffrage == raft.Voter {
		for _, s := range servers {
			if s.Suffrage == raft.Nonvoter {
				if err := replica.WaitFuture(ctx, c.meta.Raft.AddVoter(s.ID, s.Address, 0, timeout)); err != nil {
					return fmt.Errorf("%w: promoting %s to take %s's vote: %v", engine.ErrNotProposed, s.ID, id, err)
				}
				c.log.Info("promoted a meta non-voter", "node", s.ID, "replacing", id)
				break
			}
		}
	}
	if err := replica.WaitFuture(ctx, c.meta.Raft.RemoveServer(servers[i].ID, 0, timeout)); err != nil {
		return fmt.Errorf("%w: removing %s from the meta group: %v", engine.ErrOutcomeUnknown, id, err)
	}
	c.log.Info("removed a node", "node", id)
	return nil
}

// AddNode, on the meta leader, records node r in the registry unless it is
// there with the same addresses.
func (c *Controller) AddNode(ctx context.Context, r *quoratev1.AddNodeRequest) error {
	if m, ok := c.meta.FSM.Node(r.GetId()); ok {
		if m.RaftAddr != r.GetRaftAddr() || m.APIAddr != r.GetApiAddr() {
			return engine.BadRequest("id", "node %q is registered with raft address %s and API address %s", m.ID, m.RaftAddr, m.APIAddr)
		}
		return nil
	}
	// Its binary's level is not known until it registers itself: take
	// this one's, so that the cluster's level does not drop meanwhile.
	_, err := c.req.Propose(ctx, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_RegisterNode{RegisterNode: &raftcmdv1.RegisterNode{
		Id: r.GetId(), RaftAddr: r.GetRaftAddr(), ApiAddr: r.GetApiAddr(), FeatureLevel: fsm.FeatureLevel}}, Actor: ActorOf(ctx, "")})
	if err == nil {
		c.log.Info("pre-registered a node", "id", r.GetId(), "raft", r.GetRaftAddr(), "api", r.GetApiAddr())
	}
	return err
}

// Uncordon, on the meta leader, lifts node id's cordon.
func (c *Controller) Uncordon(ctx context.Context, id string) (uint64, error) {
	epoch, _, err := c.changeMap(ctx, ActorOf(ctx, "node uncordon "+id), func(m shard.Map) (shard.Map, uint32, error) { return m.Cordon(id, false), 1, nil })
	return epoch, err
}

// liveCheckTimeout bounds how long a forced removal waits for the node to
// answer a status call.
const liveCheckTimeout = time.Second

// nodeLive reports whether node id runs: it is this node, or it answers a
// status call, as id, at its registered addresses (answerAsNode). It names
// where it answered.
func (c *Controller) nodeLive(ctx context.Context, id string) (string, bool) {
	m, ok := c.meta.FSM.Node(id)
	if !ok && id != c.cfg.ID {
		return "", false
	}
	m.ID = id
	where, _, live := c.answerAsNode(ctx, m)
	return where, live
}
