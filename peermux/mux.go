package peermux

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Stats counts what a mux did with its connections since New.
type Stats struct {
	Accepted     int64 // connections accepted
	Refused      int64 // closed at once: a limit was reached
	Silent       int64 // closed: nothing after the header in time
	IdleClosed   int64 // closed: idle for the idle timeout
	OtherCluster int64 // refused: another cluster's, or no, cluster ID
	Dials        int64 // connections opened by Dial (ChannelRaft*'s not counted)
	TLSRefused   int64 // closed: the TLS handshake failed (before any header byte was read)
	AuthRefused  int64 // closed: no proof of the peer secret, or a wrong, truncated or late one (auth.go)
}

// Stats returns the mux's counts so far.
func (m *Mux) Stats() Stats {
	return Stats{
		Accepted:     m.stats.accepted.Load(),
		Refused:      m.stats.refused.Load(),
		Silent:       m.stats.silent.Load(),
		IdleClosed:   m.stats.idleClosed.Load(),
		OtherCluster: m.stats.otherCluster.Load(),
		Dials:        m.stats.dials.Load(),
		TLSRefused:   m.stats.tlsRefused.Load(),
		AuthRefused:  m.stats.authRefused.Load(),
	}
}

// muxStats counts what the mux did with its connections.
type muxStats struct {
	accepted   atomic.Int64 // connections accepted
	refused    atomic.Int64 // closed at once: a limit was reached
	silent     atomic.Int64 // closed: nothing after the header in time
	idleClosed atomic.Int64 // closed: idle for the idle timeout

	otherCluster atomic.Int64 // refused: another cluster's, or no, cluster ID
	dials        atomic.Int64 // connections opened by Dial
	tlsRefused   atomic.Int64 // closed: the TLS handshake failed
	authRefused  atomic.Int64 // closed: the peer secret not proven
}

// Mux multiplexes one peer listener into channels (see the header
// format in header.go) and dials peers' muxes. Create it with New, run Serve
// in its own goroutine, register channels with Listener, and Close it when
// the node stops.
//
// The mux owns every connection it accepts or dials: closing a channel's
// listener closes the connections accepted for it; Close closes all of
// them, the listener, and waits for the mux's goroutines. All methods are safe for concurrent use.
type Mux struct {
	ln            net.Listener
	dialer        *Dialer
	addr          net.Addr // advertised, or ln's
	log           *slog.Logger
	headerTimeout time.Duration // for the header and the first byte after it
	idleTimeout   time.Duration // 0: none
	// fwdIdleTimeout replaces idleTimeout on the forwarding channel, where
	// a request's answer may take up to the request timeout while the
	// caller sends nothing.
	fwdIdleTimeout time.Duration
	limits         muxLimits
	stats          muxStats
	serverTLS      *tls.Config // nil: plaintext
	clientTLS      *tls.Config // nil: plaintext
	secret         []byte      // nil: no peer authentication but TLS's (auth.go)

	mu        sync.Mutex
	closed    bool
	listeners map[uint64]*muxListener
	conns     *connSet       // every open connection of the mux
	open      int            // accepted connections not yet closed
	shaking   map[string]int // accepted connections in their handshake, by remote IP
	refusedAt time.Time      // when a refusal at a limit was last logged
	tlsLogAt  time.Time      // when a failed TLS handshake was last logged as a warning
	authLogAt time.Time      // when a failed peer authentication was last logged as a warning
	cluster   clusterGate    // which dialers' cluster IDs to admit (cluster.go)
	wg        sync.WaitGroup
	done      chan struct{} // closed by Close
}

// Options are a Mux's timeouts. A zero duration takes the default.
type Options struct {
	// HandshakeTimeout bounds how long an accepted connection may take to
	// send its header and the first byte after it (default 5s).
	HandshakeTimeout time.Duration
	// IdleTimeout closes an accepted connection that has sent nothing for
	// this long (default 2m). Raft connections this mux dials replace
	// themselves after half of it without writes, so every node of a
	// cluster needs the same IdleTimeout.
	IdleTimeout time.Duration
	// ForwardIdleTimeout replaces IdleTimeout on the forwarding channel
	// when longer: there a request's answer may take up to the request
	// timeout while the caller sends nothing.
	ForwardIdleTimeout time.Duration
	// ServerTLS, when set, makes the peer port TLS: every accepted
	// connection completes a TLS handshake with it, within the handshake
	// timeout, before the mux reads a byte of its header; a connection
	// whose handshake fails (its certificate not verified, or naming a
	// peer the config refuses) is closed there. ClientTLS is then the
	// config Dial opens its connections with (the
	// header is written once its handshake is done). Set both or neither:
	// every node of a cluster speaks TLS on its peer port, or none does.
	ServerTLS *tls.Config
	ClientTLS *tls.Config
	// Secret, when set, is the cluster's peer secret (at least
	// MinSecretLen bytes, the same on every node): every connection the
	// mux accepts or dials proves, both ways, that its other end holds it
	// before the channel's bytes, and a dialer without it is refused
	// (auth.go). It is never sent. Nil: the cluster ID and TLS, if any,
	// are the port's only gates.
	Secret []byte
}

// New returns a mux over ln whose connections to peers d opens (from the
// listen IP, following the dial map; see Dialer). Its listeners' Addr is
// advertise when not nil, else ln's address. log may be nil.
func New(ln net.Listener, d *Dialer, advertise net.Addr, log *slog.Logger, o Options) *Mux {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	addr := advertise
	if addr == nil {
		addr = ln.Addr()
	}
	m := &Mux{
		ln:             ln,
		dialer:         d,
		addr:           addr,
		log:            log,
		headerTimeout:  o.HandshakeTimeout,
		idleTimeout:    o.IdleTimeout,
		fwdIdleTimeout: o.ForwardIdleTimeout,
		serverTLS:      o.ServerTLS,
		clientTLS:      o.ClientTLS,
		secret:         o.Secret,
		limits:         muxLimits{conns: muxMaxConns, handshakesPerIP: muxMaxHandshakesPerIP},
		shaking:        make(map[string]int),
		listeners:      make(map[uint64]*muxListener),
		conns:          newConnSet(),
		done:           make(chan struct{}),
	}
	if m.headerTimeout <= 0 {
		m.headerTimeout = muxHeaderTimeout
	}
	if m.idleTimeout <= 0 {
		m.idleTimeout = muxIdleTimeout
	}
	return m
}

// IdleTimeout is the idle timeout of the connections the mux accepts
// (Options.IdleTimeout). A shared Raft connection (ChannelRaft) is exempt
// from it; its reader bounds each frame by it instead (package raftmux).
func (m *Mux) IdleTimeout() time.Duration { return m.idleTimeout }

// Addr is the address peers dial to reach this mux.
func (m *Mux) Addr() net.Addr { return m.addr }

// Serve accepts connections until the mux is closed, reading each one's
// header in its own goroutine and handing it to its channel's listener.
// Temporary accept errors (such as running out of file descriptors) are
// retried with a backoff. Serve returns when the mux is closed, at once if it
// already is; call it once.
func (m *Mux) Serve() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.wg.Add(1)
	m.mu.Unlock()
	defer m.wg.Done()

	var delay time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				m.log.Warn("peer listener closed under the mux", "err", err)
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			m.log.Warn("accepting a peer connection", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
				continue
			case <-m.done:
				return
			}
		}
		delay = 0
		m.stats.accepted.Add(1)
		ip, ok := m.admit(c)
		if !ok {
			c.Close()
			continue
		}
		if m.serverTLS != nil {
			c = tls.Server(c, m.serverTLS) // handshaken by handshake, before the header
		}
		tc, ok := m.track(c, m.release)
		if !ok {
			m.handshakeDone(ip)
			return // closed meanwhile; track closed c (and released it)
		}
		go func() {
			defer m.wg.Done()
			defer m.handshakeDone(ip)
			m.handshake(tc)
		}()
	}
}

// track registers c with the mux. When it returns ok, the caller must call
// m.wg.Done once it no longer needs the mux open (track did the Add). When
// the mux is closed it closes c and returns false. onClose, when not nil, runs once c is closed.
func (m *Mux) track(c net.Conn, onClose func()) (*trackedConn, bool) {
	tc := &trackedConn{Conn: c, onClose: onClose}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		tc.Close()
		return nil, false
	}
	m.wg.Add(1)
	tc.join(m.conns) // cannot fail: m.conns closes only after m.closed is set
	m.mu.Unlock()
	return tc, true
}

// handshake reads c's header and waits for the first byte of the channel's
// traffic, both within the handshake timeout, then hands c to its channel's
// listener, or closes it. Until then c holds no channel's resources (a Raft
// transport allocates large buffers for each connection it accepts).
func (m *Mux) handshake(c *trackedConn) {
	deadline := time.Now().Add(m.headerTimeout)
	if tc, ok := c.Conn.(*tls.Conn); ok {
		// TLS first: no byte of the header is read from a peer whose
		// certificate does not verify.
		if err := tc.SetDeadline(deadline); err != nil {
			c.Close()
			return
		}
		if err := tc.Handshake(); err != nil {
			m.stats.tlsRefused.Add(1)
			m.logTLSRefusal(c.RemoteAddr(), err)
			c.Close()
			return
		}
		if err := tc.SetWriteDeadline(time.Time{}); err != nil {
			c.Close()
			return
		}
	}
	if err := c.Conn.SetReadDeadline(deadline); err != nil {
		c.Close()
		return
	}
	var h peerHeader
	if err := readHeader(c.Conn, &h); err != nil {
		m.log.Debug("rejected a peer connection", "remote", c.RemoteAddr(), "err", err)
		c.Close()
		return
	}
	ch := h.ch
	if !m.authModeAdmits(c, &h) || !m.clusterAdmits(c, ch, h.cluster) {
		c.Close()
		return
	}
	if m.secret != nil {
		if err := m.authenticateDialer(c.Conn, &h, deadline); err != nil {
			m.refuseAuth(c, ch, err)
			c.Close()
			return
		}
	}
	m.mu.Lock()
	l := m.listeners[ch]
	m.mu.Unlock()
	if l == nil {
		m.log.Debug("rejected a peer connection for an unknown channel", "remote", c.RemoteAddr(), "channel", ch)
		c.Close()
		return
	}
	first := make([]byte, 1)
	if _, err := io.ReadFull(c.Conn, first); err != nil {
		m.stats.silent.Add(1)
		m.log.Debug("closed a peer connection that sent nothing after its header", "remote", c.RemoteAddr(), "channel", ch, "err", err)
		c.Close()
		return
	}
	if err := c.Conn.SetReadDeadline(time.Time{}); err != nil {
		c.Close()
		return
	}
	idle := m.idleTimeout
	switch {
	case ch == ChannelForward && idle > 0:
		idle = max(idle, m.fwdIdleTimeout)
	case ch == ChannelRaft:
		// A node's shared Raft connection to this one goes quiet while the
		// node leads no group here; it stays. Its dialer closes it when this
		// node stops answering (package raftmux); a vanished dialer is found
		// by TCP keep-alive, which accepted connections have by default.
		idle = 0
	}
	c.accepted(first, idle, &m.stats.idleClosed)
	if !c.join(l.conns) {
		c.Close() // the listener closed meanwhile
		return
	}
	select {
	case l.queue <- c:
	case <-l.done:
		c.Close()
	}
}

// logTLSRefusal logs a failed TLS handshake: as a warning at most once a
// minute (a peer of another CA retries all the time), else at debug level.
func (m *Mux) logTLSRefusal(remote net.Addr, err error) {
	if m.warnAtMostOnceAMinute(&m.tlsLogAt) {
		m.log.Warn("refused a peer connection at the TLS handshake (further ones logged at debug level for a minute)",
			"remote", remote, "err", err, "refused_so_far", m.stats.tlsRefused.Load())
		return
	}
	m.log.Debug("refused a peer connection at the TLS handshake", "remote", remote, "err", err)
}

// Listener returns the listener of channel ch: its Accept returns the
// connections whose header names ch, with the header already read. Closing
// it unregisters ch (which may then be registered again) and closes the
// connections it accepted. A channel has one listener at a time:
// registering a channel that has one returns an error, as does a closed mux.
func (m *Mux) Listener(ch uint64) (net.Listener, error) {
	l, err := m.listen(ch)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (m *Mux) listen(ch uint64) (*muxListener, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errMuxClosed
	}
	if _, ok := m.listeners[ch]; ok {
		return nil, fmt.Errorf("%w: channel %d", errMuxInUse, ch)
	}
	l := &muxListener{
		m:     m,
		ch:    ch,
		queue: make(chan net.Conn, muxAcceptQueue),
		done:  make(chan struct{}),
		conns: newConnSet(),
	}
	m.listeners[ch] = l
	return l, nil
}

// Dial connects to the peer mux at addr (host:port) through the mux's
// Dialer — from the listen IP, following the dial map — and
// writes the header for channel ch. ctx bounds the dial and the header
// write. The connection is the caller's to close; Close closes it too.
func (m *Mux) Dial(ctx context.Context, addr string, ch uint64) (net.Conn, error) {
	c, err := m.dial(ctx, addr, ch)
	if err == nil && ch != ChannelRaft && ch != ChannelRaftSnapshot {
		m.stats.dials.Add(1)
	}
	return c, err
}

func (m *Mux) dial(ctx context.Context, addr string, ch uint64) (net.Conn, error) {
	select {
	case <-m.done:
		return nil, errMuxClosed
	default:
	}
	c, err := m.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if m.clientTLS != nil {
		c = tls.Client(c, m.clientTLS)
	}
	tc, ok := m.track(c, nil)
	if !ok {
		return nil, errMuxClosed
	}
	defer m.wg.Done() // the conn stays tracked; the mux need not wait for it
	if t, ok := c.(*tls.Conn); ok {
		if err := t.HandshakeContext(ctx); err != nil {
			tc.Close()
			return nil, fmt.Errorf("peermux: peer %s: TLS handshake: %w", addr, err)
		}
	}
	deadline, _ := ctx.Deadline()
	var h peerHeader
	hdr := AppendHeader(make([]byte, 0, muxMaxHeaderLen), ch, m.ClusterID())
	if m.secret != nil {
		h = authHeader(ch, m.ClusterID())
		hdr = h.appendAuth(hdr[:0])
		// The peer's answer is read by the handshake timeout at the latest.
		if d := time.Now().Add(m.headerTimeout); deadline.IsZero() || d.Before(deadline) {
			deadline = d
		}
	}
	if err := tc.SetWriteDeadline(deadline); err != nil {
		tc.Close()
		return nil, err
	}
	if _, err := tc.Write(hdr); err != nil {
		tc.Close()
		return nil, fmt.Errorf("peermux: peer %s: writing the mux header: %w", addr, err)
	}
	if m.secret != nil {
		if err := m.authenticateListener(tc, &h, deadline); err != nil {
			tc.Close()
			return nil, fmt.Errorf("peermux: peer %s: %w", addr, err)
		}
	}
	if err := tc.SetWriteDeadline(time.Time{}); err != nil {
		tc.Close()
		return nil, err
	}
	return tc, nil
}

// Close stops the mux: it closes the peer listener, every channel listener
// and every connection the mux accepted or dialed, and waits for Serve and
// the header readers to return. Shut the Raft groups down first: a
// transport whose stream layer the mux closed under it logs accept errors
// until it is closed too. Safe to call more than once.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return nil
	}
	m.closed = true
	close(m.done)
	ls := make([]*muxListener, 0, len(m.listeners))
	for _, l := range m.listeners {
		ls = append(ls, l)
	}
	m.mu.Unlock()

	err := m.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	for _, l := range ls {
		l.Close()
	}
	m.conns.closeAll()
	m.wg.Wait()
	return err
}

// muxListener is one channel's net.Listener.
type muxListener struct {
	m     *Mux
	ch    uint64
	queue chan net.Conn
	done  chan struct{}
	once  sync.Once
	conns *connSet // accepted for this channel and still open
}

// Accept waits for the next connection on the channel. After Close it
// returns an error wrapping net.ErrClosed.
func (l *muxListener) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, fmt.Errorf("peermux: peer mux channel %d: %w", l.ch, net.ErrClosed)
	default:
	}
	select {
	case c := <-l.queue:
		return c, nil
	case <-l.done:
		return nil, fmt.Errorf("peermux: peer mux channel %d: %w", l.ch, net.ErrClosed)
	}
}

// Close unregisters the channel and closes the connections accepted for
// it, including those waiting for Accept. Safe to call more than once.
func (l *muxListener) Close() error {
	l.once.Do(func() {
		l.m.mu.Lock()
		if l.m.listeners[l.ch] == l {
			delete(l.m.listeners, l.ch)
		}
		l.m.mu.Unlock()
		close(l.done)
		l.conns.closeAll()
	})
	return nil
}

// Addr is the mux's advertised address.
func (l *muxListener) Addr() net.Addr { return l.m.addr }
