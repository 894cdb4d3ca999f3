package raftmux

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// AppendEntriesPipeline returns a pipeline of AppendEntries to target over
// the shared connection: requests go out without waiting for responses
// (up to Options.MaxInFlight outstanding), the peer serves them in order on
// the group's append lane, and the futures complete in order on the
// pipeline's Consumer. The pipeline is bound to the connection it opened
// on: when that breaks, its outstanding futures fail and raft opens a new
// pipeline.
func (t *Transport) AppendEntriesPipeline(_ raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	select {
	case <-t.shutdown:
		return nil, raft.ErrTransportShutdown
	default:
	}
	c, err := t.h.connTo(target)
	if err != nil {
		return nil, err
	}
	n := t.h.opts.MaxInFlight
	p := &pipeline{
		t: t, c: c,
		// As in raft's own pipeline: one request is being decoded and one
		// being sent besides the buffered ones.
		inflight: make(chan *appendFuture, n-2),
		done:     make(chan raft.AppendFuture, n-2),
		stop:     make(chan struct{}),
		broken:   make(chan struct{}),
	}
	t.pipeMu.Lock()
	if t.pipes == nil {
		t.pipeMu.Unlock()
		return nil, raft.ErrTransportShutdown
	}
	t.pipes[p] = struct{}{}
	t.pipeMu.Unlock()
	t.h.counters.pipelines.Add(1)
	go p.decode()
	return p, nil
}

type pipeline struct {
	t        *Transport
	c        *conn
	inflight chan *appendFuture
	done     chan raft.AppendFuture
	stop     chan struct{}
	once     sync.Once
	// broken is closed at a future that failed, is not Success or has a
	// newer term: raft stops reading the pipeline there, so further sends
	// fail at once instead of waiting for room that never comes.
	broken    chan struct{}
	breakOnce sync.Once
}

var errPipelineBroken = errors.New("raftmux: pipeline broken by an earlier failure")

// AppendEntries sends one request down the pipeline. It returns an error
// only once the pipeline is closed. A request that cannot go out (the
// pipeline broken by an earlier failure, the connection gone, a frame too
// large) fails on the consumer instead, as a request whose response
// failed does, and raft ends the pipeline the same way: raft's
// pipelineSend logs a send error with its follower's peer read without
// the lock that guards it, a data race with a change of the peer's address
// (hashicorp/raft#681, open in v1.8.0), which a failed future does not
// reach.
func (p *pipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f := &appendFuture{start: time.Now(), args: args, resp: resp, ready: make(chan struct{})}
	select {
	case <-p.stop:
		return nil, raft.ErrPipelineShutdown
	default:
	}
	select {
	case <-p.broken:
		// A failed future is ahead of this one on the consumer, where
		// raft stops reading: nobody waits for this one.
		return p.failed(f, errPipelineBroken), nil
	default:
	}
	b, err := p.t.h.codecs.encodeAppend(p.t.group, kindAppendEntries, args, p.t.h.opts.MaxFrame)
	if err == nil {
		f.call, f.id, err = p.c.start(b)
	}
	if err != nil {
		f.err = err // decode delivers it failed, in order
	} else {
		p.t.h.counters.pipelineSends.Add(1)
	}
	select {
	case p.inflight <- f:
		return f, nil
	default:
	}
	// Full: wait for room, at most the timeout (by then the oldest
	// outstanding request has timed out anyway).
	timer := time.NewTimer(p.t.h.opts.Timeout)
	defer timer.Stop()
	select {
	case p.inflight <- f:
		return f, nil
	case <-p.stop:
		p.abandon(f)
		return nil, raft.ErrPipelineShutdown
	case <-p.broken:
		p.abandon(f)
		return p.failed(f, errPipelineBroken), nil
	case <-timer.C:
		p.abandon(f)
		p.breakOnce.Do(func() { close(p.broken) })
		// The outstanding requests fail by their own timeouts ahead of it.
		return p.failed(f, errPipelineStalled), nil
	}
}

var errPipelineStalled = errors.New("raftmux: pipeline stalled: no room within the timeout")

// failed completes f, never sent, with err.
func (p *pipeline) failed(f *appendFuture, err error) *appendFuture {
	f.err = err
	*f.resp = raft.AppendEntriesResponse{}
	close(f.ready)
	return f
}

// abandon forgets f's call, if it was started.
func (p *pipeline) abandon(f *appendFuture) {
	if f.call != nil {
		p.c.abandon(f.id)
	}
}

// decode completes the futures in the order they were sent.
func (p *pipeline) decode() {
	for {
		select {
		case f := <-p.inflight:
			if f.err == nil { // else it failed before it went out
				f.err = p.await(f)
			}
			if f.err != nil {
				*f.resp = raft.AppendEntriesResponse{} // not Success: raft ends the pipeline
			}
			if !f.resp.Success || f.resp.Term > f.args.Term {
				// Raft stops reading the pipeline at such a response.
				p.breakOnce.Do(func() { close(p.broken) })
			}
			close(f.ready)
			select {
			case p.done <- f:
			case <-p.stop:
				return
			}
		case <-p.stop:
			return
		}
	}
}

func (p *pipeline) await(f *appendFuture) error {
	select {
	case <-f.call.done: // a response, an error, or the timeout (sweep)
		return p.t.h.codecs.decodeResult(f.call, f.resp)
	case <-p.stop:
		p.c.abandon(f.id)
		return raft.ErrPipelineShutdown
	}
}

// Consumer returns the channel of completed futures, in send order.
func (p *pipeline) Consumer() <-chan raft.AppendFuture { return p.done }

// Close stops the pipeline; responses still due are dropped.
func (p *pipeline) Close() error {
	p.once.Do(func() {
		close(p.stop)
		p.t.pipeMu.Lock()
		delete(p.t.pipes, p)
		p.t.pipeMu.Unlock()
		for {
			select {
			case f := <-p.inflight:
				p.abandon(f)
				f.err = raft.ErrPipelineShutdown
				close(f.ready)
			default:
				return
			}
		}
	})
	return nil
}

// appendFuture is a pipelined AppendEntries.
type appendFuture struct {
	start time.Time
	args  *raft.AppendEntriesRequest
	resp  *raft.AppendEntriesResponse
	call  *call
	id    uint64
	ready chan struct{} // closed once err and resp are final
	err   error
}

// Error waits for the response and returns the RPC's error.
func (f *appendFuture) Error() error {
	<-f.ready
	return f.err
}

func (f *appendFuture) Start() time.Time                    { return f.start }
func (f *appendFuture) Request() *raft.AppendEntriesRequest { return f.args }
func (f *appendFuture) Response() *raft.AppendEntriesResponse {
	return f.resp
}
