package raftmux

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Defaults of Options.
const (
	// DefaultTimeout is the I/O and per-RPC timeout: a raft.NetworkTransport's
	// as Quorate configures it.
	DefaultTimeout = 10 * time.Second

	// DefaultMaxFrame bounds a frame's payload. Raft sends up to
	// MaxAppendEntries entries (512 in Quorate) in one AppendEntries, and an
	// entry can be as large as the largest peer request (64 MiB by default);
	// 128 MiB holds a default-sized largest entry twice over, and a larger
	// batch is split across requests (encodeAppend) rather than refused.
	DefaultMaxFrame = 128 << 20

	// DefaultLinger is Options.Linger's default, for raft's heartbeat
	// interval of 100–200 ms (HeartbeatTimeout/10 with Quorate's 1 s): a
	// heartbeat's round trip grows by up to twice the linger, far within
	// the heartbeat and lease timeouts. With shorter timeouts, set Linger
	// to about HeartbeatTimeout/100.
	DefaultLinger = 10 * time.Millisecond

	// DefaultMaxInFlight is how many AppendEntries a pipeline has
	// outstanding at most: raft.NetworkTransport's default. More in flight
	// lets raft send smaller batches more often; with 64, Apply across 16
	// groups cost 40–60% more CPU per entry on a 2-vCPU machine.
	DefaultMaxInFlight = 2

	// laneQueue is how many requests one group's lane on one connection
	// holds before it answers further ones with an overload error.
	laneQueue = 256

	// maxSnapshotConns bounds the inbound snapshot connections served at once.
	maxSnapshotConns = 16

	// writeBuffer is each connection's write buffer: the frames the writer
	// drains from its queue go out in as few writes as fit.
	writeBuffer = 64 << 10
	// readBuffer is each connection's read buffer.
	readBuffer = 16 << 10
)

// Dial opens a connection to the node at address.
type Dial func(ctx context.Context, address raft.ServerAddress) (net.Conn, error)

// Options configure a Hub.
type Options struct {
	// Dial opens the shared connection to a peer node; DialSnapshot opens
	// one connection per InstallSnapshot. Both required.
	Dial, DialSnapshot Dial
	// Listener accepts peers' shared connections; SnapshotListener their
	// snapshot connections. Both required; the Hub closes them on Close.
	Listener, SnapshotListener net.Listener
	// Logger gets the hub's errors; nil discards them.
	Logger hclog.Logger
	// Timeout bounds each RPC (within 1.25×), each dial and each write
	// (DefaultTimeout when zero). An InstallSnapshot gets Timeout per
	// TimeoutScale bytes.
	Timeout time.Duration
	// FrameTimeout bounds how long a frame may take to arrive once its
	// first byte has, on every shared connection (Timeout when zero or
	// longer). A shared connection may be quiet between frames for as long
	// as it likes; a peer that starts a frame and stops is cut off. A node
	// sets it to its peer port's idle timeout.
	FrameTimeout time.Duration
	// TimeoutScale: see Timeout (raft.DefaultTimeoutScale when zero).
	TimeoutScale int64
	// MaxFrame bounds a frame's payload (DefaultMaxFrame when zero).
	MaxFrame int
	// MaxInFlight bounds a pipeline's outstanding AppendEntries
	// (DefaultMaxInFlight when zero; at least 2).
	MaxInFlight int
	// Linger is how long a heartbeat, or a heartbeat's response, may wait
	// in a connection's queue for other frames to share its write
	// (DefaultLinger when zero, none when negative). Raft's heartbeats to a
	// peer are spread over time; lingering lets a node's many groups'
	// heartbeats leave in few writes. Other frames never wait.
	Linger time.Duration
	// RedialBackoff is the first wait after a failed dial before the next
	// one; it doubles up to MaxRedialBackoff (50 ms and 2 s when zero).
	RedialBackoff, MaxRedialBackoff time.Duration
}

// Hub is one node's Raft transport: the groups' transports it hands out
// share one outbound connection per peer node.
type Hub struct {
	opts   Options
	log    hclog.Logger
	codecs codecs

	mu      sync.Mutex
	groups  map[uint32]*Transport
	peers   map[raft.ServerAddress]*peer
	inbound map[*conn]struct{}
	closed  bool

	done     chan struct{}
	wg       sync.WaitGroup
	snapSem  chan struct{}
	counters counters
}

// Stats are a hub's counters since New.
type Stats struct {
	Dials          uint64 // shared connections dialed
	Accepted       uint64 // shared connections accepted
	FramesSent     uint64
	Writes         uint64 // flushes of the write buffer: FramesSent/Writes is the batching
	FramesReceived uint64
	Direct         uint64 // inbound requests the reader handed to raft itself (no lane goroutine in between)
	Pipelines      uint64 // AppendEntries pipelines opened
	PipelineSends  uint64 // AppendEntries sent through a pipeline
	SnapshotsSent  uint64
	SnapshotsRecv  uint64
	Refused        uint64 // inbound frames or connections refused
}

type counters struct {
	dials, accepted, framesSent, writes, framesRecv atomic.Uint64
	pipelines, pipelineSends, snapsSent, snapsRecv  atomic.Uint64
	refused, direct                                 atomic.Uint64
}

// New returns a Hub serving opts.Listener and opts.SnapshotListener.
func New(opts Options) (*Hub, error) {
	if opts.Dial == nil || opts.DialSnapshot == nil || opts.Listener == nil || opts.SnapshotListener == nil {
		return nil, errors.New("raftmux: Options need Dial, DialSnapshot, Listener and SnapshotListener")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.FrameTimeout <= 0 || opts.FrameTimeout > opts.Timeout {
		opts.FrameTimeout = opts.Timeout
	}
	if opts.TimeoutScale <= 0 {
		opts.TimeoutScale = raft.DefaultTimeoutScale
	}
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	opts.MaxInFlight = max(opts.MaxInFlight, 2)
	if opts.Linger == 0 {
		opts.Linger = DefaultLinger
	}
	if opts.RedialBackoff <= 0 {
		opts.RedialBackoff = 50 * time.Millisecond
	}
	if opts.MaxRedialBackoff <= 0 {
		opts.MaxRedialBackoff = 2 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	h := &Hub{
		opts:    opts,
		log:     log.Named("raftmux"),
		codecs:  newCodecs(),
		groups:  make(map[uint32]*Transport),
		peers:   make(map[raft.ServerAddress]*peer),
		inbound: make(map[*conn]struct{}),
		done:    make(chan struct{}),
		snapSem: make(chan struct{}, maxSnapshotConns),
	}
	h.wg.Add(2)
	go h.acceptLoop(opts.Listener, h.serveShared)
	go h.acceptLoop(opts.SnapshotListener, h.serveSnapshot)
	return h, nil
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	c := &h.counters
	return Stats{
		Dials: c.dials.Load(), Accepted: c.accepted.Load(),
		FramesSent: c.framesSent.Load(), Writes: c.writes.Load(), FramesReceived: c.framesRecv.Load(),
		Pipelines: c.pipelines.Load(), PipelineSends: c.pipelineSends.Load(),
		SnapshotsSent: c.snapsSent.Load(), SnapshotsRecv: c.snapsRecv.Load(),
		Refused: c.refused.Load(), Direct: c.direct.Load(),
	}
}

// Transport registers group and returns its raft.Transport, whose local
// address is local (the node's address, the same for all its groups). A
// group has one transport at a time: closing it unregisters the group.
func (h *Hub) Transport(group uint32, local raft.ServerAddress) (*Transport, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, raft.ErrTransportShutdown
	}
	if _, ok := h.groups[group]; ok {
		return nil, fmt.Errorf("raftmux: group %d already has a transport", group)
	}
	t := newTransport(h, group, local)
	h.groups[group] = t
	return t, nil
}

// lookup returns group's transport, nil when none is registered.
func (h *Hub) lookup(group uint32) *Transport {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.groups[group]
}

// unregister removes t if it is still its group's transport.
func (h *Hub) unregister(t *Transport) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.groups[t.group] == t {
		delete(h.groups, t.group)
	}
}

// Close closes the listeners and every connection. Shut the groups' Raft
// instances down first: their transports fail every RPC afterwards.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.done)
	var conns []*conn
	for c := range h.inbound {
		conns = append(conns, c)
	}
	peers := make([]*peer, 0, len(h.peers))
	for _, p := range h.peers {
		peers = append(peers, p)
	}
	h.mu.Unlock()
	// Not under h.mu: connTo takes p.mu then h.mu. A dial finishing after
	// this sees h.closed and closes its connection.
	for _, p := range peers {
		p.mu.Lock()
		if p.c != nil {
			conns = append(conns, p.c)
		}
		p.mu.Unlock()
	}
	err := errors.Join(h.opts.Listener.Close(), h.opts.SnapshotListener.Close())
	for _, c := range conns {
		c.fail(raft.ErrTransportShutdown)
	}
	h.wg.Wait()
	return err
}

// acceptLoop hands l's connections to serve until l is closed.
func (h *Hub) acceptLoop(l net.Listener, serve func(net.Conn)) {
	defer h.wg.Done()
	for {
		nc, err := l.Accept()
		if err != nil {
			select {
			case <-h.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			h.log.Warn("accept failed", "error", err)
			select { // a transient error (out of descriptors): retry shortly
			case <-h.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			serve(nc)
		}()
	}
}

// serveShared serves an accepted shared connection until it breaks.
func (h *Hub) serveShared(nc net.Conn) {
	c := newConn(h, nc, nil)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		_ = nc.Close()
		return
	}
	h.inbound[c] = struct{}{}
	h.mu.Unlock()
	h.counters.accepted.Add(1)
	c.run()
	h.mu.Lock()
	delete(h.inbound, c)
	h.mu.Unlock()
}

// peer is the outbound side towards one node.
type peer struct {
	addr    raft.ServerAddress
	mu      sync.Mutex // held while dialing: one dial per peer at a time
	c       *conn
	retryAt time.Time
	backoff time.Duration
	first   time.Duration // Options.RedialBackoff
	limit   time.Duration // Options.MaxRedialBackoff
}

// connTo returns the live shared connection to target, dialing one when
// there is none and the redial backoff allows it.
func (h *Hub) connTo(target raft.ServerAddress) (*conn, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, raft.ErrTransportShutdown
	}
	p := h.peers[target]
	if p == nil {
		p = &peer{addr: target, first: h.opts.RedialBackoff, limit: h.opts.MaxRedialBackoff}
		h.peers[target] = p
	}
	h.mu.Unlock()

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c != nil {
		if !p.c.isClosed() {
			return p.c, nil
		}
		// It broke: redial at once, unless it broke soon after its dial
		// (a peer that accepts and drops us is not dialed in a loop).
		if time.Since(p.c.born) < p.limit {
			p.failed()
		} else {
			p.backoff = 0
		}
		p.c = nil
	}
	if now := time.Now(); now.Before(p.retryAt) {
		return nil, fmt.Errorf("raftmux: %s unreachable, next dial in %v", target, p.retryAt.Sub(now).Round(time.Millisecond))
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
	nc, err := h.opts.Dial(ctx, target)
	cancel()
	if err != nil {
		p.failed()
		return nil, fmt.Errorf("raftmux: dial %s: %w", target, err)
	}
	h.counters.dials.Add(1)
	c := newConn(h, nc, p)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		_ = nc.Close()
		return nil, raft.ErrTransportShutdown
	}
	p.c = c
	h.mu.Unlock()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		c.run()
	}()
	return c, nil
}

// failed records a failed dial, or a connection that broke soon after its
// dial, and sets when the next dial may happen. Called with p.mu held.
func (p *peer) failed() {
	p.backoff = min(max(p.backoff*2, p.first), p.limit)
	p.retryAt = time.Now().Add(p.backoff)
}
