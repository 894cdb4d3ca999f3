package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/groupcommit"
	"github.com/quorate/quorate/node/internal/replica"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// Group commit (DESIGN.md §4) is package groupcommit's: commands bound for a
// group's log share entries, forwarded Admits share calls. What is here is
// how an entry goes into a group's log on this node and what its callers'
// errors mean.

// await returns the result of it or, when ctx ends first, "not proposed" if it
// was never sent (it never will be), else "outcome unknown". what names the
// item in the error.
func await[R any](ctx context.Context, it *groupcommit.Item[R], what string) (R, error) {
	r, sent, err := it.Wait(ctx)
	switch {
	case err == nil:
		return r, nil
	case !sent:
		return r, fmt.Errorf("%w: %v before the %s was sent", ErrNotProposed, err, what)
	default:
		return r, fmt.Errorf("%w: %v after the %s was sent", ErrOutcomeUnknown, err, what)
	}
}

// groupLog is g's log as its leader on this node writes group-commit
// entries to it.
type groupLog struct {
	n *Engine
	g *replica.Replica
}

var _ groupcommit.Log = groupLog{}

// Append stamps env with the leader's time and applies it (applyEntry),
// telling the Observer of each of cmds once raft has it.
func (l groupLog) Append(env *raftcmdv1.Envelope, cmds []*raftcmdv1.Envelope) (any, error) {
	env.NowUnixNano = l.n.Now().UnixNano()
	l.n.metrics.Entry(l.g.ID, len(cmds))
	return l.n.applyEntry(l.g, env, func() { l.n.proposed(cmds...) })
}

// Applied tells the Observer.
func (l groupLog) Applied(cmd *raftcmdv1.Envelope) { l.n.applied(cmd) }

// applyAlone proposes env, which is not batchable, to g in an entry of its
// own, stamped with the leader's time, on a goroutine of its own; the
// function it returns waits for its result (errors as applyEntry's, and
// ErrOutcomeUnknown when ctx ends while the entry commits).
func (n *Engine) applyAlone(ctx context.Context, g *replica.Replica, env *raftcmdv1.Envelope) func() (any, error) {
	env.NowUnixNano = n.Now().UnixNano()
	type applied struct {
		res any
		err error
	}
	done := make(chan applied, 1)
	n.metrics.Entry(g.ID, 1)
	go func() {
		res, err := n.applyEntry(g, env, func() { n.proposed(env) })
		if err == nil {
			if e, ok := res.(error); ok {
				res, err = nil, e
			} else {
				n.applied(env)
			}
		}
		done <- applied{res, err}
	}()
	return func() (any, error) {
		select {
		case a := <-done:
			return a.res, a.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v while the entry was committing", ErrOutcomeUnknown, ctx.Err())
		}
	}
}

// waitOp returns op's result (see await).
func waitOp(ctx context.Context, op *groupcommit.Op) (any, error) {
	r, err := await(ctx, &op.Item, "command")
	if err != nil {
		return nil, err
	}
	return r.Res, r.Err
}

// applyEntry appends env to g's log and waits until it is applied here,
// returning the FSM's result; proposed runs once raft has the entry.
// Errors: ErrNotLeader and other ErrNotProposed (certainly not applied),
// ErrOutcomeUnknown.
func (n *Engine) applyEntry(g *replica.Replica, env *raftcmdv1.Envelope, proposed func()) (any, error) {
	data, err := fsm.Encode(env)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding command: %v", ErrNotProposed, err)
	}
	g.Wake()
	start := time.Now()
	future := g.Raft.Apply(data, n.cfg.RequestTimeout)
	proposed()
	switch err := future.Error(); {
	case err == nil:
		n.metrics.Applied(g.ID, start)
		return future.Response(), nil
	case errors.Is(err, raft.ErrNotLeader):
		return nil, ErrNotLeader
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return nil, fmt.Errorf("%w: leadership is being handed over", ErrNotProposed)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return nil, fmt.Errorf("%w: raft queue full until the deadline", ErrNotProposed)
	default: // ErrLeadershipLost, ErrRaftShutdown, ErrAbortedByRestore
		return nil, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	}
}
