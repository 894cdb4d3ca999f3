package peermux

import (
	"net"
	"testing"
	"time"
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
