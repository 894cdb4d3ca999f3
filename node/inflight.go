package node

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
)

// The in-flight budget: what all the requests of one listener hold at once.
// The per-request bounds (limits.go) keep one request from costing more
// than --max-request-bytes, but not 200 of them arriving together: each
// gzip body of 16 KB may inflate to 16 MiB, and together they took a node
// past 6 GB. So each request is charged, as its body is read (bodyGuard),
// what it may cost: the bytes read, and, for a compressed body, what they
// may inflate to. Connect reads a message whole before it inflates it, so
// the charge is taken before a byte is inflated. A request whose charge
// would take the listener past its budget is refused at once
// (resource_exhausted, Retry-After): nothing waits for room. The charge is
// given back when the request's handler returns (its decoded message lives
// that long).
const (
	// DefaultMaxInflightBytes is a listener's budget when the process has
	// no memory limit (Config.MaxInflightBytes).
	DefaultMaxInflightBytes = 64 << 20
	// inflightShareOfMemory: with a memory limit, a listener's budget is
	// this fraction of it. What a charged byte costs in memory is a few
	// bytes (the buffer Connect reads into grows by doubling, and the
	// decoded message comes on top), and the API port and the admin
	// listener have a budget each.
	inflightShareOfMemory = 16
	// maxInflightBytes bounds Config.MaxInflightBytes from above.
	maxInflightBytes = 1 << 40
	// gzipMaxRatio is the most DEFLATE inflates: one 258-byte match per
	// two bits, 1032 to 1 (RFC 1951). A compressed body is charged that
	// much per byte read, up to the listener's message bound: an upper
	// bound of what it inflates to, known before inflating it.
	gzipMaxRatio = 1032
	// smallRequestBytes: a request charged at most this may take the whole
	// budget; larger ones only its first 7/8 (largeShare), so a flood of
	// large requests leaves room for the small calls that make up most of
	// the traffic.
	smallRequestBytes = 64 << 10
	// retryAfterSeconds is the Retry-After of a refusal: requests in flight
	// end within milliseconds, or their bodies' timeout.
	retryAfterSeconds = 1
	// trimAbove and trimDelay: once a listener that held at least
	// trimAbove is back under a quarter of it, trimDelay later its memory
	// is handed back to the system (inflightBudget.trim).
	trimAbove = 16 << 20
	trimDelay = 500 * time.Millisecond
)

// ErrTooManyInflightBytes is returned for a request refused because its
// listener holds its budget of request bytes (Config.MaxInflightBytes).
var ErrTooManyInflightBytes = errors.New("too many request bytes in flight")

// largeShare is what requests charged more than smallRequestBytes may take
// of a budget of max bytes.
func largeShare(max int64) int64 { return max - max/8 }

// checkInflight validates MaxInflightBytes; bad formats the error.
func (c Config) checkInflight(bad func(flag, format string, args ...any) error) error {
	floor := 2 * int64(c.apiLimits().maxBytes)
	if v := c.MaxInflightBytes; v != 0 && (v < floor || v > maxInflightBytes) {
		return bad("max-inflight-bytes", "must be between %d (twice --max-request-bytes) and %d bytes, or 0 for a default sized to the memory limit (got %d)",
			floor, int64(maxInflightBytes), v)
	}
	return nil
}

// inflightLimit is the budget of a listener whose message bound is
// maxBytes: Config.MaxInflightBytes, or its default; the peer port's
// forwarding server (peer) gets at least twice its own bound.
func (c Config) inflightLimit(peer bool) int64 {
	v := c.MaxInflightBytes
	if v == 0 {
		v = max(DefaultMaxInflightBytes, 2*int64(c.apiLimits().maxBytes))
		limit := c.MemoryLimit
		if limit == 0 {
			limit = processMemoryLimit()
		}
		if limit > 0 {
			v = max(limit/inflightShareOfMemory, 2*int64(c.apiLimits().maxBytes))
		}
	}
	if peer {
		v = max(v, 2*int64(c.peerLimits().maxBytes))
	}
	return v
}

// processMemoryLimit is the process's memory limit: the runtime's soft
// limit (GOMEMLIMIT, or one set before), else the cgroup's (v2, then v1);
// 0 when there is none.
func processMemoryLimit() int64 {
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		return l
	}
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// "max", or a page-rounded MaxInt64, when unlimited.
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 && v < 1<<60 {
			return v
		}
	}
	return 0
}

// inflightBudget is one listener's budget. Safe for concurrent use.
type inflightBudget struct {
	max int64

	mu   sync.Mutex
	used int64
	peak int64
	// high is the most used since the last trim; trimming, whether one
	// is scheduled.
	high     int64
	trimming bool

	read    atomic.Int64 // body bytes read, in all
	refused atomic.Int64 // requests refused
}

// reserve takes n more bytes for a request whose charge becomes total, or
// reports false, taking nothing, when that would pass the budget.
func (b *inflightBudget) reserve(n, total int64) bool {
	limit := b.max
	if total > smallRequestBytes {
		limit = largeShare(b.max)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > limit {
		return false
	}
	b.used += n
	b.peak = max(b.peak, b.used)
	b.high = max(b.high, b.used)
	return true
}

func (b *inflightBudget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.high >= trimAbove && b.used <= trimAbove/4 && !b.trimming {
		b.trimming = true
		time.AfterFunc(trimDelay, b.trim)
	}
}

// trim hands the memory of a burst of large requests back to the system,
// once it has ended. The budget bounds what the burst took; without a
// collection after it (none comes until the heap grows again, or for two
// minutes) the process would keep its peak resident. Two collections: a
// buffer Connect recycled survives the first in its sync.Pool.
func (b *inflightBudget) trim() {
	b.mu.Lock()
	b.trimming = false
	ended := b.used <= trimAbove/4
	if ended {
		b.high = 0
	}
	b.mu.Unlock()
	if ended {
		runtime.GC()
		debug.FreeOSMemory()
	}
}

// InflightStats are a listener's in-flight request bytes: those held now
// and at most so far, the budget, the body bytes read in all and the
// requests refused for the budget.
type InflightStats struct {
	InUse, Peak, Max, Read, Refused int64
}

func (b *inflightBudget) stats() InflightStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return InflightStats{InUse: b.used, Peak: b.peak, Max: b.max, Read: b.read.Load(), Refused: b.refused.Load()}
}

// bodyCharge is what one request holds of its listener's budget. Safe for
// concurrent use: the server may read what the handler left of a body
// after the handler returned.
type bodyCharge struct {
	budget     *inflightBudget
	maxBytes   int64 // the listener's message bound
	compressed bool  // the body declares a content coding

	mu       sync.Mutex
	raw      int64 // body bytes read
	held     int64
	released bool
	err      error // the refusal, once refused
}

// newBodyCharge starts the charge of a request with header h.
func newBodyCharge(b *inflightBudget, maxBytes int, h http.Header) *bodyCharge {
	c := &bodyCharge{budget: b, maxBytes: int64(maxBytes)}
	// Connect unary, Connect streaming, gRPC and gRPC-Web name theirs in
	// one of these; only gzip is served, any other is refused unread.
	for _, k := range []string{"Content-Encoding", "Connect-Content-Encoding", "Grpc-Encoding"} {
		if v := h.Get(k); v != "" && !strings.EqualFold(v, "identity") {
			c.compressed = true
		}
	}
	return c
}

// add charges n more body bytes read; the error refuses the request.
func (c *bodyCharge) add(n int) error {
	if n <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return nil // what the server discards after the handler
	}
	if c.err != nil {
		return c.err
	}
	c.budget.read.Add(int64(n))
	c.raw += int64(n)
	want := c.raw
	if c.compressed {
		want += min(c.maxBytes, gzipMaxRatio*c.raw)
	}
	if want <= c.held {
		return nil
	}
	if !c.budget.reserve(want-c.held, want) {
		c.budget.refused.Add(1)
		ce := connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%w: the server holds its budget of %d bytes of requests at once (its --max-inflight-bytes); retry after %ds",
			ErrTooManyInflightBytes, c.budget.max, retryAfterSeconds))
		ce.Meta().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
		c.err = ce
		return c.err
	}
	c.held = want
	return nil
}

// release gives back what the request holds; later reads are not charged.
func (c *bodyCharge) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.budget.release(c.held)
	c.held, c.released = 0, true
}
