package peermux

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/quorate/quorate/certs"
)

// newTLSMux serves a mux whose port is mutual TLS with node id's
// certificate from ca, allowing every node of the CA.
func newTLSMux(tb testing.TB, ca *certs.DevCA, id string, o Options) *Mux {
	tb.Helper()
	kp := ca.Nodes[id]
	src, err := certs.NewSource(certs.Options{CertFile: kp.CertFile, KeyFile: kp.KeyFile, CAFile: ca.CAFile, Interval: -1})
	if err != nil {
		tb.Fatal(err)
	}
	if o.ServerTLS, err = src.PeerServerConfig(certs.PeerOptions{}); err != nil {
		tb.Fatal(err)
	}
	if o.ClientTLS, err = src.PeerClientConfig(certs.PeerOptions{}); err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	m := New(ln, NewDialer(ln.Addr(), nil), nil, nil, o)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Serve()
	}()
	tb.Cleanup(func() {
		m.Close()
		<-done
	})
	return m
}

// A TLS mux carries a channel's bytes between two nodes of the CA, and
// closes a plaintext dialer, and one silent through the handshake
// deadline, at the TLS handshake: no header is read, nothing is accepted.
func TestMuxTLS(t *testing.T) {
	checkNoGoroutineLeak(t)
	ca, err := certs.NewDevCA(filepath.Join(t.TempDir(), "ca"), []string{"a", "b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := newTLSMux(t, ca, "a", Options{})
	b := newTLSMux(t, ca, "b", Options{HandshakeTimeout: 200 * time.Millisecond})
	l, err := b.Listener(7)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := a.Dial(ctx, b.Addr().String(), 7)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	got, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(got, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if cs := got.(*trackedConn).Conn.(*tls.Conn).ConnectionState(); cs.Version != tls.VersionTLS13 || len(cs.PeerCertificates) == 0 {
		t.Fatalf("accepted connection: TLS version %x, %d peer certificates", cs.Version, len(cs.PeerCertificates))
	}

	// A plaintext dialer sends a valid header: it is closed at the handshake.
	plain, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_, _ = plain.Write(append(AppendHeader(nil, 7, ""), "hello"...))
	_ = plain.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(plain); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the plaintext connection stayed open: %v", err)
		}
	}
	// A silent connection is closed by the handshake deadline.
	silent, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(silent); err != nil {
		t.Fatalf("the silent connection: %v", err)
	}
	waitFor(t, 10*time.Second, "two TLS refusals", func() bool { return b.Stats().TLSRefused == 2 })
	if st := b.Stats(); st.OtherCluster != 0 || st.Silent != 0 {
		t.Fatalf("the mux went past the handshake of a refused connection: %+v", st)
	}
	select {
	case <-l.(*muxListener).queue:
		t.Fatal("a refused connection reached the channel")
	default:
	}
}

// On a TLS port the per-IP handshake cap counts the TLS handshake: silent
// connections that have not finished it hold their places, and one past
// the cap is closed at once, before any TLS byte is read.
func TestMuxTLSHandshakeCapPerIP(t *testing.T) {
	checkNoGoroutineLeak(t)
	ca, err := certs.NewDevCA(filepath.Join(t.TempDir(), "ca"), []string{"a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := newTLSMux(t, ca, "a", Options{})
	m.limits.handshakesPerIP = 3
	mustListen(t, m, 1)
	for range 3 {
		c, err := net.Dial("tcp", m.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitFor(t, 5*time.Second, "three connections in their handshake", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.shaking["127.0.0.1"] == 3
	})
	extra, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	waitClosedByPeer(t, extra, 2*time.Second) // long before the handshake timeout
	if got := m.stats.refused.Load(); got != 1 {
		t.Fatalf("refused %d, want 1", got)
	}
}
