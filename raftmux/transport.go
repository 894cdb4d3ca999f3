package raftmux

import (
	"errors"
	"sync"

	"github.com/hashicorp/raft"
)

// Transport is one Raft group's raft.Transport (with raft.WithClose and
// raft.WithPreVote) on a Hub.
type Transport struct {
	h       *Hub
	group   uint32
	local   raft.ServerAddress
	consume chan raft.RPC

	hbMu sync.Mutex
	hbFn func(raft.RPC)
	// hbClosed is set by Close, after which no heartbeat goes to hbFn;
	// hbCalls counts the calls of hbFn running, which Close waits for.
	hbClosed bool
	hbCalls  sync.WaitGroup

	shutdown  chan struct{}
	closeOnce sync.Once

	pipeMu sync.Mutex
	pipes  map[*pipeline]struct{}
}

var (
	_ raft.Transport   = (*Transport)(nil)
	_ raft.WithClose   = (*Transport)(nil)
	_ raft.WithPreVote = (*Transport)(nil)
)

func newTransport(h *Hub, group uint32, local raft.ServerAddress) *Transport {
	return &Transport{
		h: h, group: group, local: local,
		consume:  make(chan raft.RPC),
		shutdown: make(chan struct{}),
		pipes:    make(map[*pipeline]struct{}),
	}
}

// Consumer returns the channel of the group's inbound RPCs.
func (t *Transport) Consumer() <-chan raft.RPC { return t.consume }

// LocalAddr returns the node's address.
func (t *Transport) LocalAddr() raft.ServerAddress { return t.local }

// EncodePeer returns addr's bytes.
func (t *Transport) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte {
	return []byte(addr)
}

// DecodePeer returns the address EncodePeer encoded.
func (t *Transport) DecodePeer(b []byte) raft.ServerAddress { return raft.ServerAddress(b) }

// SetHeartbeatHandler sets the function inbound heartbeats go to instead
// of the consumer channel (nil: the channel).
func (t *Transport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	t.hbMu.Lock()
	t.hbFn = cb
	t.hbMu.Unlock()
}

// Close unregisters the group from the hub and closes its pipelines; the
// hub and the other groups go on. It returns once no heartbeat handler call
// is running: raft's handler runs on the transport's goroutine, not raft's,
// so a heartbeat that began before raft shut down could otherwise still
// write raft's term to a store its owner closes next.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.hbMu.Lock()
		t.hbClosed = true
		t.hbMu.Unlock()
		t.hbCalls.Wait()
		close(t.shutdown)
		t.h.unregister(t)
		t.pipeMu.Lock()
		pipes := t.pipes
		t.pipes = nil
		t.pipeMu.Unlock()
		for p := range pipes {
			_ = p.Close()
		}
	})
	return nil
}

// toHandler reports whether cmd would go to the heartbeat handler now.
func (t *Transport) toHandler(cmd interface{}) bool {
	ae, ok := cmd.(*raft.AppendEntriesRequest)
	if !ok || !isHeartbeat(ae) {
		return false
	}
	t.hbMu.Lock()
	defer t.hbMu.Unlock()
	return t.hbFn != nil && !t.hbClosed
}

// handler returns the heartbeat handler when cmd is a request a
// raft.NetworkTransport would hand to it, nil when cmd goes to the consumer.
// The caller must call what it returns (Close waits for it).
func (t *Transport) handler(cmd interface{}) func(raft.RPC) {
	ae, ok := cmd.(*raft.AppendEntriesRequest)
	if !ok || !isHeartbeat(ae) {
		return nil
	}
	t.hbMu.Lock()
	defer t.hbMu.Unlock()
	if t.hbFn == nil || t.hbClosed {
		return nil
	}
	fn := t.hbFn
	t.hbCalls.Add(1)
	return func(rpc raft.RPC) {
		defer t.hbCalls.Done()
		fn(rpc)
	}
}

// deliver hands an inbound RPC to the heartbeat handler or the consumer;
// false when the group closed or stop was closed first.
func (t *Transport) deliver(rpc raft.RPC, stop <-chan struct{}) bool {
	if fn := t.handler(rpc.Command); fn != nil {
		fn(rpc)
		return true
	}
	select {
	case t.consume <- rpc:
		return true
	case <-t.shutdown:
		return false
	case <-stop:
		return false
	}
}

// AppendEntries sends an AppendEntries request and waits for its response.
func (t *Transport) AppendEntries(_ raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	k := kindAppendEntries
	if isHeartbeat(args) {
		k = kindHeartbeat
	}
	b, err := t.h.codecs.encodeAppend(t.group, k, args, t.h.opts.MaxFrame)
	if err != nil {
		return err
	}
	return t.roundTrip(target, b, resp)
}

// RequestVote sends a RequestVote request and waits for its response.
func (t *Transport) RequestVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.unary(target, kindRequestVote, args, resp)
}

// RequestPreVote sends a RequestPreVote request and waits for its response.
func (t *Transport) RequestPreVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.unary(target, kindRequestPreVote, args, resp)
}

// TimeoutNow sends a TimeoutNow request and waits for its response.
func (t *Transport) TimeoutNow(_ raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.unary(target, kindTimeoutNow, args, resp)
}

func (t *Transport) unary(target raft.ServerAddress, k kind, args, resp interface{}) error {
	b, err := t.h.codecs.encodeFrame(t.group, k, 0, args)
	if err != nil {
		return err
	}
	if len(b)-frameFullHeader > t.h.opts.MaxFrame {
		return errFrameTooLarge
	}
	return t.roundTrip(target, b, resp)
}

// roundTrip sends the request frame b to target on the shared connection
// and decodes the response into resp.
func (t *Transport) roundTrip(target raft.ServerAddress, b []byte, resp interface{}) error {
	select {
	case <-t.shutdown:
		return raft.ErrTransportShutdown
	default:
	}
	c, err := t.h.connTo(target)
	if err != nil {
		return err
	}
	cl, id, err := c.start(b)
	if err != nil {
		return err
	}
	select {
	case <-cl.done: // a response, an error, or the timeout (sweep)
	case <-t.shutdown:
		c.abandon(id)
		return raft.ErrTransportShutdown
	}
	return t.h.codecs.decodeResult(cl, resp)
}

// decodeResult turns a finished call into resp, or into the error it
// carries. resp is left untouched unless a response arrived.
func (cs codecs) decodeResult(cl *call, resp interface{}) error {
	if cl.err != nil {
		return cl.err
	}
	if cl.kind == kindError {
		return errors.New(string(cl.payload))
	}
	var errText string
	if err := cs.decode(cl.payload, &errText, resp); err != nil {
		return err
	}
	if errText != "" {
		return errors.New(errText)
	}
	return nil
}
