package groupcommit

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A lone item goes out at once; items that arrive while the queue is full
// in flight wait and then go out together, up to maxBatch per batch.
func TestBatchQueueSendsAtOnceWhenIdleAndAccumulatesWhenBusy(t *testing.T) {
	type batch struct {
		items   []int
		release chan struct{}
	}
	sent := make(chan batch, 100)
	var inflight, peak atomic.Int32
	q := NewQueue(4, 2, func(items []int) {
		cur := inflight.Add(1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		b := batch{items: items, release: make(chan struct{})}
		sent <- b
		<-b.release
		inflight.Add(-1)
	})
	next := func() batch {
		t.Helper()
		select {
		case b := <-sent:
			return b
		case <-time.After(10 * time.Second):
			t.Fatal("no batch sent")
			return batch{}
		}
	}

	q.Add(1)
	b1 := next() // idle: sent without waiting for anything else
	if !slices.Equal(b1.items, []int{1}) {
		t.Fatalf("first batch %v, want [1]", b1.items)
	}
	q.Add(2)
	b2 := next() // one in flight, room for a second
	if !slices.Equal(b2.items, []int{2}) {
		t.Fatalf("second batch %v, want [2]", b2.items)
	}
	for i := 3; i <= 9; i++ { // both slots busy: these wait
		q.Add(i)
	}
	select {
	case b := <-sent:
		t.Fatalf("batch %v sent while %d were in flight", b.items, q.maxInflight)
	default:
	}
	close(b1.release)
	b3 := next()
	if !slices.Equal(b3.items, []int{3, 4, 5, 6}) {
		t.Fatalf("third batch %v, want the first maxBatch waiting items [3 4 5 6]", b3.items)
	}
	close(b2.release)
	b4 := next()
	if !slices.Equal(b4.items, []int{7, 8, 9}) {
		t.Fatalf("fourth batch %v, want [7 8 9]", b4.items)
	}
	close(b3.release)
	close(b4.release)
	if p := peak.Load(); p > 2 {
		t.Fatalf("%d batches in flight at once, want at most 2", p)
	}
}

// Under concurrent adds every item is sent exactly once, never more than
// maxInflight batches at a time, and the queue goes idle after.
func TestBatchQueueSendsEveryItemOnce(t *testing.T) {
	var (
		mu       sync.Mutex
		seen     = map[int]int{}
		inflight atomic.Int32
		over     atomic.Bool
	)
	q := NewQueue(7, 3, func(items []int) {
		if inflight.Add(1) > 3 {
			over.Store(true)
		}
		if len(items) > 7 || len(items) == 0 {
			over.Store(true)
		}
		mu.Lock()
		for _, it := range items {
			seen[it]++
		}
		mu.Unlock()
		inflight.Add(-1)
	})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 500 {
				q.Add(w*1000 + i)
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.mu.Lock()
		idle := q.inflight == 0 && len(q.pending) == 0
		q.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("queue never went idle")
		}
		time.Sleep(time.Millisecond) // polling a condition, not synchronizing
	}
	if over.Load() {
		t.Fatal("more than maxInflight batches in flight, or a batch out of bounds")
	}
	if len(seen) != 16*500 {
		t.Fatalf("%d distinct items sent, want %d", len(seen), 16*500)
	}
	for it, n := range seen {
		if n != 1 {
			t.Fatalf("item %d sent %d times", it, n)
		}
	}
}
