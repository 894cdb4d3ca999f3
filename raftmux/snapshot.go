package raftmux

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// A snapshot connection carries one InstallSnapshot: the dialer writes a
// kindInstallSnapshot frame (the request), then exactly args.Size bytes of
// snapshot data; the listener answers with one kindResponse or kindError
// frame and both close. Its own connection keeps a large snapshot from
// holding up the shared one.

// snapshotBuffer is the buffer size on each side of a snapshot connection.
const snapshotBuffer = 32 << 10

// snapshotTimeout is the deadline of a snapshot of size bytes: the timeout
// per TimeoutScale bytes, at least the timeout.
func (h *Hub) snapshotTimeout(size int64) time.Duration {
	d := h.opts.Timeout * time.Duration(size/h.opts.TimeoutScale)
	return max(d, h.opts.Timeout)
}

// InstallSnapshot sends a snapshot to target on a connection of its own
// and waits for the answer.
func (t *Transport) InstallSnapshot(_ raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	select {
	case <-t.shutdown:
		return raft.ErrTransportShutdown
	default:
	}
	h := t.h
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
	nc, err := h.opts.DialSnapshot(ctx, target)
	cancel()
	if err != nil {
		return fmt.Errorf("raftmux: dial %s for a snapshot: %w", target, err)
	}
	defer func() { _ = nc.Close() }()
	_ = nc.SetDeadline(time.Now().Add(h.snapshotTimeout(args.Size)))

	b, err := h.codecs.encodeFrame(t.group, kindInstallSnapshot, 0, args)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(nc, snapshotBuffer)
	if _, err := bw.Write(b); err != nil {
		return err
	}
	if n, err := io.CopyN(bw, data, args.Size); err != nil {
		return fmt.Errorf("raftmux: snapshot data: %d of %d bytes: %w", n, args.Size, err)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	fr := frameReader{r: bufio.NewReaderSize(nc, 4096), max: h.opts.MaxFrame}
	f, err := fr.next()
	if err != nil {
		return fmt.Errorf("raftmux: snapshot response: %w", err)
	}
	if f.kind != kindResponse && f.kind != kindError {
		return fmt.Errorf("%w: snapshot answered with frame kind %#x", errProtocol, f.kind)
	}
	h.counters.snapsSent.Add(1)
	return h.codecs.decodeResult(&call{kind: f.kind, payload: f.payload}, resp)
}

// serveSnapshot serves one inbound snapshot connection.
func (h *Hub) serveSnapshot(nc net.Conn) {
	defer func() { _ = nc.Close() }()
	select {
	case h.snapSem <- struct{}{}:
		defer func() { <-h.snapSem }()
	default:
		h.counters.refused.Add(1)
		return // too many at once: the sender fails and raft retries
	}
	_ = nc.SetDeadline(time.Now().Add(h.opts.Timeout))
	br := bufio.NewReaderSize(nc, snapshotBuffer)
	fr := frameReader{r: br, max: h.opts.MaxFrame}
	f, err := fr.next()
	if err != nil || f.kind != kindInstallSnapshot {
		h.counters.refused.Add(1)
		return
	}
	answer := func(b []byte) { _, _ = nc.Write(b) }
	refuse := func(msg string) {
		h.counters.refused.Add(1)
		answer(appendFrame(nil, f.group, kindError, 0, []byte(msg)))
	}
	t := h.lookup(f.group)
	if t == nil {
		refuse(noGroup(f.group))
		return
	}
	cmd, err := h.codecs.decodeRequest(kindInstallSnapshot, f.payload)
	if err != nil {
		refuse(err.Error())
		return
	}
	args := cmd.(*raft.InstallSnapshotRequest)
	if args.Size < 0 {
		refuse("raftmux: negative snapshot size")
		return
	}
	_ = nc.SetDeadline(time.Now().Add(h.snapshotTimeout(args.Size)))
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: args, Reader: io.LimitReader(br, args.Size), RespChan: respCh}
	if !t.deliver(rpc, h.done) {
		refuse(raft.ErrTransportShutdown.Error())
		return
	}
	var resp raft.RPCResponse
	select {
	case resp = <-respCh:
	case <-t.shutdown:
		refuse(raft.ErrTransportShutdown.Error())
		return
	case <-h.done:
		return
	}
	errText := ""
	if resp.Error != nil {
		errText = resp.Error.Error()
	}
	b, err := h.codecs.encodeFrame(f.group, kindResponse, 0, errText, resp.Response)
	if err != nil {
		refuse(err.Error())
		return
	}
	h.counters.snapsRecv.Add(1)
	answer(b)
}
