package peermux

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// newAuthMux serves a mux of cluster with options o on a fresh loopback
// listener.
func newAuthMux(tb testing.TB, cluster string, o Options) *Mux {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	m := New(ln, NewDialer(ln.Addr(), nil), nil, nil, o)
	m.SetClusterID(cluster, false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Serve()
	}()
	tb.Cleanup(func() {
		_ = m.Close()
		<-done
	})
	return m
}

func newSecret(tb testing.TB) []byte {
	tb.Helper()
	b := make([]byte, MinSecretLen)
	_, _ = rand.Read(b)
	return b
}

// echoOn accepts connections on l and echoes what they send.
func echoOn(l net.Listener) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

// roundTrip dials ch on to from from and checks that what it sends comes
// back.
func roundTrip(t *testing.T, from, to *Mux, ch uint64) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := from.Dial(ctx, to.Addr().String(), ch)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != "ping" {
		t.Fatalf("echoed %q, want ping", got)
	}
	return nil
}

// Two muxes with the same secret carry a channel's bytes; a mux with
// another secret, or none, neither dials nor is dialed.
func TestMuxAuthSecrets(t *testing.T) {
	checkNoGoroutineLeak(t)
	cluster, secret := newTestClusterID(), newSecret(t)
	a := newAuthMux(t, cluster, Options{Secret: secret})
	b := newAuthMux(t, cluster, Options{Secret: secret})
	echoOn(mustListen(t, b, 7))
	echoOn(mustListen(t, a, 7))
	if err := roundTrip(t, a, b, 7); err != nil {
		t.Fatalf("same secret: %v", err)
	}
	if err := roundTrip(t, b, a, 7); err != nil {
		t.Fatalf("same secret, the other way: %v", err)
	}

	wrong := newAuthMux(t, cluster, Options{Secret: newSecret(t)})
	if err := roundTrip(t, wrong, b, 7); !errors.Is(err, ErrPeerAuth) {
		t.Fatalf("another secret dialing: %v; want ErrPeerAuth", err)
	}
	waitFor(t, 10*time.Second, "b counts the dialer of another secret", func() bool { return b.Stats().AuthRefused == 1 })
	if err := roundTrip(t, b, wrong, 7); !errors.Is(err, ErrPeerAuth) {
		t.Fatalf("dialing a mux of another secret: %v; want ErrPeerAuth", err)
	}

	none := newAuthMux(t, cluster, Options{})
	echoOn(mustListen(t, none, 7))
	if err := roundTrip(t, none, b, 7); err == nil {
		t.Fatal("a mux without the secret (only the cluster ID) got through")
	}
	waitFor(t, 10*time.Second, "b counts the dialer without a secret", func() bool { return b.Stats().AuthRefused == 2 })
	if err := roundTrip(t, b, none, 7); !errors.Is(err, ErrPeerAuth) {
		t.Fatalf("dialing a mux without a secret: %v; want ErrPeerAuth", err)
	}
	waitFor(t, 10*time.Second, "the mux without a secret counts the authenticating dialer", func() bool { return none.Stats().AuthRefused == 1 })
	if got := a.Stats().AuthRefused; got != 0 {
		t.Fatalf("a refused %d connections of its own cluster", got)
	}
}

// rawAuth runs a dialer's side of the exchange by hand on a new connection
// to m, sending proof(header, listener's nonce, listener's MAC) as its
// proof, and returns the connection and every byte it sent.
func rawAuth(t *testing.T, m *Mux, cluster string, ch uint64, proof func(h *peerHeader, nonceL, macL []byte) []byte) (net.Conn, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	h := authHeader(ch, cluster)
	sent := h.appendAuth(nil)
	if _, err := c.Write(sent); err != nil {
		t.Fatal(err)
	}
	answer := make([]byte, authNonceLen+authMACLen)
	if _, err := io.ReadFull(c, answer); err != nil {
		t.Fatalf("reading the listener's answer: %v", err)
	}
	p := append(proof(&h, answer[:authNonceLen], answer[authNonceLen:]), "ping"...)
	if _, err := c.Write(p); err != nil {
		t.Fatal(err)
	}
	return c, append(sent, p...)
}

// The exchange refuses a replayed transcript, a reflected listener MAC, a
// truncated proof and a dialer that stops, each within the handshake
// timeout, and takes the right proof.
func TestMuxAuthHandshake(t *testing.T) {
	checkNoGoroutineLeak(t)
	const handshake = 300 * time.Millisecond
	cluster, secret := newTestClusterID(), newSecret(t)
	m := newAuthMux(t, cluster, Options{Secret: secret, HandshakeTimeout: handshake})
	echoOn(mustListen(t, m, 7))
	refused := func(want int64) {
		t.Helper()
		waitFor(t, 10*time.Second, "the refusal counted", func() bool { return m.Stats().AuthRefused == want })
	}

	// The right proof: the channel echoes.
	good, transcript := rawAuth(t, m, cluster, 7, func(h *peerHeader, nonceL, macL []byte) []byte {
		if !bytes.Equal(macL, authMAC(secret, roleListener, h, nonceL)) {
			t.Fatal("the listener's MAC does not prove the secret")
		}
		return authMAC(secret, roleDialer, h, nonceL)
	})
	got := make([]byte, 4)
	if _, err := io.ReadFull(good, got); err != nil || string(got) != "ping" {
		t.Fatalf("the right proof: read %q, %v; want ping", got, err)
	}

	// The same bytes again: the listener's nonce is new, the proof stale.
	replay, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer replay.Close()
	if _, err := replay.Write(transcript[:len(transcript)-len("ping")]); err != nil {
		t.Fatal(err)
	}
	_ = replay.SetReadDeadline(time.Now().Add(10 * time.Second))
	if rest, err := io.ReadAll(replay); len(rest) != authNonceLen+authMACLen || err != nil {
		t.Fatalf("replayed transcript: read %d bytes, %v; want the listener's answer, then the connection closed", len(rest), err)
	}
	refused(1)

	// The listener's own MAC sent back as the dialer's proof.
	reflect, _ := rawAuth(t, m, cluster, 7, func(_ *peerHeader, _, macL []byte) []byte { return macL })
	waitClosedByPeer(t, reflect, 10*time.Second)
	refused(2)

	// A proof for another channel.
	other, _ := rawAuth(t, m, cluster, 7, func(h *peerHeader, nonceL, _ []byte) []byte {
		h2 := *h
		h2.ch = 8
		return authMAC(secret, roleDialer, &h2, nonceL)
	})
	waitClosedByPeer(t, other, 10*time.Second)
	refused(3)

	// Half a proof, then nothing; and nothing after the header: closed by
	// the handshake deadline.
	for i, n := range []int{authMACLen / 2, 0} {
		c, err := net.Dial("tcp", m.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		h := authHeader(7, cluster)
		if _, err := c.Write(h.appendAuth(nil)); err != nil {
			t.Fatal(err)
		}
		answer := make([]byte, authNonceLen+authMACLen)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, answer); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(authMAC(secret, roleDialer, &h, answer[:authNonceLen])[:n]); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		waitClosedByPeer(t, c, handshake+5*time.Second)
		if d := time.Since(start); d > handshake+2*time.Second {
			t.Fatalf("%d bytes of the proof: closed after %v, want within the handshake timeout %v", n, d, handshake)
		}
		refused(int64(4 + i))
	}

	// A plain header with the right cluster ID, and another cluster's
	// authenticating header: no answer.
	for i, hdr := range [][]byte{
		append(AppendHeader(nil, 7, cluster), "ping"...),
		func() []byte { h := authHeader(7, newTestClusterID()); return h.appendAuth(nil) }(),
	} {
		c, err := net.Dial("tcp", m.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(hdr); err != nil {
			t.Fatal(err)
		}
		waitClosedByPeer(t, c, 10*time.Second)
		if i == 0 {
			refused(6)
		}
	}
	if got := m.Stats().OtherCluster; got != 1 {
		t.Fatalf("OtherCluster %d, want 1 (the header of another cluster)", got)
	}
}

// A dialer whose peer answers nothing fails by the handshake timeout even
// when its context has no deadline.
func TestMuxAuthDialTimeout(t *testing.T) {
	checkNoGoroutineLeak(t)
	const handshake = 200 * time.Millisecond
	m := newAuthMux(t, "", Options{Secret: newSecret(t), HandshakeTimeout: handshake})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(io.Discard, c) // reads the header, answers nothing
	}()
	start := time.Now()
	_, err = m.Dial(context.Background(), ln.Addr().String(), 7)
	if !errors.Is(err, ErrPeerAuth) {
		t.Fatalf("dialing a silent peer: %v; want ErrPeerAuth", err)
	}
	if d := time.Since(start); d > handshake+5*time.Second {
		t.Fatalf("the dial took %v; want about the handshake timeout %v", d, handshake)
	}
}
