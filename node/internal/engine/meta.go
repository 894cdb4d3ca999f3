package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"

	"connectrpc.com/connect"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/replica"
	"github.com/quorate/quorate/shard"
)

// DataGroup returns the replica of data group id hosted here, or nil.
func (n *Engine) DataGroup(id shard.GroupID) *replica.Replica { return n.groups.Get(id) }

// Hosted returns every group replica on this node, the meta group first,
// then data groups by ID.
func (n *Engine) Hosted() []*replica.Replica {
	return append([]*replica.Replica{n.meta}, n.groups.Sorted()...)
}

// SyncPolicies copies the meta group's policy table into data group g (led
// here) when g's copy is older than the table's last change. It compares
// two indexes, not the tables, except right after a restore of the meta
// replica, when the date of the last change is not known.
func (n *Engine) SyncPolicies(ctx context.Context, g *replica.Replica) error {
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
	_, err := n.ProposeTo(ctx, Dest{Replica: g, ID: g.ID}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_SetPolicies{SetPolicies: set}})
	return err
}

// CatchUpMeta waits until this node's meta replica has applied everything
// the meta leader had committed when asked: then it knows every policy
// change acknowledged before the call.
func (n *Engine) CatchUpMeta(ctx context.Context) error {
	var commit uint64
	if n.meta.IsLeader() {
		return n.CaughtUp(ctx, n.meta)
	}
	addr, _ := n.meta.Raft.LeaderWithID()
	if addr == "" {
		return fmt.Errorf("%w: no meta leader known", ErrNotProposed)
	}
	resp, err := n.peerPorts.At(string(addr)).Admin.NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
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

// CaughtUp returns once g's replica here, as leader, has applied every
// command acknowledged before the call (a linearizable read of its FSM).
// Commands acknowledged in this term were applied here before they were
// acknowledged; those of earlier terms are once a barrier of this term is
// (one barrier per term, not per call). Confirming leadership then shows
// that no newer leader acknowledged anything.
func (n *Engine) CaughtUp(ctx context.Context, g *replica.Replica) error {
	if term := g.Raft.CurrentTerm(); g.CaughtUpTerm.Load() != term {
		if err := n.Barrier(ctx, g); err != nil {
			return err
		}
		g.CaughtUpTerm.Store(term)
	}
	return replica.WaitFuture(ctx, g.Raft.VerifyLeader())
}

// Barrier returns once every command g's log held when it was called is
// applied to this replica, which leads g.
func (n *Engine) Barrier(ctx context.Context, g *replica.Replica) error {
	return replica.WaitFuture(ctx, g.Raft.Barrier(time.Until(DeadlineOr(ctx, n.cfg.RequestTimeout))))
}

// DeadlineOr is ctx's deadline, or d from now.
func DeadlineOr(ctx context.Context, d time.Duration) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(d)
}
