package groupcommit

import (
	"context"
	"sync"
	"sync/atomic"
)

// Queue sends items in batches of at most maxBatch with at most maxInflight
// batches in flight: an item is sent at once when fewer than maxInflight
// batches are in flight (so a lone caller never waits for a timer), and
// otherwise waits with the others that arrive meanwhile until a batch in
// flight completes, then all go together.
//
// Its methods are safe for concurrent use. send runs on a goroutine of the
// queue, one call per batch in flight, and returns when the batch is done
// (committed, answered); it must answer every item itself.
type Queue[T any] struct {
	maxBatch, maxInflight int
	send                  func([]T)

	mu       sync.Mutex
	pending  []T
	inflight int
	// held: send nothing new (items wait) until Release; idle is closed
	// once nothing is in flight while held.
	held bool
	idle chan struct{}
}

// NewQueue returns a queue that hands send at most maxBatch items at a time
// with at most maxInflight calls of send at once (both at least 1).
func NewQueue[T any](maxBatch, maxInflight int, send func([]T)) *Queue[T] {
	return &Queue[T]{maxBatch: maxBatch, maxInflight: maxInflight, send: send}
}

// Add queues items, sending them at once when the queue has room in flight.
func (q *Queue[T]) Add(items ...T) {
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

// Hold stops sending (items queue up) and returns a channel closed once
// nothing is in flight. Release undoes it. One holder at a time: a second
// Hold before Release replaces the first one's channel.
func (q *Queue[T]) Hold() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held = true
	q.idle = make(chan struct{})
	if q.inflight == 0 {
		close(q.idle)
	}
	return q.idle
}

// Release sends again what queued while held.
func (q *Queue[T]) Release() {
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
func (q *Queue[T]) takeLocked() []T {
	n := min(len(q.pending), q.maxBatch)
	b := make([]T, n)
	copy(b, q.pending)
	rest := copy(q.pending, q.pending[n:])
	clear(q.pending[rest:])
	q.pending = q.pending[:rest]
	return b
}

// run sends b, then whatever queued meanwhile, until nothing is pending.
func (q *Queue[T]) run(b []T) {
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

// Item is what the caller of an item put in a Queue waits on; embed it in
// the item. Its caller calls Wait once; the queue's send calls Claim, then
// Answer once if Claim returned true.
type Item[R any] struct {
	state atomic.Int32
	done  chan R // buffered: the sender never blocks
}

// NewItem returns an item waiting to be sent.
func NewItem[R any]() Item[R] { return Item[R]{done: make(chan R, 1)} }

// Claim marks the item sent, unless its caller gave up on it first: then it
// returns false and the item must be skipped (its caller was told it was
// never sent).
func (it *Item[R]) Claim() bool { return it.state.CompareAndSwap(itemWaiting, itemSent) }

// Answer hands the item's result to its caller; it never blocks.
func (it *Item[R]) Answer(r R) { it.done <- r }

// Wait returns the item's result. When ctx ends first it returns ctx's
// error instead, and sent says whether the item had been claimed: if not,
// it never will be (it is abandoned), else its outcome is its batch's, which
// this caller will not learn.
func (it *Item[R]) Wait(ctx context.Context) (r R, sent bool, err error) {
	select {
	case r := <-it.done:
		return r, true, nil
	case <-ctx.Done():
		var zero R
		if it.state.CompareAndSwap(itemWaiting, itemAbandoned) {
			return zero, false, ctx.Err()
		}
		return zero, true, ctx.Err()
	}
}
