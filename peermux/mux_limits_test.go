package peermux

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Connections from one IP beyond the handshake cap are closed at once; the
// cap frees as handshakes end.
func TestMuxHandshakeCapPerIP(t *testing.T) {
	checkNoGoroutineLeak(t)
	m := newTestMux(t)
	m.limits.handshakesPerIP = 4
	mustListen(t, m, 1)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 4 {
		c, err := net.Dial("tcp", m.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitFor(t, 5*time.Second, "four connections in their handshake", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.shaking["127.0.0.1"] == 4
	})
	extra, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	waitClosedByPeer(t, extra, 2*time.Second) // long before the 5 s handshake timeout
	if got := m.stats.refused.Load(); got != 1 {
		t.Fatalf("refused %d, want 1", got)
	}

	// One handshake completes: a new connection is taken again.
	if _, err := held[0].Write([]byte{muxMagic, 1, 0}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the handshake to end", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.shaking["127.0.0.1"] == 3
	})
	c, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, c)
	waitFor(t, 5*time.Second, "the new connection in its handshake", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.shaking["127.0.0.1"] == 4
	})
	if got := m.stats.refused.Load(); got != 1 {
		t.Fatalf("refused %d, want still 1", got)
	}
}

// A connection the Raft transport pooled and the peer then closed for
// idleness is never used: the next RPC after the idle timeout goes through
// on the first try, as the one before it did.
func TestMuxPooledConnectionOutlivesPeerIdleTimeout(t *testing.T) {
	checkNoGoroutineLeak(t)
	const idle = 200 * time.Millisecond
	a, b := newTestMux(t), newTestMux(t)
	a.idleTimeout, b.idleTimeout = idle, idle
	transport := func(m *Mux) *raft.NetworkTransport {
		s, err := m.StreamLayer(5)
		if err != nil {
			t.Fatal(err)
		}
		tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: s, MaxPool: RaftMaxPool, Timeout: RaftTimeout,
			Logger: hclog.New(&hclog.LoggerOptions{Output: io.Discard})})
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	ta, tb := transport(a), transport(b)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case rpc := <-tb.Consumer():
				rpc.Respond(&raft.RequestVoteResponse{Term: 1, Granted: true}, nil)
			case <-done:
				return
			}
		}
	}()
	vote := func(what string) {
		t.Helper()
		var resp raft.RequestVoteResponse
		err := ta.RequestVote("b", raft.ServerAddress(b.Addr().String()), &raft.RequestVoteRequest{Term: 1}, &resp)
		if err != nil || !resp.Granted {
			t.Fatalf("%s: vote %v, %v", what, resp.Granted, err)
		}
	}
	vote("first vote")
	waitFor(t, 10*time.Second, "b to close the pooled connection for idleness", func() bool {
		return b.stats.idleClosed.Load() >= 1
	})
	vote("vote on the pooled connection after b closed it")
	if a.stats.redials.Load() < 1 {
		t.Fatalf("no redial counted")
	}
}
