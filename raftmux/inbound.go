package raftmux

import (
	"fmt"
	"strings"
	"sync"

	"github.com/hashicorp/raft"
)

// Inbound requests of one group on one connection go through lanes:
// AppendEntries (raft's pipeline relies on their order), heartbeats (raft's
// heartbeat loop, apart from replication as it is on a connection of its
// own with a raft.NetworkTransport) and the rest (votes, TimeoutNow). Each
// lane hands its requests to the group in order and answers them in that
// order.
//
// The reader never waits on a group. When a lane has nothing waiting and
// room in flight, the reader decodes the request and offers it to the
// group's consumer channel without waiting: when raft is ready for it (the
// common case) raft has it at once, with no goroutine in between. Otherwise
// the request waits on the lane. Every request handed to raft carries the
// lane's answer channel, which has room for every answer the lane has in
// flight, so raft never waits on it either. A lane's goroutine exists while
// the lane has requests waiting or in flight: it hands the waiting ones to
// the group (blocking, in order) and writes the answers as they come, in
// order: raft serves its consumer one request at a time, so a lane's answers
// arrive in the order the lane handed the requests over.
const (
	laneAppend uint8 = iota
	laneHeartbeat
	laneOther
)

// laneInFlight is how many requests a lane has handed to its group at most
// while their answers are pending: the capacity of its answer channel.
const laneInFlight = 4

type laneKey struct {
	group uint32
	lane  uint8
}

func laneOf(k kind) uint8 {
	switch k {
	case kindAppendEntries:
		return laneAppend
	case kindHeartbeat:
		return laneHeartbeat
	default:
		return laneOther
	}
}

type lane struct {
	t       *Transport
	answers chan raft.RPCResponse // cap laneInFlight; raft answers here

	mu       sync.Mutex
	waiting  []inboundReq // not yet handed to the group; guarded by mu
	inflight []frame      // handed to the group, answers pending; guarded by mu
	running  bool         // a goroutine serves the lane; guarded by mu
	retired  bool         // answers may be owed on answers: not to be reused; guarded by mu
}

// inboundReq is a request waiting on its lane: its frame, and its command
// once decoded (or why it does not decode).
type inboundReq struct {
	f      frame
	cmd    interface{}
	refuse string // answer with this transport error, in turn
}

// maxInboundQueued bounds the payload bytes one connection's lanes hold.
func (c *conn) maxInboundQueued() int64 { return 2 * int64(c.h.opts.MaxFrame) }

// dispatch hands a request frame to its group or queues it on its lane
// (called by the reader).
func (c *conn) dispatch(f frame) {
	t := c.h.lookup(f.group)
	if t == nil {
		c.refuse(f, noGroup(f.group))
		return
	}
	key := laneKey{f.group, laneOf(f.kind)}
	l := c.lanes[key]
	if l != nil && l.t == t {
		l.mu.Lock()
		if l.retired {
			l.mu.Unlock()
			l = nil
		}
	} else {
		l = nil
	}
	if l == nil {
		l = &lane{t: t, answers: make(chan raft.RPCResponse, laneInFlight)}
		c.lanes[key] = l
		l.mu.Lock()
	}
	if len(l.waiting)+len(l.inflight) >= laneQueue {
		l.mu.Unlock()
		c.refuse(f, fmt.Sprintf("raftmux: overloaded: group %d has %d requests queued", f.group, laneQueue))
		return
	}
	if len(l.waiting) == 0 && len(l.inflight) < laneInFlight {
		// Nothing ahead of it: offer it to raft straight away.
		req := inboundReq{f: f}
		cmd, err := c.h.codecs.decodeRequest(f.kind, f.payload)
		if err != nil {
			req.refuse = err.Error()
		} else if req.cmd = cmd; !t.toHandler(cmd) {
			select {
			case t.consume <- raft.RPC{Command: cmd, RespChan: l.answers}:
				c.h.counters.direct.Add(1)
				l.inflight = append(l.inflight, f)
				c.startLane(l)
				l.mu.Unlock()
				return
			default:
			}
		}
		l.waiting = append(l.waiting, req)
		c.startLane(l)
		l.mu.Unlock()
		return
	}
	size := int64(len(f.payload))
	if c.inQueued.Load()+size > c.maxInboundQueued() {
		l.mu.Unlock()
		c.refuse(f, "raftmux: overloaded: too many bytes queued on the connection")
		return
	}
	l.waiting = append(l.waiting, inboundReq{f: f})
	c.inQueued.Add(size)
	c.startLane(l)
	l.mu.Unlock()
}

// startLane starts l's goroutine unless it runs; called with l.mu held.
func (c *conn) startLane(l *lane) {
	if l.running {
		return
	}
	l.running = true
	c.h.wg.Add(1)
	go c.runLane(l)
}

// runLane hands l's waiting requests to the group and answers its requests
// in order until it has none. Once a request waits, only this goroutine
// takes requests off l.waiting or hands them over; the reader appends.
func (c *conn) runLane(l *lane) {
	defer c.h.wg.Done()
	t := l.t
	for {
		l.mu.Lock()
		if c.isClosed() || len(l.waiting)+len(l.inflight) == 0 {
			c.dropLane(l)
			l.mu.Unlock()
			return
		}
		inflight := len(l.inflight)
		hand := len(l.waiting) > 0 && inflight < laneInFlight
		var next inboundReq
		if hand {
			next = l.waiting[0]
		}
		l.mu.Unlock()

		if hand && next.cmd == nil && next.refuse == "" {
			c.inQueued.Add(-int64(len(next.f.payload)))
			cmd, err := c.h.codecs.decodeRequest(next.f.kind, next.f.payload)
			if err != nil {
				next.refuse = err.Error()
			}
			next.cmd = cmd
			l.mu.Lock()
			l.waiting[0] = next
			l.mu.Unlock()
		}
		if hand && next.refuse != "" && inflight == 0 {
			c.refuse(next.f, next.refuse)
			c.popWaiting(l, false)
			continue
		}
		if hand && next.refuse == "" {
			rpc := raft.RPC{Command: next.cmd, RespChan: l.answers}
			if fn := t.handler(next.cmd); fn != nil {
				fn(rpc) // raft's heartbeat handler answers before it returns
				c.popWaiting(l, true)
				continue
			}
			select {
			case t.consume <- rpc:
				c.popWaiting(l, true)
			case resp := <-l.answers:
				c.answer(l, resp)
			case <-t.shutdown:
				c.shutLane(l)
				return
			case <-c.closed:
			}
			continue
		}
		if inflight == 0 {
			continue // the reader handed one over meanwhile
		}
		select {
		case resp := <-l.answers:
			c.answer(l, resp)
		case <-t.shutdown:
			c.shutLane(l)
			return
		case <-c.closed:
		}
	}
}

// popWaiting removes l.waiting[0], in flight now when handed.
func (c *conn) popWaiting(l *lane, handed bool) {
	l.mu.Lock()
	if handed {
		l.inflight = append(l.inflight, l.waiting[0].f)
	}
	l.waiting[0] = inboundReq{}
	l.waiting = l.waiting[1:]
	l.mu.Unlock()
}

// answer writes the answer to l's oldest request in flight.
func (c *conn) answer(l *lane, resp raft.RPCResponse) {
	l.mu.Lock()
	f := l.inflight[0]
	l.inflight[0] = frame{}
	l.inflight = l.inflight[1:]
	l.mu.Unlock()
	c.respond(f, resp)
}

// answerReady writes the answers raft already gave to l's requests in
// flight: a heartbeat handler answers before it returns, and Close waits
// for it, so its answer is ready when the shutdown is, and a select
// choosing between the two must not turn it into a refusal.
func (c *conn) answerReady(l *lane) {
	for {
		l.mu.Lock()
		n := len(l.inflight)
		l.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case resp := <-l.answers:
			c.answer(l, resp)
		default:
			return
		}
	}
}

// shutLane writes the answers raft already gave (answerReady), answers
// every other request of l with the group's shutdown, in order, and ends
// l's goroutine.
func (c *conn) shutLane(l *lane) {
	c.answerReady(l)
	l.mu.Lock()
	fs := append([]frame(nil), l.inflight...)
	for _, r := range l.waiting {
		fs = append(fs, r.f)
	}
	c.dropLane(l)
	l.mu.Unlock()
	for _, f := range fs {
		c.refuse(f, raft.ErrTransportShutdown.Error())
	}
}

// dropLane empties l and marks its goroutine gone; called with l.mu held.
// A lane left with requests in flight (its group or connection closed) is
// retired: answers raft still owes land in l.answers, which has room for
// them, and are never read; a later request of the group gets a new lane.
func (c *conn) dropLane(l *lane) {
	for _, r := range l.waiting {
		if r.cmd == nil && r.refuse == "" {
			c.inQueued.Add(-int64(len(r.f.payload)))
		}
	}
	l.retired = l.retired || len(l.inflight) > 0
	l.waiting, l.inflight, l.running = nil, nil, false
}

// respond queues the response to request f as a raft.NetworkTransport
// writes one: the error's text ("" for none), then the response.
func (c *conn) respond(f frame, resp raft.RPCResponse) {
	errText := ""
	if resp.Error != nil {
		errText = resp.Error.Error()
	}
	b, err := c.h.codecs.encodeFrame(f.group, kindResponse, f.id, errText, resp.Response)
	if err != nil {
		c.refuse(f, err.Error())
		return
	}
	_ = c.enqueue(b, f.kind == kindHeartbeat)
}

// refuse answers request f with a transport error.
func (c *conn) refuse(f frame, msg string) {
	c.h.counters.refused.Add(1)
	_ = c.enqueue(appendFrame(nil, f.group, kindError, f.id, []byte(msg)), false)
}

// noGroupPrefix begins the refusal of a request for a group the node does
// not host (noGroup, IsNoGroup).
const noGroupPrefix = "raftmux: no group "

// noGroup is the refusal of a request for group, which this node does not
// host.
func noGroup(group uint32) string { return fmt.Sprintf("%s%d on this node", noGroupPrefix, group) }

// IsNoGroup reports whether err, returned by a Transport call, is the
// peer's refusal of a request for a group it does not host: not yet (its
// replica is still being opened) or no longer (it was moved away).
func IsNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), noGroupPrefix)
}
