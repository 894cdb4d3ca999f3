package peermux

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// What the peer port holds for connections that have not shown they are
// peers. A connection is accepted only under two caps (muxLimits); it must
// send its header and the first byte of its channel's traffic within the
// handshake timeout before it is handed to its channel — so a connection
// that sends a header and then nothing costs a goroutine and a socket, not
// a channel's buffers, and not for long; once handed over, it is
// closed when it sends nothing for the idle timeout.

// muxLimits caps what the peer port accepts.
type muxLimits struct {
	conns           int // accepted connections open at once
	handshakesPerIP int // accepted connections in their handshake, per remote IP
}

// admit counts c against the limits, or logs (at most once a minute) and
// reports false when a limit is reached. When it returns ok, the caller
// calls handshakeDone(ip) when c's handshake ends and release once c is
// closed (trackedConn.onClose).
func (m *Mux) admit(c net.Conn) (ip string, ok bool) {
	ip = c.RemoteAddr().String()
	if a, isTCP := c.RemoteAddr().(*net.TCPAddr); isTCP {
		ip = a.IP.String()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var reason string
	switch {
	case m.open >= m.limits.conns:
		reason = "open connections"
	case m.shaking[ip] >= m.limits.handshakesPerIP:
		reason = "connections in their handshake from one IP"
	default:
		m.open++
		m.shaking[ip]++
		return ip, true
	}
	m.stats.refused.Add(1)
	if now := time.Now(); now.Sub(m.refusedAt) >= time.Minute {
		m.refusedAt = now
		m.log.Warn("refusing peer connections: at the limit of "+reason,
			"remote", ip, "open", m.open, "in_handshake_from_ip", m.shaking[ip],
			"max_open", m.limits.conns, "max_in_handshake_per_ip", m.limits.handshakesPerIP)
	}
	return ip, false
}

// handshakeDone ends the handshake of a connection from ip.
func (m *Mux) handshakeDone(ip string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shaking[ip]--; m.shaking[ip] <= 0 {
		delete(m.shaking, ip)
	}
}

// release frees an accepted connection's place under the limits.
func (m *Mux) release() {
	m.mu.Lock()
	m.open--
	m.mu.Unlock()
}

// idleReader is the read side of an accepted connection once handed to its
// channel: the byte read during the handshake comes first, and each read
// waits at most the idle timeout (or the caller's earlier deadline).
type idleReader struct {
	mu       sync.Mutex
	pending  []byte        // read during the handshake, not yet returned
	timeout  time.Duration // 0: no idle timeout
	deadline time.Time     // the caller's read deadline
	closed   *atomic.Int64 // counts closures for idleness
}

// accepted sets up c, just handshaken, to return first before its own bytes
// and to close when idle for timeout.
func (c *trackedConn) accepted(first []byte, timeout time.Duration, closed *atomic.Int64) {
	c.idle.mu.Lock()
	c.idle.pending, c.idle.timeout, c.idle.closed = first, timeout, closed
	c.idle.mu.Unlock()
}

// Read reads from the connection. On an accepted connection, a read that
// finds nothing for the idle timeout closes it and returns io.EOF: the peer
// went away, as far as the reader needs to know.
func (c *trackedConn) Read(p []byte) (int, error) {
	r := &c.idle
	r.mu.Lock()
	if len(r.pending) > 0 {
		n := copy(p, r.pending)
		r.pending = r.pending[n:]
		r.mu.Unlock()
		return n, nil
	}
	if r.timeout <= 0 {
		r.mu.Unlock()
		return c.Conn.Read(p)
	}
	idleAt := time.Now().Add(r.timeout)
	d := idleAt
	if !r.deadline.IsZero() && r.deadline.Before(d) {
		d = r.deadline
	}
	err := c.Conn.SetReadDeadline(d)
	r.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		return n, err
	}
	r.mu.Lock()
	idle := (r.deadline.IsZero() || r.deadline.After(idleAt)) && !time.Now().Before(idleAt)
	r.mu.Unlock()
	if !idle {
		return n, err
	}
	r.closed.Add(1)
	c.Close()
	return n, io.EOF
}

// SetReadDeadline sets the read deadline; on an accepted connection the idle
// timeout still applies when it is later.
func (c *trackedConn) SetReadDeadline(t time.Time) error {
	c.idle.mu.Lock()
	defer c.idle.mu.Unlock()
	c.idle.deadline = t
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets the read and write deadlines.
func (c *trackedConn) SetDeadline(t time.Time) error {
	c.idle.mu.Lock()
	defer c.idle.mu.Unlock()
	c.idle.deadline = t
	return c.Conn.SetDeadline(t)
}

// connSet is a set of open connections that can all be closed at once; once
// closed it takes no more. Safe for concurrent use.
type connSet struct {
	mu     sync.Mutex
	closed bool
	conns  map[*trackedConn]struct{}
}

func newConnSet() *connSet { return &connSet{conns: make(map[*trackedConn]struct{})} }

// add adds c unless the set is closed, and reports whether it did.
func (s *connSet) add(c *trackedConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *connSet) remove(c *trackedConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// closeAll closes the set and every connection in it.
func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	cs := make([]*trackedConn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// trackedConn is a connection that leaves its connSets when closed.
// One the mux accepted also enforces the idle timeout (peerconn.go).
type trackedConn struct {
	net.Conn
	mu      sync.Mutex
	closed  bool
	sets    []*connSet
	onClose func() // set before the conn is shared; run by the first Close

	idle   idleReader // accepted connections, once handed to a channel
	closeN sync.Once
}

// join adds c to s, and reports false when s or c is closed.
func (c *trackedConn) join(s *connSet) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !s.add(c) {
		return false
	}
	c.sets = append(c.sets, s)
	return true
}

// Close closes the connection and removes it from its sets.
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	sets := c.sets
	c.sets, c.closed = nil, true
	c.mu.Unlock()
	for _, s := range sets {
		s.remove(c)
	}
	if c.onClose != nil {
		c.closeN.Do(c.onClose)
	}
	return err
}
