package engine

import (
	"context"
	"sync"
	"time"
)

// maxWaitersPerKey bounds the AcquireLease requests parked on one key.
const maxWaitersPerKey = 64

// Waiters parks AcquireLease requests of a key that found no free slot, in
// arrival order: only the head of a key's queue asks again, when a lease of
// the key is released on this node or when the earliest lease expires,
// whichever comes first. Parking happens on the leader (forwarded requests
// included); after a leader change the requests go on waiting at the new
// leader. Safe for concurrent use.
type Waiters struct {
	mu     sync.Mutex
	queues map[string]*waitQueue
}

type waitQueue struct {
	turns []chan struct{} // closed when that waiter becomes the head
	wake  chan struct{}   // closed (and replaced) when a slot may have freed
}

func NewWaiters() *Waiters { return &Waiters{queues: make(map[string]*waitQueue)} }

// Join enqueues a waiter for key and returns a channel closed when it is the
// head of the queue, or false when the queue is full.
func (w *Waiters) Join(key string) (<-chan struct{}, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q, ok := w.queues[key]
	if !ok {
		q = &waitQueue{wake: make(chan struct{})}
		w.queues[key] = q
	}
	if len(q.turns) >= maxWaitersPerKey {
		return nil, false
	}
	turn := make(chan struct{})
	if len(q.turns) == 0 {
		close(turn)
	}
	q.turns = append(q.turns, turn)
	return turn, true
}

// Leave removes the head of key's queue (the caller, which was the head) and
// hands the turn to the next waiter.
func (w *Waiters) Leave(key string, turn <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queues[key]
	for i, t := range q.turns {
		if t == turn {
			q.turns = append(q.turns[:i], q.turns[i+1:]...)
			if i == 0 && len(q.turns) > 0 {
				close(q.turns[0])
			}
			break
		}
	}
	if len(q.turns) == 0 {
		delete(w.queues, key)
	}
}

// Changed returns a channel closed at the next notify of key.
func (w *Waiters) Changed(key string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q, ok := w.queues[key]; ok {
		return q.wake
	}
	return nil
}

// Notify wakes the head of key's queue: a slot may have freed.
func (w *Waiters) Notify(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q, ok := w.queues[key]; ok {
		close(q.wake)
		q.wake = make(chan struct{})
	}
}

// Await calls try, and when it reports not done and maxWait > 0, parks in
// key's queue and, once at its head, calls try again each time a lease of
// the key is released on this node or the retry time try returned passes,
// until try reports done or fails, ctx ends or maxWait passes. A request
// without maxWait never queues. It returns how long it waited and try's
// last error.
func (w *Waiters) Await(ctx context.Context, key string, maxWait time.Duration,
	try func(context.Context) (done bool, retry time.Duration, err error)) (time.Duration, error) {
	if maxWait <= 0 {
		_, _, err := try(ctx)
		return 0, err
	}
	start := time.Now()
	deadline := time.NewTimer(maxWait)
	defer deadline.Stop()
	turn, ok := w.Join(key)
	if !ok { // too many waiters: answer at once
		_, _, err := try(ctx)
		return 0, err
	}
	defer w.Leave(key, turn)
	select {
	case <-turn:
	case <-ctx.Done():
		return time.Since(start), ctx.Err()
	case <-deadline.C:
		_, _, err := try(ctx)
		return time.Since(start), err
	}
	for {
		wake := w.Changed(key)
		done, retry, err := try(ctx)
		if done || err != nil {
			return time.Since(start), err
		}
		t := time.NewTimer(max(retry, time.Millisecond))
		select {
		case <-wake:
		case <-t.C:
		case <-deadline.C:
			t.Stop()
			return time.Since(start), nil
		case <-ctx.Done():
			t.Stop()
			return time.Since(start), nil
		}
		t.Stop()
	}
}
