package node

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// The peer multiplexer lets every service between nodes — one Raft
// transport per hosted group, and the forwarding channel (requests
// forwarded to a group's leader, and PeerService) — share one listener and
// one address. Each TCP connection carries one channel,
// named once, by a header the dialer writes first:
//
//	+-------+--------------------------+------------+---------------------+
//	| magic | channel ID               | cluster ID | the channel's own   |
//	| 0xA8  | unsigned varint, 1..10 B | 16 bytes   | bytes (for a Raft   |
//	|       | (encoding/binary)        |            | group: the Raft     |
//	|       |                          |            | transport's RPCs)   |
//	+-------+--------------------------+------------+---------------------+
//
// A dialer that knows no cluster ID yet (a cluster that predates them)
// sends magic 0xA7 and no cluster ID. A listener that knows its cluster's
// ID refuses a header with another ID or none (clusterid.go). The header
// and the first byte after it must arrive within the handshake timeout;
// only then is the connection handed to its channel (peerconn.go).
//
// The magic byte doubles as the header's version: a different layout gets a
// different byte. It is far from Raft's own first bytes (RPC types 0–5), from
// TLS (0x16) and from ASCII, so a pre-mux Raft peer, an HTTP client or a port
// scanner is turned away at the first byte, and a mux header sent to a
// pre-mux Raft listener fails there as an unknown RPC type. The server sends
// no reply: a connection it rejects (bad magic, a varint longer than 10 bytes
// or over 64 bits, an unknown channel, another cluster, no full header and
// first byte within the handshake timeout) is closed, which the dialer sees
// as a failed RPC — Raft retries, so a group whose replica starts here a moment after its peers
// does not need the dials to wait for it.
//
// Channel IDs: a Raft group's channel is its GroupID (a uint32; 0 is the
// meta group). IDs from 1<<32 up are the node's own services, never groups.
const (
	muxMagic byte = 0xA7

	// muxMagicCluster opens the header of a dialer that knows its cluster
	// ID: the magic, the channel ID, then the 16 bytes of the cluster ID
	// (clusterid.go). A dialer that knows none sends muxMagic's header.
	muxMagicCluster byte = 0xA8
	clusterIDLen         = 16

	// muxChannelForward is the forwarding channel: an HTTP/2 Connect
	// server for requests forwarded to a group's leader and for
	// PeerService (slot-migration exports and entries).
	muxChannelForward uint64 = 1 << 32

	// muxHeaderTimeout is how long an accepted connection may take to send
	// its header and the first byte after it (Config.PeerHandshakeTimeout).
	muxHeaderTimeout = 5 * time.Second

	// muxIdleTimeout closes an accepted connection that has sent nothing
	// for this long (Config.PeerIdleTimeout).
	muxIdleTimeout = 2 * time.Minute

	// muxMaxConns caps the connections the peer port holds open at once: a
	// node hosting the most groups (MaxDataGroups, a few connections per
	// group and peer) stays well under it.
	muxMaxConns = 16384

	// muxMaxHandshakesPerIP caps the connections from one IP that have not
	// finished their handshake: a peer's connections finish it in a round
	// trip, so only a flood reaches it.
	muxMaxHandshakesPerIP = 1024

	// muxMaxHeaderLen is the longest header: the magic byte, a 64-bit
	// uvarint and a cluster ID.
	muxMaxHeaderLen = 1 + binary.MaxVarintLen64 + clusterIDLen

	// muxAcceptQueue is how many handshaken connections may wait for a
	// channel's Accept.
	muxAcceptQueue = 16
)

var (
	errMuxBadMagic  = errors.New("node: peer connection: not a Quorate peer header")
	errMuxChannelID = errors.New("node: peer connection: channel ID is not a 64-bit uvarint")
	errMuxClosed    = fmt.Errorf("node: peer mux closed: %w", net.ErrClosed)
	errMuxInUse     = errors.New("node: peer mux: channel already has a listener")
)

// muxStats counts what the mux did with its connections.
type muxStats struct {
	accepted   atomic.Int64 // connections accepted
	refused    atomic.Int64 // closed at once: a limit was reached
	silent     atomic.Int64 // closed: nothing after the header in time
	idleClosed atomic.Int64 // closed: idle for the idle timeout
	redials    atomic.Int64 // dialed connections replaced before a write

	otherCluster atomic.Int64 // refused: another cluster's, or no, cluster ID
}

// appendMuxHeader appends the header that opens a connection on channel ch.
func appendMuxHeader(b []byte, ch uint64) []byte {
	return binary.AppendUvarint(append(b, muxMagic), ch)
}

// appendMuxHeaderFor appends the header that opens a connection on channel
// ch from a node of cluster (a cluster ID, or "" when the node knows none).
func appendMuxHeaderFor(b []byte, ch uint64, cluster string) []byte {
	raw, err := hex.DecodeString(cluster)
	if err != nil || len(raw) != clusterIDLen {
		return appendMuxHeader(b, ch)
	}
	return append(binary.AppendUvarint(append(b, muxMagicCluster), ch), raw...)
}

// readMuxHeader reads a connection's header from r one byte at a time, so
// that nothing past it is consumed, and returns the channel ID.
func readMuxHeader(r io.Reader) (uint64, error) {
	ch, _, err := readPeerHeader(r)
	return ch, err
}

// readPeerHeader reads a connection's header like readMuxHeader and also
// returns the dialer's cluster ID ("" when its header carries none).
func readPeerHeader(r io.Reader) (uint64, string, error) {
	br := byteReader{r: r}
	magic, err := br.ReadByte()
	if err != nil {
		return 0, "", err
	}
	if magic != muxMagic && magic != muxMagicCluster {
		return 0, "", fmt.Errorf("%w (first byte %#02x)", errMuxBadMagic, magic)
	}
	ch, err := binary.ReadUvarint(&br)
	if err != nil {
		if br.err != nil { // EOF, a deadline, a reset: not the varint's fault
			return 0, "", err
		}
		return 0, "", fmt.Errorf("%w: %v", errMuxChannelID, err)
	}
	if magic == muxMagic {
		return ch, "", nil
	}
	raw := make([]byte, clusterIDLen)
	if _, err := io.ReadFull(r, raw); err != nil {
		return 0, "", err
	}
	return ch, hex.EncodeToString(raw), nil
}

// byteReader is an io.ByteReader without read-ahead.
type byteReader struct {
	r   io.Reader
	buf [1]byte
	err error // the underlying reader's error, if any
}

func (b *byteReader) ReadByte() (byte, error) {
	if _, err := io.ReadFull(b.r, b.buf[:]); err != nil {
		b.err = err
		return 0, err
	}
	return b.buf[0], nil
}

// peerMux multiplexes one peer listener into channels (see the header
// format above) and dials peers' muxes. Create it with newPeerMux, run Serve
// in its own goroutine, register channels with Listener or StreamLayer, and
// Close it when the node stops.
//
// The mux owns every connection it accepts or dials: closing a channel's
// listener closes the connections accepted for it; closing a StreamLayer
// also closes those it dialed; Close closes all of them, the listener, and
// waits for the mux's goroutines. All methods are safe for concurrent use.
type peerMux struct {
	ln            net.Listener
	dialer        *peerDialer
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

	mu        sync.Mutex
	closed    bool
	listeners map[uint64]*muxListener
	conns     *connSet       // every open connection of the mux
	open      int            // accepted connections not yet closed
	shaking   map[string]int // accepted connections in their handshake, by remote IP
	refusedAt time.Time      // when a refusal at a limit was last logged
	cluster   clusterGate    // which dialers' cluster IDs to admit (clusterid.go)
	wg        sync.WaitGroup
	done      chan struct{} // closed by Close
}

// newPeerMux returns a mux over ln whose connections to peers d opens
// (from the listen IP, following Config.DebugDialMap). Its listeners' Addr
// is advertise when not nil, else ln's address. log may be nil.
func newPeerMux(ln net.Listener, d *peerDialer, advertise net.Addr, log *slog.Logger) *peerMux {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	addr := advertise
	if addr == nil {
		addr = ln.Addr()
	}
	return &peerMux{
		ln:            ln,
		dialer:        d,
		addr:          addr,
		log:           log,
		headerTimeout: muxHeaderTimeout,
		idleTimeout:   muxIdleTimeout,
		limits:        muxLimits{conns: muxMaxConns, handshakesPerIP: muxMaxHandshakesPerIP},
		shaking:       make(map[string]int),
		listeners:     make(map[uint64]*muxListener),
		conns:         newConnSet(),
		done:          make(chan struct{}),
	}
}

// Addr is the address peers dial to reach this mux.
func (m *peerMux) Addr() net.Addr { return m.addr }

// Serve accepts connections until the mux is closed, reading each one's
// header in its own goroutine and handing it to its channel's listener.
// Temporary accept errors (such as running out of file descriptors) are
// retried with a backoff. Serve returns when the mux is closed, at once if it
// already is; call it once.
func (m *peerMux) Serve() {
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
		tc, ok := m.track(c, nil, m.release)
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

// track registers c with the mux and, when owner is not nil, with owner.
// When it returns ok, the caller must call m.wg.Done once it no longer
// needs the mux open (track did the Add). When the mux or owner is closed it
// closes c and returns false. onClose, when not nil, runs once c is closed.
func (m *peerMux) track(c net.Conn, owner *connSet, onClose func()) (*trackedConn, bool) {
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
	if owner != nil && !tc.join(owner) {
		tc.Close()
		m.wg.Done()
		return nil, false
	}
	return tc, true
}

// handshake reads c's header and waits for the first byte of the channel's
// traffic, both within the handshake timeout, then hands c to its channel's
// listener, or closes it. Until then c holds no channel's resources (a Raft
// transport allocates large buffers for each connection it accepts).
func (m *peerMux) handshake(c *trackedConn) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(m.headerTimeout)); err != nil {
		c.Close()
		return
	}
	ch, cluster, err := readPeerHeader(c.Conn)
	if err != nil {
		m.log.Debug("rejected a peer connection", "remote", c.RemoteAddr(), "err", err)
		c.Close()
		return
	}
	if !m.clusterAdmits(c, ch, cluster) {
		c.Close()
		return
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
	if ch == muxChannelForward && idle > 0 {
		idle = max(idle, m.fwdIdleTimeout)
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

// Listener returns the listener of channel ch: its Accept returns the
// connections whose header names ch, with the header already read. Closing
// it unregisters ch (which may then be registered again) and closes the
// connections it accepted. A channel has one listener at a time:
// registering a channel that has one returns an error, as does a closed mux.
func (m *peerMux) Listener(ch uint64) (net.Listener, error) {
	l, err := m.listen(ch)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (m *peerMux) listen(ch uint64) (*muxListener, error) {
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

// Dial connects to the peer mux at addr (host:port) through the node's
// peerDialer — from the listen IP, following Config.DebugDialMap — and
// writes the header for channel ch. ctx bounds the dial and the header
// write. The connection is the caller's to close; Close closes it too.
func (m *peerMux) Dial(ctx context.Context, addr string, ch uint64) (net.Conn, error) {
	return m.dial(ctx, addr, ch, nil)
}

func (m *peerMux) dial(ctx context.Context, addr string, ch uint64, owner *connSet) (net.Conn, error) {
	select {
	case <-m.done:
		return nil, errMuxClosed
	default:
	}
	c, err := m.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc, ok := m.track(c, owner, nil)
	if !ok {
		return nil, errMuxClosed
	}
	defer m.wg.Done() // the conn stays tracked; the mux need not wait for it
	deadline, _ := ctx.Deadline()
	hdr := appendMuxHeaderFor(make([]byte, 0, muxMaxHeaderLen), ch, m.clusterID())
	if err := tc.SetWriteDeadline(deadline); err != nil {
		tc.Close()
		return nil, err
	}
	if _, err := tc.Write(hdr); err != nil {
		tc.Close()
		return nil, fmt.Errorf("node: peer %s: writing the mux header: %w", addr, err)
	}
	if err := tc.SetWriteDeadline(time.Time{}); err != nil {
		tc.Close()
		return nil, err
	}
	return tc, nil
}

// StreamLayer returns a raft.StreamLayer for Raft group group over the mux:
// it accepts the group's connections and dials the group's channel on
// peers. Its Close, which raft.NetworkTransport calls on Close (and so
// raft.Raft on Shutdown), unregisters the group and closes every connection
// of the group on this node. It fails like Listener.
func (m *peerMux) StreamLayer(group uint32) (raft.StreamLayer, error) {
	l, err := m.listen(uint64(group))
	if err != nil {
		return nil, err
	}
	return &muxStreamLayer{muxListener: l, dialed: newConnSet()}, nil
}

// Close stops the mux: it closes the peer listener, every channel listener
// and every connection the mux accepted or dialed, and waits for Serve and
// the header readers to return. Shut the Raft groups down first: a
// transport whose stream layer the mux closed under it logs accept errors
// until it is closed too. Safe to call more than once.
func (m *peerMux) Close() error {
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

	err := ignoreClosed(m.ln.Close())
	for _, l := range ls {
		l.Close()
	}
	m.conns.closeAll()
	m.wg.Wait()
	return err
}

// muxListener is one channel's net.Listener.
type muxListener struct {
	m     *peerMux
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
		return nil, fmt.Errorf("node: peer mux channel %d: %w", l.ch, net.ErrClosed)
	default:
	}
	select {
	case c := <-l.queue:
		return c, nil
	case <-l.done:
		return nil, fmt.Errorf("node: peer mux channel %d: %w", l.ch, net.ErrClosed)
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
