package node

import (
	"context"
	"crypto/tls"
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
// descriptors from every other client. A connection past --max-conns is
// closed as soon as it is accepted, before TLS or HTTP reads a byte of it;
// one past --max-conns-per-ip takes the place of its address's least useful
// connection (limitListener). Each
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

// limitListener is a net.Listener that holds at most limits' connections.
// Safe for concurrent use.
//
// Past --max-conns, a new connection is closed as soon as it is accepted.
// Past --max-conns-per-ip, a new connection takes the place of that
// address's least useful one: of those with no request running that
// arrived whole, the one that has gone longest without completing a
// request (since it was accepted, when it never did). Only when every one
// is running such a request is the new connection closed instead. So
// connections that sit idle, or send their requests too slowly to finish
// them, cannot lock out a client that shares their address and completes
// requests: its connections stay the most recently useful, and a new one
// of its takes the place of the attacker's oldest.
type limitListener struct {
	net.Listener
	limits connLimits
	log    *slog.Logger
	name   string // the flag of the listener's address, for the log

	mu      sync.Mutex
	open    int
	perIP   map[string]map[*limitedConn]struct{}
	lastLog time.Time
	refused atomic.Int64
	evicted atomic.Int64
}

func newLimitListener(ln net.Listener, limits connLimits, log *slog.Logger, name string) *limitListener {
	return &limitListener{Listener: ln, limits: limits, log: log, name: name, perIP: make(map[string]map[*limitedConn]struct{})}
}

// Accept returns the next connection within the bounds.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l, ip: remoteIP(c)}
		lc.lastUseful.Store(time.Now().UnixNano())
		victim, why := l.admit(lc)
		if why != "" {
			// Counted before closing: whoever sees the connection closed
			// sees it counted.
			l.refusedOne(lc.ip, why)
			_ = c.Close()
			continue
		}
		if victim != nil {
			l.evictedOne(victim)
			_ = victim.Close()
		}
		return lc, nil
	}
}

// admit counts c in, or says which bound it passes. At its address's bound,
// it returns the connection c takes the place of, already counted out.
func (l *limitListener) admit(c *limitedConn) (victim *limitedConn, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limits.total > 0 && l.open >= l.limits.total {
		return nil, fmt.Sprintf("%d connections open (--max-conns)", l.open)
	}
	conns := l.perIP[c.ip]
	if l.limits.perIP > 0 && len(conns) >= l.limits.perIP {
		if victim = l.leastUseful(conns); victim == nil {
			return nil, fmt.Sprintf("%d connections open from %s, each running a request (--max-conns-per-ip)", len(conns), c.ip)
		}
		delete(conns, victim)
		l.open--
	}
	if conns == nil {
		conns = make(map[*limitedConn]struct{})
		l.perIP[c.ip] = conns
	}
	conns[c] = struct{}{}
	l.open++
	return victim, ""
}

// leastUseful is the connection of conns that may be closed for a new
// one: with no request running that arrived whole, the one that has gone
// longest without completing one. nil when every one has such a request.
func (l *limitListener) leastUseful(conns map[*limitedConn]struct{}) *limitedConn {
	var victim *limitedConn
	var oldest int64
	for c := range conns {
		if c.busy.Load() > 0 {
			continue
		}
		if t := c.lastUseful.Load(); victim == nil || t < oldest {
			victim, oldest = c, t
		}
	}
	return victim
}

func (l *limitListener) release(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	conns := l.perIP[c.ip]
	if _, ok := conns[c]; !ok {
		return // evicted: counted out then
	}
	delete(conns, c)
	l.open--
	if len(conns) == 0 {
		delete(l.perIP, c.ip)
	}
}

// refusedOne counts a refused connection and warns, at most every
// refusalLogEvery.
func (l *limitListener) refusedOne(ip, why string) {
	total := l.refused.Add(1)
	if l.logNow() {
		l.log.Warn("refusing connections", "listener", l.name, "from", ip, "because", why, "refused_so_far", total)
	}
}

// evictedOne counts a connection closed for a new one from its address
// and warns, at most every refusalLogEvery.
func (l *limitListener) evictedOne(c *limitedConn) {
	total := l.evicted.Add(1)
	if l.logNow() {
		l.log.Warn("closing idle or slow connections for new ones (--max-conns-per-ip)", "listener", l.name, "from", c.ip,
			"unused_for", time.Since(time.Unix(0, c.lastUseful.Load())).Round(time.Millisecond), "closed_so_far", total)
	}
}

func (l *limitListener) logNow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.lastLog) < refusalLogEvery {
		return false
	}
	l.lastLog = now
	return true
}

// ConnStats are a client-facing listener's connection counts: open now,
// refused, and closed to make room for another from their address.
type ConnStats struct {
	Open, Refused, Evicted int64
}

func (l *limitListener) stats() ConnStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ConnStats{Open: int64(l.open), Refused: l.refused.Load(), Evicted: l.evicted.Load()}
}

// limitedConn is a connection within its listener's bounds. It releases
// its place once, when closed, and records its use (requestReceived,
// requestDone) for the per-address bound.
type limitedConn struct {
	net.Conn
	l    *limitListener
	ip   string
	once sync.Once
	// lastUseful is when the connection was accepted or last completed
	// a request (UnixNano); busy counts its requests received whole
	// whose handlers still run.
	lastUseful atomic.Int64
	busy       atomic.Int32
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}

// requestReceived records that a request arrived whole (its headers and
// body); requestDone, that its handler returned.
func (c *limitedConn) requestReceived() {
	c.busy.Add(1)
	c.lastUseful.Store(time.Now().UnixNano())
}

func (c *limitedConn) requestDone() {
	c.lastUseful.Store(time.Now().UnixNano())
	c.busy.Add(-1)
}

// connKey is the context key of a request's *limitedConn.
type connKey struct{}

// withConn is the http.Server's ConnContext: it puts the connection's
// *limitedConn, under TLS or not, in its requests' contexts.
func withConn(ctx context.Context, c net.Conn) context.Context {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	if lc, ok := c.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// connOf is the *limitedConn of a request's context; nil on the peer port.
func connOf(ctx context.Context) *limitedConn {
	lc, _ := ctx.Value(connKey{}).(*limitedConn)
	return lc
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

// listen binds addr (the value of flag) for a client-facing listener with
// limits' bounds.
func listen(flag, addr string, limits connLimits, log *slog.Logger) (*limitListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("node: --%s: %w", flag, err)
	}
	return newLimitListener(ln, limits, log, flag), nil
}

// edgeListeners are the node's client-facing listeners, bound in New: the
// API port's, and the admin port's (Config.AdminAddr; nil without).
type edgeListeners struct {
	api, admin *limitListener
}

// open binds cfg's API and admin addresses. When it fails, close closes
// what it bound.
func (l *edgeListeners) open(cfg Config, log *slog.Logger) (err error) {
	if l.api, err = listen("api-addr", cfg.APIAddr, cfg.apiConnLimits(), log); err != nil {
		return err
	}
	if cfg.AdminAddr != "" {
		if l.admin, err = listen("admin-addr", cfg.AdminAddr, cfg.apiConnLimits(), log); err != nil {
			return err
		}
	}
	return nil
}

// close closes the listeners (not tracked by their servers when Run never
// started).
func (l *edgeListeners) close() error {
	var errs []error
	for _, ln := range []*limitListener{l.api, l.admin} {
		if ln != nil {
			errs = append(errs, ignoreClosed(ln.Close()))
		}
	}
	return errors.Join(errs...)
}

// AdminAddr is the host:port the admin listener is bound to (Config.AdminAddr
// with its port chosen); "" without one.
func (n *Node) AdminAddr() string {
	if n.ln.admin == nil {
		return ""
	}
	return n.ln.admin.Addr().String()
}

// APIConnStats returns the API listener's connection counts; with an
// admin listener (Config.AdminAddr), admin's are those of that one.
func (n *Node) APIConnStats() (api, admin ConnStats) {
	api = n.ln.api.stats()
	if n.ln.admin != nil {
		admin = n.ln.admin.stats()
	}
	return api, admin
}

// ErrAdminElsewhere is returned for an admin call to the API port of a node
// that serves them on an admin listener (Config.AdminAddr).
var ErrAdminElsewhere = errors.New("admin calls are served on this node's admin listener (--admin-addr), not on its API port")

// InflightStats returns the in-flight request bytes of the API port, the
// admin listener (zero without one) and the peer port's forwarding server.
func (n *Node) InflightStats() (api, admin, peer InflightStats) {
	if g := n.bodyGuards[serveAdmin]; g != nil {
		admin = g.budget.stats()
	}
	return n.bodyGuards[serveAPI].budget.stats(), admin, n.bodyGuards[servePeer].budget.stats()
}
