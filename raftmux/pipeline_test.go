package raftmux

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A pipeline whose peer goes away fails its requests on the consumer, in
// order, and never from AppendEntries itself, which errs only once the
// pipeline is closed: raft logs a send error with a read of its follower's
// peer that races a change of the peer's address (hashicorp/raft#681).
func TestPipelineFailsOnTheConsumer(t *testing.T) {
	n := newTestNet(t)
	ha, aa := n.newHub(Options{Timeout: time.Second})
	hb, ab := n.newHub(Options{Timeout: time.Second})
	ta, err := ha.Transport(1, aa)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := hb.Transport(1, ab)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for rpc := range tb.Consumer() {
			rpc.Respond(&raft.AppendEntriesResponse{Term: 3, Success: true}, nil)
		}
	}()
	p, err := ta.AppendEntriesPipeline("n2", ab)
	if err != nil {
		t.Fatal(err)
	}
	send := func(i uint64) {
		t.Helper()
		req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte(aa)}, Term: 3,
			Entries: []*raft.Log{{Index: i, Term: 3, Type: raft.LogCommand, Data: []byte("x")}}}
		if _, err := p.AppendEntries(req, new(raft.AppendEntriesResponse)); err != nil {
			t.Fatalf("send %d: AppendEntries returned %v, want its failure on the consumer", i, err)
		}
	}
	next := func() raft.AppendFuture {
		t.Helper()
		select {
		case f := <-p.Consumer():
			return f
		case <-time.After(10 * time.Second):
			t.Fatal("no future on the consumer")
			return nil
		}
	}
	send(1)
	if f := next(); f.Error() != nil || !f.Response().Success {
		t.Fatalf("first request: %v, %+v", f.Error(), f.Response())
	}

	_ = hb.Close() // the peer goes away
	var failed raft.AppendFuture
	for i := uint64(2); failed == nil && i < 100; i++ {
		send(i)
		if f := next(); f.Error() != nil {
			failed = f
		}
	}
	if failed == nil || failed.Response().Success {
		t.Fatal("no request failed on the consumer once the peer was gone")
	}
	send(200) // after the failure: no error either, and raft reads no further
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	req := &raft.AppendEntriesRequest{Term: 3}
	if _, err := p.AppendEntries(req, new(raft.AppendEntriesResponse)); !errors.Is(err, raft.ErrPipelineShutdown) {
		t.Fatalf("AppendEntries on a closed pipeline: %v, want raft.ErrPipelineShutdown", err)
	}
}
