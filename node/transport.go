package node

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft transport settings (those of raft.NewTCPTransportWithLogger as Quorate
// always used them): up to 3 pooled connections per peer, 10s I/O timeout.
const (
	raftMaxPool = 3
	raftTimeout = 10 * time.Second
)

// peerDialer opens this node's connections to other nodes: Raft peers and
// other nodes' APIs (forwarding, joins, status). Safe for concurrent use.
//
// When the node listens on a specific IP (not 0.0.0.0 or ::), connections
// leave from that IP, so peers, firewalls and per-address rules see the
// address the node is known by — on a multi-homed host the kernel would
// otherwise pick a source address by route. A loopback listener still dials
// non-loopback peers (and IPv4 never binds for IPv6 peers) with the kernel's
// choice, since binding would make such dials fail.
type peerDialer struct {
	local   net.IP            // nil: let the kernel choose
	dialMap map[string]string // Config.DebugDialMap
}

// newPeerDialer returns a dialer whose connections leave from the IP of
// listen (a listener's address) when it is a specific address.
func newPeerDialer(listen net.Addr, dialMap map[string]string) *peerDialer {
	d := &peerDialer{dialMap: dialMap}
	if a, ok := listen.(*net.TCPAddr); ok && a.IP != nil && !a.IP.IsUnspecified() {
		d.local = a.IP
	}
	return d
}

// DialContext dials addr (host:port) over TCP, or the address
// Config.DebugDialMap redirects it to.
func (d *peerDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
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
func (d *peerDialer) localFor(addr string) net.IP {
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

// streamLayer is the Raft stream layer: a TCP listener for incoming
// connections and peerDialer for outgoing ones.
type streamLayer struct {
	net.Listener
	advertise net.Addr // nil: the listener's address
	dialer    *peerDialer
}

var (
	errRaftNotAdvertisable = errors.New("bound to an unspecified address; set --advertise-raft-addr")
	errRaftNotTCP          = errors.New("not a TCP address")
)

// newStreamLayer listens on bindAddr. Its Addr is advertise when set, else
// the bound address, which must then be a specific IP.
func newStreamLayer(bindAddr string, advertise net.Addr, dialMap map[string]string) (*streamLayer, error) {
	ln, err := net.Listen("tcp", bindAddr)
	if err != nil {
		return nil, err
	}
	s := &streamLayer{Listener: ln, advertise: advertise, dialer: newPeerDialer(ln.Addr(), dialMap)}
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok {
		ln.Close()
		return nil, errRaftNotTCP
	}
	if addr.IP == nil || addr.IP.IsUnspecified() {
		ln.Close()
		return nil, errRaftNotAdvertisable
	}
	return s, nil
}

// Addr is the address peers dial.
func (s *streamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.Listener.Addr()
}

// Dial opens a connection to a Raft peer.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.dialer.DialContext(ctx, "tcp", string(address))
}

// newRaftTransport is raft.NewTCPTransportWithLogger with Quorate's stream
// layer: same pool, timeout and advertise rules, but outgoing connections
// leave from the bound IP and follow Config.DebugDialMap.
func newRaftTransport(bindAddr string, advertise net.Addr, dialMap map[string]string, logger hclog.Logger) (*raft.NetworkTransport, error) {
	stream, err := newStreamLayer(bindAddr, advertise, dialMap)
	if err != nil {
		return nil, err
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  stream,
		MaxPool: raftMaxPool,
		Timeout: raftTimeout,
		Logger:  logger,
	}), nil
}
