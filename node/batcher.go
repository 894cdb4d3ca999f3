package node

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/groupcommit"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// Group commit (DESIGN.md §4) runs on package groupcommit's Queue: commands
// bound for a group's log share entries (below), forwarded Admits share
// calls (forward.go).

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

// opResult is what a raftOp's caller gets.
type opResult struct {
	res any
	err error
}

// raftOp is one command waiting for its group's next entry.
type raftOp struct {
	groupcommit.Item[opResult]
	env *raftcmdv1.Envelope
}

func newRaftOp(env *raftcmdv1.Envelope) *raftOp {
	return &raftOp{Item: groupcommit.NewItem[opResult](), env: env}
}

// Group commit settings: ops per entry and entries in flight per group.
// One entry in flight, measured against two and three (BenchmarkAdmit3Nodes,
// 64 clients, 2 cores): with 1, 11.4 ops/entry and 3,200 admits/s on one
// group; with 2, 7.8 and 2,300/s; with 3, 6.2 and 2,200/s. Every entry costs
// each replica a bbolt commit (two fdatasyncs) and the CPU to replicate and
// apply it, so fewer, fuller entries win; a lone caller still goes at once.
const (
	maxOpsPerEntry     = 512
	maxEntriesInFlight = 1
)

// newRaftBatcher returns g's group-commit queue on this node.
func (n *Node) newRaftBatcher(g *group) *groupcommit.Queue[*raftOp] {
	return groupcommit.NewQueue(maxOpsPerEntry, maxEntriesInFlight,
		func(ops []*raftOp) { n.sendEntry(g, ops) })
}

// submit proposes env to g through its group commit and waits for its own
// result. Errors as proposeOnce's.
func (n *Node) submit(ctx context.Context, g *group, env *raftcmdv1.Envelope) (any, error) {
	op := newRaftOp(env)
	g.batch.Add(op)
	return op.wait(ctx)
}

// wait returns op's result (see await).
func (op *raftOp) wait(ctx context.Context) (any, error) {
	r, err := await(ctx, &op.Item, "command")
	if err != nil {
		return nil, err
	}
	return r.res, r.err
}

// sendEntry writes the ops still wanted into one entry (the op itself when
// alone, else a Batch), stamped with the leader's time, waits for it to be
// applied here and answers each op.
func (n *Node) sendEntry(g *group, ops []*raftOp) {
	live := ops[:0]
	for _, op := range ops {
		if op.Claim() {
			live = append(live, op)
		}
	}
	if len(live) == 0 {
		return
	}
	if len(live) > 1 && n.meta.fsm.MinFeatureLevel() < fsm.FeatureBatch {
		// A node whose binary predates Batch entries is registered: one
		// entry per op (raft still sends and fsyncs them together).
		var wg sync.WaitGroup
		for _, op := range live {
			wg.Go(func() { n.writeEntry(g, []*raftOp{op}) })
		}
		wg.Wait()
		return
	}
	n.writeEntry(g, live)
}

// writeEntry writes ops (sent, not abandoned) into one entry and answers
// each.
func (n *Node) writeEntry(g *group, live []*raftOp) {
	env := live[0].env
	if len(live) > 1 {
		b := &raftcmdv1.Batch{Ops: make([]*raftcmdv1.Envelope, len(live))}
		for i, op := range live {
			b.Ops[i] = op.env
		}
		env = &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Batch{Batch: b}}
	}
	env.NowUnixNano = n.now().UnixNano()
	res, err := n.applyEntry(g, env, func() {
		for _, op := range live {
			n.hooks.run(&n.hooks.afterPropose, op.env)
		}
	})
	for i, op := range live {
		r := opResult{res: res, err: err}
		if b, ok := res.(*fsm.BatchResult); ok && err == nil && len(live) > 1 {
			r.res = b.Results[i]
		}
		if e, ok := r.res.(error); ok {
			r.res, r.err = nil, e
		}
		if r.err == nil {
			n.hooks.run(&n.hooks.afterApply, op.env)
		}
		op.Answer(r)
	}
}

// applyEntry appends env to g's log and waits until it is applied here,
// returning the FSM's result; proposed runs once raft has the entry.
// Errors: ErrNotLeader and other ErrNotProposed (certainly not applied),
// ErrOutcomeUnknown.
func (n *Node) applyEntry(g *group, env *raftcmdv1.Envelope, proposed func()) (any, error) {
	data, err := fsm.Encode(env)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding command: %v", ErrNotProposed, err)
	}
	future := g.raft.Apply(data, n.cfg.RequestTimeout)
	proposed()
	switch err := future.Error(); {
	case err == nil:
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
