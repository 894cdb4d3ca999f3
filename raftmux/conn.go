package raftmux

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

var errProtocol = errors.New("raftmux: protocol error")

// conn is a shared connection: dialed (peer set: it sends requests and
// reads responses) or accepted (peer nil: it reads requests and sends
// responses). One goroutine reads it; senders write it (write.go).
type conn struct {
	h    *Hub
	nc   net.Conn
	peer *peer
	born time.Time

	closed    chan struct{}
	closeOnce sync.Once
	err       error // why it closed, set before closed is

	// Writing (write.go).
	wmu       sync.Mutex
	queue     [][]byte      // frames waiting to be written
	queued    int           // their bytes
	writing   bool          // a goroutine is writing, and drains queue before it stops
	lingering bool          // linger is armed to write the queue
	drained   chan struct{} // made by a waiting sender, closed by the writer
	linger    *time.Timer
	bw        *bufio.Writer // the writing goroutine's
	spare     [][]byte      // the writing goroutine's

	// Dialed side.
	pmu     sync.Mutex
	pending map[uint64]*call
	nextID  uint64
	reads   atomic.Uint64 // responses read so far

	// Accepted side: one lane per group and lane kind, touched by the reader.
	lanes    map[laneKey]*lane
	inQueued atomic.Int64 // payload bytes waiting in lanes
}

func newConn(h *Hub, nc net.Conn, p *peer) *conn {
	c := &conn{
		h: h, nc: nc, peer: p, born: time.Now(),
		closed: make(chan struct{}),
	}
	c.bw = bufio.NewWriterSize(nc, writeBuffer)
	c.linger = time.AfterFunc(time.Hour, c.lingerDone)
	c.linger.Stop()
	if p != nil {
		c.pending = make(map[uint64]*call)
	} else {
		c.lanes = make(map[laneKey]*lane)
	}
	return c
}

func (c *conn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// closeErr is the error the connection closed with.
func (c *conn) closeErr() error {
	<-c.closed
	return c.err
}

// fail closes the connection and fails every pending call with err.
func (c *conn) fail(err error) {
	c.closeOnce.Do(func() {
		c.err = fmt.Errorf("raftmux: connection to %s closed: %w", c.nc.RemoteAddr(), err)
		close(c.closed)
		c.linger.Stop()
		_ = c.nc.Close()
		c.pmu.Lock()
		pend := c.pending
		c.pending = nil
		c.pmu.Unlock()
		for _, cl := range pend {
			cl.err = c.err
			close(cl.done)
		}
	})
}

// run reads the connection until it breaks.
func (c *conn) run() {
	if c.peer != nil {
		go c.sweep()
	}
	c.fail(c.readLoop())
}

// readLoop reads frames until the connection breaks or misbehaves.
func (c *conn) readLoop() error {
	br := bufio.NewReaderSize(c.nc, readBuffer)
	armed := false
	fr := frameReader{r: br, max: c.h.opts.MaxFrame}
	fr.started = func(n int) {
		// Between frames the connection may stay quiet for as long as it
		// likes (a node that leads no group here sends nothing), but a
		// frame that has begun must arrive whole within FrameTimeout: a
		// peer that sends part of one and stops is gone or hostile.
		if !armed && br.Buffered() < n {
			_ = c.nc.SetReadDeadline(time.Now().Add(c.h.opts.FrameTimeout))
			armed = true
		}
	}
	for {
		f, err := fr.next()
		if armed {
			_ = c.nc.SetReadDeadline(time.Time{})
			armed = false
		}
		if err != nil {
			if c.peer == nil && !errors.Is(err, net.ErrClosed) {
				c.h.counters.refused.Add(1)
			}
			return err
		}
		c.h.counters.framesRecv.Add(1)
		switch {
		case c.peer != nil && (f.kind == kindResponse || f.kind == kindError):
			c.reads.Add(1)
			c.complete(f)
		case c.peer == nil && f.kind.isRequest():
			c.dispatch(f)
		default:
			c.h.counters.refused.Add(1)
			return fmt.Errorf("%w: unexpected frame kind %#x", errProtocol, f.kind)
		}
	}
}

// call is an RPC sent on a dialed connection, waiting for its response.
type call struct {
	done    chan struct{} // closed once kind and payload, or err, are set
	kind    kind
	payload []byte
	err     error
	reads   uint64 // the connection's reads when it was sent
	age     uint8  // sweeps it has been pending for
}

// start sends the request frame b (its ID is set here) and returns its
// call.
func (c *conn) start(b []byte) (*call, uint64, error) {
	cl := &call{done: make(chan struct{}), reads: c.reads.Load()}
	c.pmu.Lock()
	if c.pending == nil {
		c.pmu.Unlock()
		return nil, 0, c.closeErr()
	}
	c.nextID++
	id := c.nextID
	setFrameID(b, id)
	c.pending[id] = cl
	c.pmu.Unlock()
	if err := c.enqueue(b, kind(b[8]) == kindHeartbeat); err != nil {
		c.abandon(id)
		return nil, 0, err
	}
	return cl, id, nil
}

// abandon forgets call id (timed out, or its pipeline closed): a response
// that arrives later is dropped.
func (c *conn) abandon(id uint64) {
	c.pmu.Lock()
	delete(c.pending, id)
	c.pmu.Unlock()
}

// callSweeps is how many sweeps, Timeout/4 apart, a call may stay
// pending: it times out between Timeout and 1.25×Timeout after it was sent.
const callSweeps = 5

var errCallTimeout = errors.New("raftmux: RPC timed out")

// sweep fails the calls pending for too long, every Timeout/4 until the
// connection closes: one ticker per connection rather than a timer per
// call. When nothing at all came back on the connection since such a call
// was sent, the peer is taken for gone and the connection is closed,
// failing every pending call and making the next one redial.
func (c *conn) sweep() {
	tick := time.NewTicker(c.h.opts.Timeout / 4)
	defer tick.Stop()
	var expired []*call
	for {
		select {
		case <-tick.C:
		case <-c.closed:
			return
		}
		expired = expired[:0]
		c.pmu.Lock()
		for id, cl := range c.pending {
			if cl.age++; cl.age >= callSweeps {
				delete(c.pending, id)
				expired = append(expired, cl)
			}
		}
		c.pmu.Unlock()
		dead := false
		for _, cl := range expired {
			dead = dead || c.reads.Load() == cl.reads
			cl.err = errCallTimeout
			close(cl.done)
		}
		if dead {
			c.fail(errors.New("no response within the timeout"))
		}
	}
}

// complete hands a response frame to its call.
func (c *conn) complete(f frame) {
	c.pmu.Lock()
	cl := c.pending[f.id]
	delete(c.pending, f.id)
	c.pmu.Unlock()
	if cl == nil {
		return // its caller gave up
	}
	cl.kind, cl.payload = f.kind, f.payload
	close(cl.done)
}
