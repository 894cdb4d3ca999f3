package raftmux

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Close returns only once a heartbeat handler call that began before it has
// returned: raft runs its heartbeat handler on the transport's goroutine, so
// its owner, closing the raft's stores right after Close, must not race a
// heartbeat still writing the term. After Close no heartbeat reaches the
// handler.
func TestCloseWaitsForTheHeartbeatHandler(t *testing.T) {
	n := newTestNet(t)
	ha, aa := n.newHub(Options{})
	hb, ab := n.newHub(Options{})
	ta, err := ha.Transport(1, aa)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := hb.Transport(1, ab)
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	// A failing check must not leave the handler blocked: the hubs' own
	// Close would wait for it.
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	calls := 0
	tb.SetHeartbeatHandler(func(rpc raft.RPC) {
		calls++
		close(entered)
		<-release
		rpc.Respond(&raft.AppendEntriesResponse{Term: 8, Success: true}, nil)
	})
	beat := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte(aa)}, Term: 8}
	sent := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		sent <- ta.AppendEntries("n1", ab, beat, &resp)
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat never reached the handler")
	}
	closed := make(chan struct{})
	go func() {
		_ = tb.Close()
		close(closed)
	}()
	// Close must still be waiting while the handler runs.
	select {
	case <-closed:
		t.Fatal("Close returned while the heartbeat handler was still running")
	case <-time.After(200 * time.Millisecond):
	}
	releaseOnce.Do(func() { close(release) })
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the handler did")
	}
	if err := <-sent; err != nil {
		t.Fatalf("the heartbeat in flight at Close: %v", err)
	}
	// After Close, heartbeats no longer reach the handler.
	var resp raft.AppendEntriesResponse
	_ = ta.AppendEntries("n1", ab, beat, &resp)
	if calls != 1 {
		t.Fatalf("the handler ran %d times, want 1 (none after Close)", calls)
	}
}

// An answer raft gave before its transport closed reaches the caller: the
// lane must not refuse with the group's shutdown a request whose answer
// was ready when the shutdown came. Each round answers a request and
// closes the group's transport at once, so the lane finds both ready.
func TestAnswerGivenBeforeCloseIsWritten(t *testing.T) {
	n := newTestNet(t)
	ha, aa := n.newHub(Options{})
	hb, ab := n.newHub(Options{})
	const rounds = 200
	for g := uint32(1); g <= rounds; g++ {
		ta, err := ha.Transport(g, aa)
		if err != nil {
			t.Fatal(err)
		}
		tb, err := hb.Transport(g, ab)
		if err != nil {
			t.Fatal(err)
		}
		req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte(aa)}, Term: 3,
			Entries: []*raft.Log{{Index: 1, Term: 3, Type: raft.LogCommand, Data: []byte("x")}}}
		sent := make(chan error, 1)
		go func() {
			var resp raft.AppendEntriesResponse
			sent <- ta.AppendEntries("n1", ab, req, &resp)
		}()
		select {
		case rpc := <-tb.Consumer():
			rpc.Respond(&raft.AppendEntriesResponse{Term: 3, Success: true}, nil)
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the request never reached the consumer", g)
		}
		_ = tb.Close()
		if err := <-sent; err != nil {
			t.Fatalf("round %d: a request answered before Close: %v", g, err)
		}
		_ = ta.Close()
	}
}
