package peermux

import (
	"context"
	"net"
	"time"
)

// RaftTimeout is the I/O and per-RPC timeout of the node's Raft RPCs
// (package raftmux), a raft.NetworkTransport's.
const RaftTimeout = 10 * time.Second

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
