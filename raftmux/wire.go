package raftmux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// The encoding of raft's RPC structs in a frame's payload: each struct's
// fields in the order they are declared, written by hand, with no
// reflection. Integers are varints (signed ones zig-zag), booleans a byte,
// byte slices their length + 1 then their bytes (0: nil, so nil and empty
// survive apart), strings their length then their bytes, a time 0 when
// zero or 1 then its Unix nanoseconds (read back in UTC). A log entry is its index, term,
// type, data, extensions and the time it was appended. Every field of
// every struct survives a trip (TestWireRoundTripsEveryField fills each
// field by reflection and compares). Decoding refuses trailing bytes, a
// length past the end and more entries than bytes left; decoded byte
// slices point into the payload, which a frame owns alone.

// errWire is the error of a payload that does not decode.
var errWire = errors.New("raftmux: malformed payload")

// wbuf appends the encoding.
type wbuf struct{ b []byte }

func (w *wbuf) uint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *wbuf) int(v int64)   { w.b = binary.AppendVarint(w.b, v) }

func (w *wbuf) bool(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}

func (w *wbuf) bytes(p []byte) {
	if p == nil {
		w.uint(0)
		return
	}
	w.uint(uint64(len(p)) + 1)
	w.b = append(w.b, p...)
}

func (w *wbuf) string(s string) {
	w.uint(uint64(len(s)))
	w.b = append(w.b, s...)
}

func (w *wbuf) time(t time.Time) {
	if t.IsZero() {
		w.uint(0)
		return
	}
	w.uint(1)
	w.int(t.UnixNano())
}

func (w *wbuf) header(h raft.RPCHeader) {
	w.int(int64(h.ProtocolVersion))
	w.bytes(h.ID)
	w.bytes(h.Addr)
}

func (w *wbuf) log(l *raft.Log) {
	w.uint(l.Index)
	w.uint(l.Term)
	w.uint(uint64(l.Type))
	w.bytes(l.Data)
	w.bytes(l.Extensions)
	w.time(l.AppendedAt)
}

// value appends v: a string, or a pointer to one of raft's RPC structs.
func (w *wbuf) value(v any) error {
	switch m := v.(type) {
	case string:
		w.string(m)
	case *raft.AppendEntriesRequest:
		w.header(m.RPCHeader)
		w.uint(m.Term)
		w.bytes(m.Leader) //nolint:staticcheck // raft's own field, carried as a NetworkTransport carries it
		w.uint(m.PrevLogEntry)
		w.uint(m.PrevLogTerm)
		w.uint(uint64(len(m.Entries)))
		for _, l := range m.Entries {
			w.log(l)
		}
		w.uint(m.LeaderCommitIndex)
	case *raft.AppendEntriesResponse:
		w.header(m.RPCHeader)
		w.uint(m.Term)
		w.uint(m.LastLog)
		w.bool(m.Success)
		w.bool(m.NoRetryBackoff)
	case *raft.RequestVoteRequest:
		w.header(m.RPCHeader)
		w.uint(m.Term)
		w.bytes(m.Candidate) //nolint:staticcheck // raft's own field
		w.uint(m.LastLogIndex)
		w.uint(m.LastLogTerm)
		w.bool(m.LeadershipTransfer)
	case *raft.RequestVoteResponse:
		w.header(m.RPCHeader)
		w.uint(m.Term)
		w.bytes(m.Peers) //nolint:staticcheck // raft's own field
		w.bool(m.Granted)
	case *raft.RequestPreVoteRequest:
		w.header(m.RPCHeader)
		w.uint(m.Term)
		w.uint(m.LastLogIndex)
		w.uint(m.LastLogTerm)
	case *raft.RequestPreVoteResponse:
		w.header(m.RPCHeader)
		w.uint(m.Term)
		w.bool(m.Granted)
	case *raft.InstallSnapshotRequest:
		w.header(m.RPCHeader)
		w.int(int64(m.SnapshotVersion))
		w.uint(m.Term)
		w.bytes(m.Leader) //nolint:staticcheck // raft's own field
		w.uint(m.LastLogIndex)
		w.uint(m.LastLogTerm)
		w.bytes(m.Peers) //nolint:staticcheck // raft's own field
		w.bytes(m.Configuration)
		w.uint(m.ConfigurationIndex)
		w.int(m.Size)
	case *raft.InstallSnapshotResponse:
		w.header(m.RPCHeader)
		w.uint(m.Term)
		w.bool(m.Success)
	case *raft.TimeoutNowRequest:
		w.header(m.RPCHeader)
	case *raft.TimeoutNowResponse:
		w.header(m.RPCHeader)
	default:
		return fmt.Errorf("raftmux: no encoding of %T", v)
	}
	return nil
}

// rbuf reads the encoding; the first problem sticks in err and every
// later read returns zero.
type rbuf struct {
	p   []byte
	err error
}

func (r *rbuf) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errWire, what)
	}
	r.p = nil
}

func (r *rbuf) uint() uint64 {
	v, n := binary.Uvarint(r.p)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.p = r.p[n:]
	return v
}

func (r *rbuf) int() int64 {
	v, n := binary.Varint(r.p)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.p = r.p[n:]
	return v
}

func (r *rbuf) bool() bool {
	if len(r.p) == 0 || r.p[0] > 1 {
		r.fail("bad boolean")
		return false
	}
	v := r.p[0] == 1
	r.p = r.p[1:]
	return v
}

// take returns the next n bytes (capacity n: an append copies).
func (r *rbuf) take(n uint64) []byte {
	if n > uint64(len(r.p)) {
		r.fail("length past the end")
		return nil
	}
	out := r.p[:n:n]
	r.p = r.p[n:]
	return out
}

func (r *rbuf) bytes() []byte {
	n := r.uint()
	if n == 0 || r.err != nil {
		return nil
	}
	return r.take(n - 1)
}

func (r *rbuf) string() string { return string(r.take(r.uint())) }

func (r *rbuf) time() time.Time {
	switch r.uint() {
	case 0:
		return time.Time{}
	case 1:
		return time.Unix(0, r.int()).UTC()
	}
	r.fail("bad time")
	return time.Time{}
}

func (r *rbuf) header() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersion(r.int()), ID: r.bytes(), Addr: r.bytes()}
}

func (r *rbuf) log(l *raft.Log) {
	*l = raft.Log{Index: r.uint(), Term: r.uint(), Type: raft.LogType(r.uint()), Data: r.bytes(), Extensions: r.bytes(), AppendedAt: r.time()}
}

// entries reads a count then that many log entries; a count over the
// bytes left (each entry takes at least six) is refused before anything
// is allocated.
func (r *rbuf) entries() []*raft.Log {
	n := r.uint()
	if n == 0 || r.err != nil {
		return nil
	}
	if n > uint64(len(r.p)) {
		r.fail("more entries than bytes")
		return nil
	}
	logs := make([]raft.Log, n) // one allocation for every entry
	out := make([]*raft.Log, n)
	for i := range logs {
		r.log(&logs[i])
		out[i] = &logs[i]
	}
	return out
}

// value reads into v: a *string, or a pointer to one of raft's RPC
// structs.
func (r *rbuf) value(v any) {
	switch m := v.(type) {
	case *string:
		*m = r.string()
	case *raft.AppendEntriesRequest:
		*m = raft.AppendEntriesRequest{RPCHeader: r.header(), Term: r.uint(), Leader: r.bytes(), PrevLogEntry: r.uint(),
			PrevLogTerm: r.uint(), Entries: r.entries(), LeaderCommitIndex: r.uint()}
	case *raft.AppendEntriesResponse:
		*m = raft.AppendEntriesResponse{RPCHeader: r.header(), Term: r.uint(), LastLog: r.uint(), Success: r.bool(), NoRetryBackoff: r.bool()}
	case *raft.RequestVoteRequest:
		*m = raft.RequestVoteRequest{RPCHeader: r.header(), Term: r.uint(), Candidate: r.bytes(), LastLogIndex: r.uint(),
			LastLogTerm: r.uint(), LeadershipTransfer: r.bool()}
	case *raft.RequestVoteResponse:
		*m = raft.RequestVoteResponse{RPCHeader: r.header(), Term: r.uint(), Peers: r.bytes(), Granted: r.bool()}
	case *raft.RequestPreVoteRequest:
		*m = raft.RequestPreVoteRequest{RPCHeader: r.header(), Term: r.uint(), LastLogIndex: r.uint(), LastLogTerm: r.uint()}
	case *raft.RequestPreVoteResponse:
		*m = raft.RequestPreVoteResponse{RPCHeader: r.header(), Term: r.uint(), Granted: r.bool()}
	case *raft.InstallSnapshotRequest:
		*m = raft.InstallSnapshotRequest{RPCHeader: r.header(), SnapshotVersion: raft.SnapshotVersion(r.int()), Term: r.uint(),
			Leader: r.bytes(), LastLogIndex: r.uint(), LastLogTerm: r.uint(), Peers: r.bytes(), Configuration: r.bytes(),
			ConfigurationIndex: r.uint(), Size: r.int()}
	case *raft.InstallSnapshotResponse:
		*m = raft.InstallSnapshotResponse{RPCHeader: r.header(), Term: r.uint(), Success: r.bool()}
	case *raft.TimeoutNowRequest:
		*m = raft.TimeoutNowRequest{RPCHeader: r.header()}
	case *raft.TimeoutNowResponse:
		*m = raft.TimeoutNowResponse{RPCHeader: r.header()}
	default:
		r.fail(fmt.Sprintf("no decoding of %T", v))
	}
}

// sizeHint is about the encoded size of v: enough that encoding an
// AppendEntries does not grow its buffer.
func sizeHint(vs []any) int {
	n := 64
	for _, v := range vs {
		switch m := v.(type) {
		case string:
			n += len(m) + 8
		case *raft.AppendEntriesRequest:
			n += len(m.ID) + len(m.Addr) + len(m.Leader) //nolint:staticcheck // raft's own field
			for _, l := range m.Entries {
				n += len(l.Data) + len(l.Extensions) + 48
			}
		case *raft.InstallSnapshotRequest:
			n += len(m.ID) + len(m.Addr) + len(m.Configuration) + len(m.Peers) //nolint:staticcheck // raft's own field
		}
	}
	return n
}
