package groupcommit

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// Hold sends nothing new and reports when the batch in flight is done;
// Release sends what queued meanwhile. A leader quiesces its group so before
// handing leadership over.
func TestHoldWaitsForBatchesInFlightAndReleaseSendsWhatQueued(t *testing.T) {
	type batch struct {
		items   []int
		release chan struct{}
	}
	sent := make(chan batch, 10)
	q := NewQueue(8, 1, func(items []int) {
		b := batch{items: items, release: make(chan struct{})}
		sent <- b
		<-b.release
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
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}

	if idle := q.Hold(); !closed(idle) {
		t.Fatal("Hold on a queue with nothing in flight: channel not closed")
	}
	q.Release()

	q.Add(1)
	b1 := next()
	idle := q.Hold()
	if closed(idle) {
		t.Fatal("Hold reported idle with a batch in flight")
	}
	q.Add(2, 3) // held: these wait
	close(b1.release)
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
		t.Fatal("Hold never reported idle after the batch in flight was done")
	}
	select {
	case b := <-sent:
		t.Fatalf("batch %v sent while held", b.items)
	default:
	}
	q.Release()
	b2 := next()
	if !slices.Equal(b2.items, []int{2, 3}) {
		t.Fatalf("batch after Release %v, want [2 3]", b2.items)
	}
	close(b2.release)
}

// An item whose caller gives up before it is claimed is never sent; one
// given up on after is sent, and Wait says which.
func TestItemWaitSaysWhetherTheItemWasSent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	waiting := NewItem[int]()
	if _, sent, err := waiting.Wait(ctx); sent || !errors.Is(err, context.Canceled) {
		t.Fatalf("item given up before it was claimed: sent %v, err %v; want false, context.Canceled", sent, err)
	}
	if waiting.Claim() {
		t.Fatal("an abandoned item was claimed for a batch")
	}

	claimed := NewItem[int]()
	if !claimed.Claim() {
		t.Fatal("a waiting item could not be claimed")
	}
	if _, sent, err := claimed.Wait(ctx); !sent || !errors.Is(err, context.Canceled) {
		t.Fatalf("item given up after it was claimed: sent %v, err %v; want true, context.Canceled", sent, err)
	}

	answered := NewItem[int]()
	answered.Claim()
	answered.Answer(7)
	if r, sent, err := answered.Wait(context.Background()); r != 7 || !sent || err != nil {
		t.Fatalf("answered item: %d %v %v, want 7 true nil", r, sent, err)
	}
}
