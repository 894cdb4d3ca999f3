package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// Group commit (DESIGN.md §4). Strict decisions are cheap only many to a
// Raft entry, and an RPC between nodes is cheap only many to a call. Both
// use batchQueue: an item is sent at once when fewer than maxInflight
// batches are in flight (so a lone caller never waits for a timer), and
// otherwise waits with the others that arrive meanwhile until a batch in
// flight completes, then all go together (up to maxBatch).

// batchQueue sends items in batches with at most maxInflight batches in
// flight. send is called on a goroutine of the queue and returns when the
// batch is done (committed, answered); it must answer every item itself.
type batchQueue[T any] struct {
	maxBatch, maxInflight int
	send                  func([]T)

	mu       sync.Mutex
	pending  []T
	inflight int
	// held: send nothing new (items wait) until release; idle is closed
	// once nothing is in flight while held.
	held bool
	idle chan struct{}
}

// add queues items, sending them at once when the queue has room in flight.
func (q *batchQueue[T]) add(items ...T) {
	q.mu.Lock()
	q.pending = append(q.pending, items...)
	if q.inflight >= q.maxInflight || q.held {
		q.mu.Unlock()
		return
	}
	b := q.takeLocked()
	q.inflight++
	q.mu.Unlock()
	go q.run(b)
}

// hold stops sending (items queue up) and returns a channel closed once
// nothing is in flight. release undoes it.
func (q *batchQueue[T]) hold() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held = true
	q.idle = make(chan struct{})
	if q.inflight == 0 {
		close(q.idle)
	}
	return q.idle
}

// release sends again what queued while held.
func (q *batchQueue[T]) release() {
	q.mu.Lock()
	q.held = false
	if len(q.pending) == 0 || q.inflight >= q.maxInflight {
		q.mu.Unlock()
		return
	}
	b := q.takeLocked()
	q.inflight++
	q.mu.Unlock()
	go q.run(b)
}

// takeLocked removes and returns the next batch; q.mu is held.
func (q *batchQueue[T]) takeLocked() []T {
	n := min(len(q.pending), q.maxBatch)
	b := make([]T, n)
	copy(b, q.pending)
	rest := copy(q.pending, q.pending[n:])
	clear(q.pending[rest:])
	q.pending = q.pending[:rest]
	return b
}

// run sends b, then whatever queued meanwhile, until nothing is pending.
func (q *batchQueue[T]) run(b []T) {
	for {
		q.send(b)
		q.mu.Lock()
		if len(q.pending) == 0 || q.held {
			q.inflight--
			if q.held && q.inflight == 0 {
				close(q.idle)
			}
			q.mu.Unlock()
			return
		}
		b = q.takeLocked()
		q.mu.Unlock()
	}
}

// Item states: waiting in a queue, sent (its outcome is the batch's), or
// abandoned by its caller before it was sent (it is skipped).
const (
	itemWaiting int32 = iota
	itemSent
	itemAbandoned
)

// queued is what the caller of an item put in a batchQueue waits on.
type queued[R any] struct {
	state atomic.Int32
	done  chan R // buffered: the sender never blocks
}

func newQueued[R any]() queued[R] { return queued[R]{done: make(chan R, 1)} }

// claim marks the item sent, unless its caller gave up on it first.
func (q *queued[R]) claim() bool { return q.state.CompareAndSwap(itemWaiting, itemSent) }

// await returns the item's result or, when ctx ends first, "not proposed"
// if the item was never sent (it never will be), else "outcome unknown".
func (q *queued[R]) await(ctx context.Context, what string) (R, error) {
	select {
	case r := <-q.done:
		return r, nil
	case <-ctx.Done():
		var zero R
		if q.state.CompareAndSwap(itemWaiting, itemAbandoned) {
			return zero, fmt.Errorf("%w: %v before the %s was sent", ErrNotProposed, ctx.Err(), what)
		}
		return zero, fmt.Errorf("%w: %v after the %s was sent", ErrOutcomeUnknown, ctx.Err(), what)
	}
}

// opResult is what a raftOp's caller gets.
type opResult struct {
	res any
	err error
}

// raftOp is one command waiting for its group's next entry.
type raftOp struct {
	queued[opResult]
	env *raftcmdv1.Envelope
}

func newRaftOp(env *raftcmdv1.Envelope) *raftOp {
	return &raftOp{queued: newQueued[opResult](), env: env}
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
func (n *Node) newRaftBatcher(g *group) *batchQueue[*raftOp] {
	return &batchQueue[*raftOp]{maxBatch: maxOpsPerEntry, maxInflight: maxEntriesInFlight,
		send: func(ops []*raftOp) { n.sendEntry(g, ops) }}
}

// submit proposes env to g through its group commit and waits for its own
// result. Errors as proposeOnce's.
func (n *Node) submit(ctx context.Context, g *group, env *raftcmdv1.Envelope) (any, error) {
	op := newRaftOp(env)
	g.batch.add(op)
	return op.wait(ctx)
}

// wait returns op's result (see queued.await).
func (op *raftOp) wait(ctx context.Context) (any, error) {
	r, err := op.await(ctx, "command")
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
		if op.claim() {
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
		op.done <- r
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
