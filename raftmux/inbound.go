package raftmux

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// Inbound requests of one group on one connection go through lanes: the
// reader only queues a frame on its lane and goes on to the next frame, so
// a group whose consumer is slow holds up its own lanes and nothing else.
// Each lane serves its frames one at a time, in order, and answers them in
// that order: AppendEntries (raft's pipeline relies on their order),
// heartbeats (raft's heartbeat loop, apart from replication as it is on a
// connection of its own with a raft.NetworkTransport) and the rest (votes,
// TimeoutNow). A lane's goroutine exists only while the lane has work.
const (
	laneAppend uint8 = iota
	laneHeartbeat
	laneOther
)

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
	mu      sync.Mutex
	q       []inboundReq // guarded by mu
	running bool         // a goroutine serves the lane; guarded by mu
}

type inboundReq struct {
	t *Transport
	f frame
}

// maxInboundQueued bounds the payload bytes one connection's lanes hold.
func (c *conn) maxInboundQueued() int64 { return 2 * int64(c.h.opts.MaxFrame) }

// dispatch queues a request frame on its lane (called by the reader).
func (c *conn) dispatch(f frame) {
	t := c.h.lookup(f.group)
	if t == nil {
		c.refuse(f, fmt.Sprintf("raftmux: no group %d on this node", f.group))
		return
	}
	size := int64(len(f.payload))
	if c.inQueued.Load()+size > c.maxInboundQueued() {
		c.refuse(f, "raftmux: overloaded: too many bytes queued on the connection")
		return
	}
	key := laneKey{f.group, laneOf(f.kind)}
	l := c.lanes[key]
	if l == nil {
		l = &lane{}
		c.lanes[key] = l
	}
	l.mu.Lock()
	if len(l.q) >= laneQueue {
		l.mu.Unlock()
		c.refuse(f, fmt.Sprintf("raftmux: overloaded: group %d has %d requests queued", f.group, laneQueue))
		return
	}
	l.q = append(l.q, inboundReq{t: t, f: f})
	c.inQueued.Add(size)
	start := !l.running
	l.running = true
	l.mu.Unlock()
	if start {
		c.h.wg.Add(1)
		go c.runLane(l)
	}
}

// runLane serves l's requests in order until it is empty.
func (c *conn) runLane(l *lane) {
	defer c.h.wg.Done()
	for {
		l.mu.Lock()
		if len(l.q) == 0 || c.isClosed() {
			l.q, l.running = nil, false
			l.mu.Unlock()
			return
		}
		in := l.q[0]
		l.q[0] = inboundReq{}
		l.q = l.q[1:]
		l.mu.Unlock()
		c.inQueued.Add(-int64(len(in.f.payload)))
		c.serve(in.t, in.f)
	}
}

// serve hands one request to its group and queues the answer.
func (c *conn) serve(t *Transport, f frame) {
	cmd, err := c.h.codecs.decodeRequest(f.kind, f.payload)
	if err != nil {
		c.refuse(f, err.Error())
		return
	}
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: cmd, RespChan: respCh}
	if !t.deliver(rpc, c.closed) {
		c.refuse(f, raft.ErrTransportShutdown.Error())
		return
	}
	select {
	case resp := <-respCh:
		c.respond(f, resp)
	case <-t.shutdown:
		c.refuse(f, raft.ErrTransportShutdown.Error())
	case <-c.closed:
	}
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
