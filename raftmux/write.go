package raftmux

import "time"

// Writing a connection: a sender queues its frame; if no goroutine is
// writing, the sender becomes the writer and writes the queue — its frame
// and whatever others queue meanwhile — through the connection's buffer
// until the queue is empty. Frames queued while a write is in flight thus
// leave together in the next one, with no goroutine of its own to hand
// them to. A lazy frame (a heartbeat or a heartbeat's response) finding
// nobody writing does not write: it arms a timer of Options.Linger, and
// whatever is queued by then — many groups' heartbeats, spread over time
// by raft — leaves in one write when it fires or when an urgent frame
// comes first.

// maxQueued is how many bytes of frames a connection's queue holds before
// senders wait for the writer (a single larger frame still goes).
const maxQueued = 8 << 20

// enqueue queues the frame b and, unless b is lazy or another goroutine is
// writing, writes the queue.
func (c *conn) enqueue(b []byte, lazy bool) error {
	c.wmu.Lock()
	for c.queued > 0 && c.queued+len(b) > maxQueued && !c.isClosed() {
		if c.drained == nil {
			c.drained = make(chan struct{})
		}
		d := c.drained
		c.wmu.Unlock()
		select {
		case <-d:
		case <-c.closed:
		}
		c.wmu.Lock()
	}
	if c.isClosed() {
		c.wmu.Unlock()
		return c.closeErr()
	}
	c.queue = append(c.queue, b)
	c.queued += len(b)
	if c.writing {
		c.wmu.Unlock()
		return nil // the writer takes it
	}
	if lazy && c.h.opts.Linger > 0 && c.queued < writeBuffer {
		if !c.lingering {
			c.lingering = true
			c.linger.Reset(c.h.opts.Linger)
		}
		c.wmu.Unlock()
		return nil
	}
	c.writing = true
	c.wmu.Unlock()
	return c.write()
}

// lingerDone writes what lazy frames queued, unless a writer took them.
func (c *conn) lingerDone() {
	c.wmu.Lock()
	c.lingering = false
	if c.writing || len(c.queue) == 0 || c.isClosed() {
		c.wmu.Unlock()
		return
	}
	c.writing = true
	c.wmu.Unlock()
	_ = c.write()
}

// write writes the queue until it is empty; the caller set c.writing.
func (c *conn) write() error {
	for {
		c.wmu.Lock()
		q := c.queue
		if len(q) == 0 || c.isClosed() {
			c.writing = false
			c.wmu.Unlock()
			if len(q) > 0 {
				return c.closeErr()
			}
			return nil
		}
		c.queue, c.queued = c.spare[:0], 0
		if c.drained != nil {
			close(c.drained)
			c.drained = nil
		}
		c.wmu.Unlock()

		err := c.nc.SetWriteDeadline(time.Now().Add(c.h.opts.Timeout))
		for i, b := range q {
			if err == nil {
				_, err = c.bw.Write(b)
			}
			q[i] = nil
		}
		if err == nil {
			err = c.bw.Flush()
		}
		if err != nil {
			c.fail(err)
			c.wmu.Lock()
			c.writing = false
			c.wmu.Unlock()
			return c.closeErr()
		}
		c.h.counters.framesSent.Add(uint64(len(q)))
		c.h.counters.writes.Add(1)
		c.spare = q
	}
}
