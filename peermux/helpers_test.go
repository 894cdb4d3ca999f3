package peermux

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"
)

// waitFor polls cond every few milliseconds until it holds, and fails the
// test when it does not within timeout.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkNoGoroutineLeak fails the test when, at its end, more goroutines run
// than at the call, once those on their way out have had time to exit.
func checkNoGoroutineLeak(tb testing.TB) {
	tb.Helper()
	base := runtime.NumGoroutine()
	tb.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for runtime.NumGoroutine() > base {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				tb.Errorf("%d goroutines, %d before the test:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// newTestMux serves a mux on a fresh loopback listener.
func newTestMux(tb testing.TB) *Mux {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	m := New(ln, NewDialer(ln.Addr(), nil), nil, nil, Options{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Serve()
	}()
	tb.Cleanup(func() {
		if err := m.Close(); err != nil {
			tb.Error(err)
		}
		<-done
	})
	return m
}

func mustListen(tb testing.TB, m *Mux, ch uint64) net.Listener {
	tb.Helper()
	l, err := m.Listener(ch)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// waitClosedByPeer reads c until the peer closes it, failing on data or
// when that takes longer than timeout.
func waitClosedByPeer(tb testing.TB, c net.Conn, timeout time.Duration) {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(timeout))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil {
		tb.Fatalf("read %d bytes, err %v; want the connection closed", n, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		tb.Fatalf("connection still open after %v", timeout)
	}
}

// newTestClusterID returns a new random cluster ID, in hex.
func newTestClusterID() string {
	b := make([]byte, ClusterIDLen)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
