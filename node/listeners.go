package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The client-facing listeners (the API port and the admin port) bound the
// connections they hold: in all, and from one client address, so that one
// host opening connections in a loop cannot take the node's file
// descriptors from every other client. A connection past a bound is closed
// as soon as it is accepted, before TLS or HTTP reads a byte of it. Each
// HTTP/2 connection carries at most MaxStreamsPerConn calls at once. The
// peer port has its own bounds (peermux).
const (
	// DefaultMaxConns is the default Config.MaxConns.
	DefaultMaxConns = 16384
	// DefaultMaxConnsPerIP is the default Config.MaxConnsPerIP: a gateway
	// keeps a few HTTP/2 connections; a load balancer in front of the
	// node, or many clients behind one NAT address, may need more.
	DefaultMaxConnsPerIP = 1024
	// DefaultMaxStreamsPerConn is the default Config.MaxStreamsPerConn.
	DefaultMaxStreamsPerConn = 256
	// refusalLogEvery spaces the warnings about refused connections.
	refusalLogEvery = 10 * time.Second
)

// connLimits are a listener's bounds (0: none).
type connLimits struct{ total, perIP int }

// apiConnLimits are the bounds of the API and admin listeners.
func (c Config) apiConnLimits() connLimits {
	return connLimits{total: orDefault(c.MaxConns, DefaultMaxConns), perIP: orDefault(c.MaxConnsPerIP, DefaultMaxConnsPerIP)}
}

// http2Config is the HTTP/2 settings of the node's servers.
func (c Config) http2Config() *http.HTTP2Config {
	return &http.HTTP2Config{MaxConcurrentStreams: orDefault(c.MaxStreamsPerConn, DefaultMaxStreamsPerConn)}
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// checkConnLimits validates the connection bounds; bad formats the error.
func (c Config) checkConnLimits(bad func(flag, format string, args ...any) error) error {
	for _, b := range []struct {
		flag     string
		v, lo, h int
	}{
		{"max-conns", c.MaxConns, 16, 1 << 20},
		{"max-conns-per-ip", c.MaxConnsPerIP, 1, 1 << 20},
		{"max-streams-per-conn", c.MaxStreamsPerConn, 1, 1 << 16},
	} {
		if b.v != 0 && (b.v < b.lo || b.v > b.h) {
			return bad(b.flag, "must be between %d and %d, or 0 for the default (got %d)", b.lo, b.h, b.v)
		}
	}
	if l := c.apiConnLimits(); l.perIP > l.total {
		return bad("max-conns-per-ip", "must be ≤ --max-conns (%d > %d)", l.perIP, l.total)
	}
	return nil
}

// limitListener is a net.Listener that holds at most limits' connections,
// closing those past a bound as it accepts them. Safe for concurrent use.
type limitListener struct {
	net.Listener
	limits connLimits
	log    *slog.Logger
	name   string // the flag of the listener's address, for the log

	mu      sync.Mutex
	open    int
	perIP   map[string]int
	lastLog time.Time
	refused atomic.Int64
}

func newLimitListener(ln net.Listener, limits connLimits, log *slog.Logger, name string) *limitListener {
	return &limitListener{Listener: ln, limits: limits, log: log, name: name, perIP: make(map[string]int)}
}

// Accept returns the next connection within the bounds.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		if why := l.admit(ip); why != "" {
			// Counted before closing: whoever sees the connection closed
			// sees it counted.
			l.refusedOne(ip, why)
			_ = c.Close()
			continue
		}
		return &limitedConn{Conn: c, release: func() { l.release(ip) }}, nil
	}
}

// admit counts a connection from ip in, or says which bound it passes.
func (l *limitListener) admit(ip string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.limits.total > 0 && l.open >= l.limits.total:
		return fmt.Sprintf("%d connections open (--max-conns)", l.open)
	case l.limits.perIP > 0 && l.perIP[ip] >= l.limits.perIP:
		return fmt.Sprintf("%d connections open from %s (--max-conns-per-ip)", l.perIP[ip], ip)
	}
	l.open++
	l.perIP[ip]++
	return ""
}

func (l *limitListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.perIP[ip]--; l.perIP[ip] <= 0 {
		delete(l.perIP, ip)
	}
}

// refusedOne counts a refused connection and warns, at most every
// refusalLogEvery.
func (l *limitListener) refusedOne(ip, why string) {
	total := l.refused.Add(1)
	l.mu.Lock()
	now := time.Now()
	logIt := now.Sub(l.lastLog) >= refusalLogEvery
	if logIt {
		l.lastLog = now
	}
	l.mu.Unlock()
	if logIt {
		l.log.Warn("refusing connections", "listener", l.name, "from", ip, "because", why, "refused_so_far", total)
	}
}

// ConnStats are a client-facing listener's connection counts.
type ConnStats struct {
	Open, Refused int64
}

func (l *limitListener) stats() ConnStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ConnStats{Open: int64(l.open), Refused: l.refused.Load()}
}

// limitedConn releases its place in its listener's bounds once, when
// closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes the TCP connection. The HTTP server closes a
// connection it refused a request on in two steps (write side, then the
// rest once the client has stopped sending), so that the client reads the
// answer instead of a reset: without this method, the wrapper would hide
// the step.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// remoteIP is the IP of c's remote end ("" when it has none).
func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return ""
	}
	return host
}

// listen binds addr (the value of flag) for a client-facing listener.
func (n *Node) listen(flag, addr string) (*limitListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("node: --%s: %w", flag, err)
	}
	return newLimitListener(ln, n.cfg.apiConnLimits(), n.log, flag), nil
}

// AdminAddr is the host:port the admin listener is bound to (Config.AdminAddr
// with its port chosen); "" without one.
func (n *Node) AdminAddr() string {
	if n.adminLn == nil {
		return ""
	}
	return n.adminLn.Addr().String()
}

// APIConnStats returns the API listener's connection counts; with an
// admin listener (Config.AdminAddr), admin's are those of that one.
func (n *Node) APIConnStats() (api, admin ConnStats) {
	api = n.apiLn.stats()
	if n.adminLn != nil {
		admin = n.adminLn.stats()
	}
	return api, admin
}

// ErrAdminElsewhere is returned for an admin call to the API port of a node
// that serves them on an admin listener (Config.AdminAddr).
var ErrAdminElsewhere = errors.New("node: admin calls are served on this node's admin listener (--admin-addr), not on its API port")
