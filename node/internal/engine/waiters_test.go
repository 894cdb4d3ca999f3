package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Waiters of a key get their turns in arrival order, one at a time, and a
// full queue refuses more.
func TestWaitersTakeTurnsInArrivalOrder(t *testing.T) {
	w := NewWaiters()
	var turns []<-chan struct{}
	for range 3 {
		turn, ok := w.Join("k")
		if !ok {
			t.Fatal("join refused")
		}
		turns = append(turns, turn)
	}
	isOpen := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	for i := range turns {
		for j, turn := range turns {
			if want := j == i; isOpen(turn) != want && j >= i {
				t.Fatalf("after %d leaves, waiter %d has its turn: %v, want %v", i, j, isOpen(turn), want)
			}
		}
		w.Leave("k", turns[i])
	}
	for range maxWaitersPerKey {
		if _, ok := w.Join("full"); !ok {
			t.Fatal("refused below the bound")
		}
	}
	if _, ok := w.Join("full"); ok {
		t.Fatal("joined beyond the bound")
	}
}

// await serves parked requests first come, first served: each is let in by
// a notify (a released slot), in the order they arrived.
func TestAwaitServesInOrderOnNotify(t *testing.T) {
	w := NewWaiters()
	var (
		mu     sync.Mutex
		slots  int
		served []int
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 3 {
		// Join one at a time, so arrival order is known.
		joined := make(chan struct{})
		wg.Go(func() {
			first := true
			_, err := w.Await(ctx, "k", 10*time.Second, func(context.Context) (bool, time.Duration, error) {
				if first {
					first = false
					close(joined)
				}
				mu.Lock()
				defer mu.Unlock()
				if slots > 0 {
					slots--
					served = append(served, i)
					return true, 0, nil
				}
				return false, time.Hour, nil
			})
			if err != nil {
				t.Error(err)
			}
		})
		if i == 0 {
			<-joined // the first is at the head and has tried
		} else {
			// Later ones are queued behind: they have not tried yet.
			waitQueued(t, w, "k", i+1)
		}
	}
	for i := range 3 {
		mu.Lock()
		slots++
		mu.Unlock()
		w.Notify("k")
		waitServed(t, &mu, &served, i+1)
	}
	wg.Wait()
	if fmt.Sprint(served) != "[0 1 2]" {
		t.Fatalf("served in order %v, want [0 1 2]", served)
	}
}

func waitQueued(tb testing.TB, w *Waiters, key string, n int) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		w.mu.Lock()
		q := 0
		if wq, ok := w.queues[key]; ok {
			q = len(wq.turns)
		}
		w.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d waiters queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
}

func waitServed(tb testing.TB, mu *sync.Mutex, served *[]int, n int) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := len(*served)
		mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d served, want %d", got, n)
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
}
