package peermux

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

func TestMuxDispatchesByChannel(t *testing.T) {
	checkNoGoroutineLeak(t)
	a, b := newTestMux(t), newTestMux(t)
	chans := []uint64{0, 1, 300, ChannelForward}
	for _, ch := range chans {
		l := mustListen(t, b, ch)
		if l.Addr().String() != b.ln.Addr().String() {
			t.Fatalf("channel %d listens on %v, want the mux's %v", ch, l.Addr(), b.ln.Addr())
		}
		c, err := a.Dial(context.Background(), b.Addr().String(), ch)
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("hello on %d", ch)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(s, got); err != nil || string(got) != msg {
			t.Fatalf("channel %d got %q, %v; want %q", ch, got, err, msg)
		}
		// Closing the channel's listener closes what it accepted.
		l.Close()
		waitClosedByPeer(t, c, 5*time.Second)
		c.Close()
	}
	if got := a.Stats().Dials; got != int64(len(chans)) {
		t.Fatalf("Stats().Dials = %d after %d dials", got, len(chans))
	}
	if got := b.Stats().Dials; got != 0 {
		t.Fatalf("the mux dialed to counts %d dials of its own", got)
	}
}

func TestMuxRejectsBadConnections(t *testing.T) {
	checkNoGoroutineLeak(t)
	m := newTestMux(t)
	m.headerTimeout = 200 * time.Millisecond
	mustListen(t, m, 1)
	addr := m.Addr().String()

	send := func(t *testing.T, b []byte) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Run("bad magic", func(t *testing.T) {
		waitClosedByPeer(t, send(t, []byte("GET / HTTP/1.1\r\n\r\n")), 5*time.Second)
	})
	t.Run("huge varint", func(t *testing.T) {
		waitClosedByPeer(t, send(t, append([]byte{muxMagic}, bytes.Repeat([]byte{0xff}, 11)...)), 5*time.Second)
	})
	t.Run("unknown channel", func(t *testing.T) {
		c, err := m.Dial(context.Background(), addr, 2)
		if err != nil {
			t.Fatal(err)
		}
		waitClosedByPeer(t, c, 5*time.Second)
	})
	t.Run("no header", func(t *testing.T) {
		start := time.Now()
		waitClosedByPeer(t, send(t, nil), 5*time.Second)
		if d := time.Since(start); d < m.headerTimeout/2 {
			t.Fatalf("closed after %v, before the header timeout %v", d, m.headerTimeout)
		}
	})
	t.Run("half a header", func(t *testing.T) {
		waitClosedByPeer(t, send(t, []byte{muxMagic, 0x80}), 5*time.Second)
	})
}

// A connection for a channel nobody listens on yet is refused; once the
// channel is registered the next dial gets through — what Raft does when a
// peer's group replica is not started yet.
func TestMuxChannelRegisteredLater(t *testing.T) {
	checkNoGoroutineLeak(t)
	m := newTestMux(t)
	c, err := m.Dial(context.Background(), m.Addr().String(), 7)
	if err != nil {
		t.Fatal(err)
	}
	waitClosedByPeer(t, c, 5*time.Second)
	c.Close()

	l := mustListen(t, m, 7)
	c, err = m.Dial(context.Background(), m.Addr().String(), 7)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{0}); err != nil { // a channel is handed a connection once it sends
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

func TestMuxListenerLifecycle(t *testing.T) {
	checkNoGoroutineLeak(t)
	m := newTestMux(t)
	l := mustListen(t, m, 3)
	if _, err := m.Listener(3); !errors.Is(err, errMuxInUse) {
		t.Fatalf("a second listener on channel 3: %v, want errMuxInUse", err)
	}

	// Close while Accept blocks.
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		accepted <- err
	}()
	l.Close()
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	// The channel can be registered again; closing the mux unblocks it.
	l2 := mustListen(t, m, 3)
	go func() {
		_, err := l2.Accept()
		accepted <- err
	}()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after the mux closed: %v, want net.ErrClosed", err)
	}
	if _, err := m.Listener(4); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Listener on a closed mux: %v", err)
	}
	if _, err := m.Dial(context.Background(), m.Addr().String(), 3); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Dial on a closed mux: %v", err)
	}
}

// Many connections on several channels at once each reach their channel,
// and closing the mux closes every one of them, both ends.
func TestMuxManyConcurrentConnections(t *testing.T) {
	checkNoGoroutineLeak(t)
	a, b := newTestMux(t), newTestMux(t)
	const chans, perChan = 4, 50
	var servers sync.WaitGroup
	for ch := range uint64(chans) {
		l := mustListen(t, b, ch)
		servers.Add(1)
		go func() { // echo each connection's first 9 bytes back, then keep it open
			defer servers.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					var buf [9]byte
					if _, err := io.ReadFull(c, buf[:]); err == nil && uint64(buf[0]) == ch {
						c.Write(buf[:])
					}
					io.Copy(io.Discard, c)
				}()
			}
		}()
	}
	var clients sync.WaitGroup
	errs := make(chan error, chans*perChan)
	conns := make(chan net.Conn, chans*perChan)
	for i := range chans * perChan {
		clients.Add(1)
		go func() {
			defer clients.Done()
			ch := uint64(i % chans)
			c, err := a.Dial(context.Background(), b.Addr().String(), ch)
			if err != nil {
				errs <- err
				return
			}
			conns <- c
			var msg [9]byte
			msg[0] = byte(ch)
			binary.BigEndian.PutUint64(msg[1:], uint64(i))
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(msg[:]); err != nil {
				errs <- err
				return
			}
			var got [9]byte
			if _, err := io.ReadFull(c, got[:]); err != nil || got != msg {
				errs <- fmt.Errorf("conn %d: echo % x, %v", i, got, err)
			}
		}()
	}
	clients.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	b.Close()
	servers.Wait()
	close(conns)
	for c := range conns {
		waitClosedByPeer(t, c, 5*time.Second)
	}
	a.Close()
}
