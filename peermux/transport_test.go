package peermux

import (
	"context"
	"net"
	"testing"
)

// acceptOne accepts one connection on ln and returns the IP it came from.
func acceptOne(t *testing.T, ln net.Listener) <-chan net.IP {
	t.Helper()
	from := make(chan net.IP, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			from <- nil
			return
		}
		from <- c.RemoteAddr().(*net.TCPAddr).IP
		c.Close()
	}()
	return from
}

// muxOn starts a peer mux listening on bind.
func muxOn(t *testing.T, bind string, dialMap map[string]string, advertise net.Addr) *Mux {
	t.Helper()
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		t.Fatal(err)
	}
	m := New(ln, NewDialer(ln.Addr(), dialMap), advertise, nil, Options{})
	go m.Serve()
	t.Cleanup(func() { m.Close() })
	return m
}

// The mux's dials leave from the IP it listens on.
func TestPeerDialsFromListenerIP(t *testing.T) {
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	m := muxOn(t, "127.0.0.2:0", nil, nil)
	if got := m.Addr().(*net.TCPAddr).IP.String(); got != "127.0.0.2" {
		t.Fatalf("Addr %v, want the bound 127.0.0.2", m.Addr())
	}
	from := acceptOne(t, peer)
	c, err := m.dialer.DialContext(context.Background(), "tcp", peer.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ip := <-from; !ip.Equal(net.ParseIP("127.0.0.2")) {
		t.Fatalf("peer saw the connection from %v, want 127.0.0.2", ip)
	}
}

func TestPeerDialsFollowDialMap(t *testing.T) {
	via, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer via.Close()
	m := muxOn(t, "127.0.0.3:0", map[string]string{"127.0.0.9:7100": via.Addr().String()}, nil)
	from := acceptOne(t, via)
	c, err := m.dialer.DialContext(context.Background(), "tcp", "127.0.0.9:7100")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ip := <-from; !ip.Equal(net.ParseIP("127.0.0.3")) {
		t.Fatalf("the mapped address saw the connection from %v, want 127.0.0.3", ip)
	}
}

// A mux on 0.0.0.0 names the advertised address and leaves the source
// address of its dials to the kernel.
func TestPeerListenerAdvertise(t *testing.T) {
	adv := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 7170}
	m := muxOn(t, "0.0.0.0:0", nil, adv)
	if m.Addr() != adv {
		t.Fatalf("Addr %v, want the advertised %v", m.Addr(), adv)
	}
	if m.dialer.local != nil {
		t.Fatalf("a listener on 0.0.0.0 binds outgoing connections to %v", m.dialer.local)
	}
}

func TestPeerDialerLocalFor(t *testing.T) {
	tcp := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 1} }
	tests := []struct {
		listen, target, want string // want "" means the kernel's choice
	}{
		{"127.0.0.2", "127.0.0.1:7170", "127.0.0.2"},
		{"127.0.0.2", "localhost:7170", "127.0.0.2"},
		{"127.0.0.2", "10.0.0.2:7170", ""},        // a loopback source cannot reach another host
		{"127.0.0.2", "node2.example:7170", ""},   // nor, probably, a name
		{"127.0.0.2", "[::1]:7170", ""},           // another family
		{"10.0.0.1", "10.0.0.2:7170", "10.0.0.1"}, // multi-homed host: the listen address
		{"10.0.0.1", "node2.example:7170", "10.0.0.1"},
		{"0.0.0.0", "10.0.0.2:7170", ""},
		{"::", "[::1]:7170", ""},
		{"::1", "[::1]:7170", "::1"},
	}
	for _, tt := range tests {
		got := NewDialer(tcp(tt.listen), nil).localFor(tt.target)
		if (got == nil) != (tt.want == "") || got != nil && !got.Equal(net.ParseIP(tt.want)) {
			t.Errorf("listening on %s, dialing %s from %v, want %q", tt.listen, tt.target, got, tt.want)
		}
	}
}
