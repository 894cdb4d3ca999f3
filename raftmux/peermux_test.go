package raftmux

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/quorate/quorate/peermux"
)

// TestOverPeerMux runs groups over hubs whose connections are peermux
// channels, as a Quorate node wires them.
func TestOverPeerMux(t *testing.T) {
	const groups = 4
	tc := &testCluster{t: t, net: newTestNet(t)}
	for range 3 {
		ln, m, l, sl := servePeerMux(t, peermux.Options{})
		dial := func(ch uint64) Dial {
			return func(ctx context.Context, a raft.ServerAddress) (net.Conn, error) {
				return m.Dial(ctx, string(a), ch)
			}
		}
		h, err := New(Options{
			Dial: dial(peermux.ChannelRaft), DialSnapshot: dial(peermux.ChannelRaftSnapshot),
			Listener: l, SnapshotListener: sl, Timeout: 2 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		tc.hubs = append(tc.hubs, h)
		tc.addrs = append(tc.addrs, raft.ServerAddress(ln.Addr().String()))
	}
	tc.reps = make([][]*replica, groups)
	for g := range groups {
		tc.reps[g] = make([]*replica, 3)
		for i := range 3 {
			tc.start(uint32(g), i, nil, true)
		}
	}
	applyEverywhere(tc, allGroups(groups), 10, 10)
}

// servePeerMux serves a peer mux with opts on a new loopback listener
// until the test ends, and returns the listener, the mux and its Raft and
// snapshot channels' listeners.
func servePeerMux(t *testing.T, opts peermux.Options) (net.Listener, *peermux.Mux, net.Listener, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := peermux.New(ln, peermux.NewDialer(ln.Addr(), nil), nil, nil, opts)
	go m.Serve()
	t.Cleanup(func() { _ = m.Close() })
	l, err := m.Listener(peermux.ChannelRaft)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := m.Listener(peermux.ChannelRaftSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	return ln, m, l, sl
}

// TestStartedFrameMustFinish: over a peer mux, a shared connection that
// sends one byte of a frame and stops is closed within the frame timeout
// (the peer port's idle timeout, which the shared channel is otherwise
// exempt from), while one that is quiet between frames is kept.
func TestStartedFrameMustFinish(t *testing.T) {
	const idle = 300 * time.Millisecond
	ln, m, l, sl := servePeerMux(t, peermux.Options{IdleTimeout: idle})
	never := func(context.Context, raft.ServerAddress) (net.Conn, error) { return nil, errors.New("no dials here") }
	h, err := New(Options{Dial: never, DialSnapshot: never, Listener: l, SnapshotListener: sl, FrameTimeout: m.IdleTimeout()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })

	dial := func(then []byte) (net.Conn, *frameReader) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Write(append(peermux.AppendHeader(nil, peermux.ChannelRaft, ""), then...)); err != nil {
			t.Fatal(err)
		}
		return c, &frameReader{r: bufio.NewReader(c), max: 1 << 20}
	}
	ask := func(c net.Conn, fr *frameReader, id uint64) {
		t.Helper()
		if _, err := c.Write(appendFrame(nil, 7, kindRequestVote, id, []byte{0xc0})); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := fr.next()
		if err != nil || f.kind != kindError || f.id != id {
			t.Fatalf("answer to request %d: %+v, %v; want a transport error (no group 7)", id, f, err)
		}
	}

	quiet, qr := dial(nil)
	ask(quiet, qr, 1)
	partial, _ := dial(appendFrame(nil, 7, kindRequestVote, 1, []byte{0xc0})[:1])
	start := time.Now()
	_ = partial.SetReadDeadline(start.Add(idle + 5*time.Second)) // slack for a busy machine
	if n, err := partial.Read(make([]byte, 1)); n > 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("a connection with one byte of a frame: read %d bytes, %v after %v; want it closed (EOF) within %v",
			n, err, time.Since(start), idle)
	}
	t.Logf("one byte of a frame: closed after %v", time.Since(start).Round(time.Millisecond))
	// The quiet connection has been quiet for longer than the idle timeout
	// between frames, and still answers.
	if d := time.Since(start); d < 2*idle {
		_ = quiet.SetReadDeadline(start.Add(2 * idle))
		if _, err := quiet.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a connection quiet between frames: %v; want it kept", err)
		}
	}
	ask(quiet, qr, 2)
}
