package node

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/quorate/quorate/node/internal/engine"
)

// What the API port and the peer port's forwarding channel accept. Each
// listener has a bound on a request's message after decompression (checked
// by connect while it reads, and by the gzip reader while it inflates), on
// its body as sent (http.MaxBytesReader), on how many messages it holds once
// decoded (the codecs, codec.go) and on how long its body may take to arrive
// (bodyGuard).
const (
	// DefaultMaxRequestBytes is the default Config.MaxRequestBytes. The
	// largest legitimate requests (limits_test.go) are an AdmitBatch of
	// MaxAdmitBatch requests, each with 8 more checks and every field at
	// its longest: 5.6 MB in protobuf, 6.5 MB in JSON, 11 MB in JSON whose
	// non-ASCII keys are escaped (\uXXXX); and an ApplyPolicies of 10,000
	// policies: 4 MB in JSON, 10 MiB at 1 KiB each. Data and admin calls
	// share the port and callers are not authenticated, so one bound
	// serves both: a smaller one for data calls alone would not lower what
	// one request may cost.
	DefaultMaxRequestBytes = 16 << 20
	// DefaultMaxPeerRequestBytes is the default Config.MaxPeerRequestBytes.
	DefaultMaxPeerRequestBytes = 64 << 20
	// DefaultRequestBodyTimeout is the default Config.RequestBodyTimeout:
	// 16 MiB at about 4 Mbit/s.
	DefaultRequestBodyTimeout = 30 * time.Second

	// minRequestBytes and minPeerRequestBytes bound the settings from
	// below; the peer port must hold a slot-migration page (up to 4 MiB of
	// state) with its envelope. maxRequestBytes bounds both from above.
	minRequestBytes     = 64 << 10
	minPeerRequestBytes = 8 << 20
	maxRequestBytes     = 1 << 30
	// bytesPerMessage is how many bytes of the bound allow one decoded
	// message (see maxMessages).
	bytesPerMessage = 128
	// wireSlack is what a body as sent may hold beyond the message bound:
	// gRPC framing, gzip's headers and its growth of incompressible data.
	wireSlack = 64 << 10
)

// ErrRequestTooLarge is returned for a request larger than its listener
// accepts.
var ErrRequestTooLarge = errors.New("request too large")

// checkLimits validates the request bounds; bad formats the error.
func (c Config) checkLimits(bad func(flag, format string, args ...any) error) error {
	for _, b := range []struct {
		flag string
		v    int
		min  int
	}{
		{"max-request-bytes", c.MaxRequestBytes, minRequestBytes},
		{"max-peer-request-bytes", c.MaxPeerRequestBytes, minPeerRequestBytes},
	} {
		if b.v != 0 && (b.v < b.min || b.v > maxRequestBytes) {
			return bad(b.flag, "must be between %d and %d bytes, or 0 for the default (got %d)", b.min, maxRequestBytes, b.v)
		}
	}
	if c.peerLimits().maxBytes < c.apiLimits().maxBytes {
		return bad("max-peer-request-bytes", "must be ≥ --max-request-bytes (%d < %d): the peer port carries the requests other nodes forward",
			c.peerLimits().maxBytes, c.apiLimits().maxBytes)
	}
	if err := c.checkInflight(bad); err != nil {
		return err
	}
	if c.RequestBodyTimeout != 0 && c.RequestBodyTimeout < 10*time.Millisecond {
		return bad("request-body-timeout", "must be at least 10ms, or 0 for the default (got %v)", c.RequestBodyTimeout)
	}
	return nil
}

// listenerLimits are what one listener accepts.
type listenerLimits struct {
	maxBytes    int           // one message after decompression
	bodyTimeout time.Duration // from the end of the headers to the end of the body
	flag        string        // the flag of maxBytes, for errors
}

func (c Config) apiLimits() listenerLimits {
	return c.limits(c.MaxRequestBytes, DefaultMaxRequestBytes, "max-request-bytes")
}

func (c Config) peerLimits() listenerLimits {
	return c.limits(c.MaxPeerRequestBytes, DefaultMaxPeerRequestBytes, "max-peer-request-bytes")
}

func (c Config) limits(maxBytes, def int, flag string) listenerLimits {
	if maxBytes == 0 {
		maxBytes = def
	}
	timeout := c.RequestBodyTimeout
	if timeout == 0 {
		timeout = DefaultRequestBodyTimeout
	}
	return listenerLimits{maxBytes: maxBytes, bodyTimeout: timeout, flag: flag}
}

// maxMessages is how many messages a request within the bound may hold
// once decoded: a message costs about 100 to 300 bytes in memory however
// few bytes it takes on the wire (2 in protobuf, "{}," in JSON), so a bound
// on bytes alone lets 16 MiB decode to more than 1 GiB. The largest
// legitimate requests hold about 40,000 (10,000 policies with their
// durations).
func (l listenerLimits) maxMessages() int { return l.maxBytes / bytesPerMessage }

// handlerOptions are the Connect options that enforce l; connectErr is the
// node's table from errors to Connect codes.
func (l listenerLimits) handlerOptions(connectErr func(error) error) []connect.HandlerOption {
	tooLarge := func() error {
		return connectErr(fmt.Errorf("%w: the message is larger than %d bytes after decompression (the server's --%s)",
			ErrRequestTooLarge, l.maxBytes, l.flag))
	}
	budget := messageBudget{max: l.maxMessages(), flag: l.flag}
	return []connect.HandlerOption{
		connect.WithReadMaxBytes(l.maxBytes),
		// Replace connect's gzip with one that stops inflating at the
		// bound: connect's own would inflate the rest of a bomb to report
		// its size.
		connect.WithCompression("gzip", nil, nil),
		connect.WithCompression("gzip",
			func() connect.Decompressor { return &boundedGzip{max: int64(l.maxBytes), tooLarge: tooLarge} },
			func() connect.Compressor { return gzip.NewWriter(io.Discard) }),
		connect.WithCodec(&protoCodec{budget: budget}),
		connect.WithCodec(&strictJSONCodec{name: "json", budget: budget}),
		connect.WithCodec(&strictJSONCodec{name: "json; charset=utf-8", budget: budget}),
	}
}

// boundedGzip is a gzip reader that fails once it has inflated more than
// max bytes, without inflating the rest.
type boundedGzip struct {
	zr       gzip.Reader
	max      int64
	left     int64
	tooLarge func() error
}

func (d *boundedGzip) Read(p []byte) (int, error) {
	if d.left <= 0 {
		// At the bound: one more byte is too many.
		var one [1]byte
		for {
			n, err := d.zr.Read(one[:])
			if n > 0 {
				return 0, d.tooLarge()
			}
			if err != nil {
				return 0, err
			}
		}
	}
	if int64(len(p)) > d.left {
		p = p[:d.left]
	}
	n, err := d.zr.Read(p)
	d.left -= int64(n)
	return n, err
}

func (d *boundedGzip) Close() error { return d.zr.Close() }

func (d *boundedGzip) Reset(r io.Reader) error {
	d.left = d.max
	return d.zr.Reset(r)
}

// bodyGuard bounds the body of each request to one server: its size as sent
// and the time it takes to arrive. Once the server shuts down, it cuts the
// bodies still arriving, so a slow client cannot hold the shutdown.
//
// The time bound is a read deadline set through http.ResponseController:
// on HTTP/1.1 the connection's, on HTTP/2 the stream's. It is cleared as
// soon as the body has been read to its end, so a call that then runs long
// (an acquire parked for its max_wait) is not cut; http.Server.ReadTimeout
// would cut it on HTTP/1.1 (the connection's background read fails at the
// deadline and cancels the request).
//
// It also charges each body to the listener's in-flight budget (inflight.go)
// and tells the request's connection when the request has arrived whole and
// when its handler returned (limitListener).
type bodyGuard struct {
	n      *Node
	limits listenerLimits
	budget *inflightBudget

	mu      sync.Mutex
	closing bool
	reading map[*guardedBody]struct{}
}

func newBodyGuard(n *Node, l listenerLimits, inflight int64) *bodyGuard {
	return &bodyGuard{n: n, limits: l, budget: &inflightBudget{max: inflight}, reading: map[*guardedBody]struct{}{}}
}

// handler guards the bodies of the requests next serves.
func (g *bodyGuard) handler(next http.Handler) http.Handler {
	wire := int64(g.limits.maxBytes) + wireSlack
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn := connOf(r.Context())
		if r.Body == nil || r.Body == http.NoBody {
			if conn != nil {
				conn.requestReceived()
				defer conn.requestDone()
			}
			next.ServeHTTP(w, r)
			return
		}
		b := &guardedBody{g: g, body: http.MaxBytesReader(w, r.Body, wire), rc: http.NewResponseController(w),
			charge: newBodyCharge(g.budget, g.limits.maxBytes, r.Header), conn: conn}
		g.start(b)
		defer g.finish(b)
		defer b.done()
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

// start arms b's deadline; past already when the server is shutting down.
func (g *bodyGuard) start(b *guardedBody) {
	g.mu.Lock()
	defer g.mu.Unlock()
	deadline := time.Now().Add(g.limits.bodyTimeout)
	if g.closing {
		b.cut, deadline = true, time.Unix(1, 0)
	}
	g.reading[b] = struct{}{}
	_ = b.rc.SetReadDeadline(deadline)
}

// finish forgets b; when its body was read to the end, it also clears the
// deadline. A body left unread keeps it: the server may still read (and
// discard) the rest after the handler returns.
func (g *bodyGuard) finish(b *guardedBody) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.reading[b]; !ok {
		return
	}
	delete(g.reading, b)
	if b.ended {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

// shutdown cuts every body still arriving, and those of requests that
// start later. The server calls it when Shutdown begins.
func (g *bodyGuard) shutdown() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closing = true
	for b := range g.reading {
		b.cut = true
		_ = b.rc.SetReadDeadline(time.Unix(1, 0))
	}
}

// guardedBody is a request body under a bodyGuard.
type guardedBody struct {
	g      *bodyGuard
	body   io.ReadCloser
	rc     *http.ResponseController
	charge *bodyCharge
	conn   *limitedConn // nil on the peer port
	// Guarded by g.mu.
	cut      bool // by shutdown
	ended    bool // read to io.EOF
	received bool // conn told the request arrived whole (or the handler returned)
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if cerr := b.charge.add(n); cerr != nil {
		return 0, cerr
	}
	switch {
	case err == io.EOF:
		b.g.mu.Lock()
		b.ended = true
		tell := b.conn != nil && !b.received
		b.received = b.received || tell
		b.g.mu.Unlock()
		if tell {
			b.conn.requestReceived()
		}
		b.g.finish(b)
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		b.g.mu.Lock()
		cut := b.cut
		b.g.mu.Unlock()
		if cut {
			err = fmt.Errorf("%w: node %s is shutting down and did not read the request", engine.ErrNotProposed, b.g.n.cfg.ID)
		} else {
			err = fmt.Errorf("%w: the request body did not arrive within %v (the server's --request-body-timeout)",
				context.DeadlineExceeded, b.g.limits.bodyTimeout)
		}
		err = b.g.n.toConnectError(err)
	}
	return n, err
}

func (b *guardedBody) Close() error { return b.body.Close() }

// done ends the request when its handler returns: it gives back its charge
// and tells its connection.
func (b *guardedBody) done() {
	b.charge.release()
	b.g.mu.Lock()
	received := b.received
	b.received = true // the rest of a body the server reads afterwards tells nothing
	b.g.mu.Unlock()
	if received && b.conn != nil {
		b.conn.requestDone()
	}
}
