// Package raftmux is one node's Raft transport for all its groups: a Hub
// hands each hosted group a raft.Transport (Hub.Transport), and every
// group's traffic to one peer node shares one connection, so a group costs
// what it carries rather than connections, buffers and syscalls of its own.
//
// It owns the frame format on that connection (frame.go), the shared
// connections (dialing with a redial backoff, the writer that batches
// frames, the reader, calls matched to responses by request ID; conn.go),
// the serving of inbound requests per group in order (inbound.go), the
// AppendEntries pipeline (pipeline.go) and InstallSnapshot on connections
// of its own (snapshot.go). The caller gives it its dial functions and
// listeners — in Quorate, channels of the peer port (package peermux) —
// and knows nothing of frames; this package knows nothing of nodes, groups'
// state or configuration.
//
// # Design
//
// Connections. Each Hub dials one shared connection per peer address and
// sends its requests on it; responses come back on it. Requests from a
// peer arrive on the connection that peer dialed, which this hub accepted:
// a pair of nodes has two shared connections, one per direction, and no
// dial race to settle. All groups of a node have the node's address, so
// the frame, not the connection, names the group.
//
// Frames. A frame is a 4-byte length, the group (uint32), a kind byte, the
// request ID (uint64) and a payload: raft's request and response structs
// in an encoding of the transport's own (wire.go: each field in turn,
// varints and length-prefixed bytes, written without reflection, about
// 3× cheaper than the msgpack a raft.NetworkTransport uses), in which every
// field survives. A response's payload is the responder's error text then the
// response, as a NetworkTransport writes them; a kindError frame is a
// transport error (no such group, a request that does not decode, an
// overloaded group) with no response. A length over Options.MaxFrame
// closes the connection before the payload is read, and a payload is read
// into a buffer that grows as bytes arrive, so a peer's claimed length
// allocates nothing by itself. DefaultMaxFrame (128 MiB) holds a batch of
// Quorate's largest default entries (peer requests up to 64 MiB); an
// AppendEntries that encodes larger is sent as a prefix of its entries,
// which raft sees in its request and resumes after. A shared connection
// may be quiet between frames for as long as it likes (the peer port
// exempts it from its idle timeout), but a frame whose first byte has
// arrived must arrive whole within Options.FrameTimeout, or the connection
// is closed: a peer that sends a byte and stops holds nothing for long.
//
// Sending. A caller encodes its frame, registers a call under a new
// request ID and queues the frame. If no goroutine is writing, the caller
// becomes the writer: it writes the whole queue through the connection's
// 64 KiB buffer, again until the queue is empty, so what several groups
// queue while a write is in flight leaves in the next single write, with
// no writer goroutine to hand frames to. Heartbeats and their responses
// are lazy: finding nobody writing, they wait up to Options.Linger
// (DefaultLinger, 10 ms) for other frames, so that a node's many groups'
// heartbeats to a peer, which raft spreads over time, share writes; any
// other frame is written at once with whatever waits. The queue holds at
// most 8 MiB before senders wait. The reader completes calls by ID; the
// caller decodes. One sweep per connection every Timeout/4 (not a timer
// per call) fails calls pending for 1 to 1.25 Options.Timeout; if nothing
// at all came back on the connection since such a call was sent, the peer
// is taken for gone and the connection is closed. A broken connection
// fails every pending call at once; the next call redials, at once unless
// the broken connection was young, and after a failed dial calls fail
// fast for a backoff that doubles from Options.RedialBackoff.
//
// Serving. Requests of a group on a connection go through lanes — one
// for AppendEntries, one for heartbeats, one for the rest — that hand them
// to the group in order and answer them in that order, as raft's pipeline
// needs. The reader of an accepted connection never waits on a group: when
// a request's lane has nothing waiting and room in flight, the reader
// decodes it and offers it to the group's consumer channel without
// waiting, so when raft is ready for it — the common case — raft has it
// with no goroutine in between, as with a raft.NetworkTransport's
// connection goroutine; otherwise (raft busy, requests ahead of it, or a
// heartbeat, which goes to raft's heartbeat handler) it waits on the lane.
// Every request handed over carries its lane's answer channel, with room
// for the lane's at most 4 requests in flight, so raft never waits on it
// either. A goroutine that exists while its lane has requests waiting or in
// flight hands the waiting ones over (blocking, in order) and writes the
// answers as they come: raft serves its consumer one request at a time, so
// a lane's answers come in the order it handed the requests over. A group
// whose consumer is stuck thus holds up only its own lanes. A lane holds at
// most 256 requests and a connection's lanes at most 2×MaxFrame bytes of
// requests not yet decoded; beyond that requests are answered with an
// overload error at once. The price of the direct hand-over is that the
// reader decodes those requests itself: a large AppendEntries delays the
// next frames of the connection by its decoding time.
//
// Pipeline. AppendEntriesPipeline sends without waiting, up to
// Options.MaxInFlight outstanding, and completes futures in send order. It
// is bound to the connection it opened on; when that breaks its futures
// fail (a failed future's response is not Success, so raft ends the
// pipeline and opens another).
//
// Snapshots. InstallSnapshot dials Options.DialSnapshot for each call,
// writes the request frame and exactly args.Size bytes of data through a
// 32 KiB buffer and reads one answer frame, with a deadline of Timeout per
// TimeoutScale bytes. The listener serves at most 16 at once and hands the
// group a reader bounded by args.Size.
//
// Figures. figures_test.go compares a Hub with one raft.NetworkTransport
// per replica for 64 and 256 idle groups × 3 replicas in one process (CPU
// over 10 s, heap) and for Apply across 16 groups (CPU per entry, and
// the share of inbound requests the reader handed to raft itself,
// Stats.Direct):
// QUORATE_RAFTMUX_FIGURES=mux/256 go test -run TestIdleFigures -v, and
// go test -run X -bench Apply16Groups.
//
// Limits not addressed: frames on a shared connection are written whole,
// so a large AppendEntries to a peer delays the other groups' frames to
// that peer for as long as it takes to send.
package raftmux
