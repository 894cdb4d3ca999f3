package peermux

import (
	"context"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// The settings of a raft.NetworkTransport over a StreamLayer (those of
// raft.NewTCPTransportWithLogger as Quorate always used them): up to 3
// pooled connections per peer, 10s I/O timeout.
const (
	RaftMaxPool = 3
	RaftTimeout = 10 * time.Second
)

// Dialer opens this node's connections to other nodes: Raft peers and
// other nodes' APIs (forwarding, joins, status). Safe for concurrent use.
//
// When the node listens on a specific IP (not 0.0.0.0 or ::), connections
// leave from that IP, so peers, firewalls and per-address rules see the
// address the node is known by — on a multi-homed host the kernel would
// otherwise pick a source address by route. A loopback listener still dials
// non-loopback peers (and IPv4 never binds for IPv6 peers) with the kernel's
// choice, since binding would make such dials fail.
type Dialer struct {
	local   net.IP            // nil: let the kernel choose
	dialMap map[string]string // addresses dialed instead of others
}

// NewDialer returns a dialer whose connections leave from the IP of
// listen (a listener's address) when it is a specific address, and that
// dials dialMap[addr] instead of an address addr the map holds (a
// debugging aid: the node's Config.DebugDialMap).
func NewDialer(listen net.Addr, dialMap map[string]string) *Dialer {
	d := &Dialer{dialMap: dialMap}
	if a, ok := listen.(*net.TCPAddr); ok && a.IP != nil && !a.IP.IsUnspecified() {
		d.local = a.IP
	}
	return d
}

// DialContext dials addr (host:port) over TCP, or the address the dial map
// redirects it to.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if to, ok := d.dialMap[addr]; ok {
		addr = to
	}
	var nd net.Dialer
	if ip := d.localFor(addr); ip != nil {
		nd.LocalAddr = &net.TCPAddr{IP: ip}
	}
	return nd.DialContext(ctx, network, addr)
}

// localFor returns the IP to dial addr from, or nil for the kernel's choice.
func (d *Dialer) localFor(addr string) net.IP {
	if d.local == nil {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil // the dial reports the error
	}
	ip := net.ParseIP(host)
	if ip == nil { // a name: the dialer keeps to the local address's family
		if d.local.IsLoopback() && host != "localhost" {
			return nil
		}
		return d.local
	}
	if (ip.To4() == nil) != (d.local.To4() == nil) || d.local.IsLoopback() && !ip.IsLoopback() {
		return nil
	}
	return d.local
}

// StreamLayer returns a raft.StreamLayer for Raft group group over the mux:
// it accepts the group's connections and dials the group's channel on
// peers. Its Close, which raft.NetworkTransport calls on Close (and so
// raft.Raft on Shutdown), unregisters the group and closes every connection
// of the group on this node. It fails like Listener.
func (m *Mux) StreamLayer(group uint32) (raft.StreamLayer, error) {
	l, err := m.listen(uint64(group))
	if err != nil {
		return nil, err
	}
	return &muxStreamLayer{muxListener: l, dialed: newConnSet()}, nil
}

// muxStreamLayer is a Raft group's raft.StreamLayer over the mux.
type muxStreamLayer struct {
	*muxListener
	dialed *connSet
}

// Dial opens a connection to the group's replica at address. The
// connection replaces itself with a new one when it is written to after
// half the idle timeout without writes (see redialConn): the Raft transport
// pools connections, and must not pick one the peer closed for idleness.
func (s *muxStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	dial := func() (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return s.m.dial(ctx, string(address), s.ch, s.dialed)
	}
	c, err := dial()
	if err != nil || s.m.idleTimeout <= 0 {
		return c, err
	}
	return newRedialConn(c, s.m.idleTimeout/2, dial, &s.m.stats.redials), nil
}

// Close closes the group's listener and the connections it accepted and
// dialed.
func (s *muxStreamLayer) Close() error {
	err := s.muxListener.Close()
	s.dialed.closeAll()
	return err
}
