package raftmux

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// codecs encodes raft's RPC structs into frames and decodes them (wire.go:
// an encoding of Quorate's own, without reflection).
type codecs struct{}

func newCodecs() codecs { return codecs{} }

// encodeFrame returns the frame of vs, each a string or a pointer to one
// of raft's RPC structs, in turn.
func (cs codecs) encodeFrame(group uint32, k kind, id uint64, vs ...interface{}) ([]byte, error) {
	w := wbuf{b: newFrameBuf(group, k, id, sizeHint(vs))}
	for _, v := range vs {
		if err := w.value(v); err != nil {
			return nil, err
		}
	}
	return finishFrame(w.b), nil
}

// decode decodes payload into vs in turn, each a *string or a pointer to
// one of raft's RPC structs; the payload must hold them exactly.
func (cs codecs) decode(payload []byte, vs ...interface{}) error {
	r := rbuf{p: payload}
	for _, v := range vs {
		r.value(v)
	}
	if r.err == nil && len(r.p) != 0 {
		r.fail(fmt.Sprintf("%d bytes after the message", len(r.p)))
	}
	return r.err
}

// decodeRequest decodes a request frame's payload into raft's struct for
// its kind.
func (cs codecs) decodeRequest(k kind, payload []byte) (interface{}, error) {
	var cmd interface{}
	switch k {
	case kindAppendEntries, kindHeartbeat:
		cmd = &raft.AppendEntriesRequest{}
	case kindRequestVote:
		cmd = &raft.RequestVoteRequest{}
	case kindRequestPreVote:
		cmd = &raft.RequestPreVoteRequest{}
	case kindTimeoutNow:
		cmd = &raft.TimeoutNowRequest{}
	case kindInstallSnapshot:
		cmd = &raft.InstallSnapshotRequest{}
	default:
		return nil, fmt.Errorf("raftmux: unknown request kind %d", k)
	}
	if err := cs.decode(payload, cmd); err != nil {
		return nil, err
	}
	return cmd, nil
}

// isHeartbeat reports whether req is a heartbeat by the test a
// raft.NetworkTransport applies to choose its heartbeat fast path.
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	leaderAddr := req.Addr
	if len(leaderAddr) == 0 {
		leaderAddr = req.Leader //nolint:staticcheck // older peers set only Leader
	}
	return req.Term != 0 && leaderAddr != nil &&
		req.PrevLogEntry == 0 && req.PrevLogTerm == 0 &&
		len(req.Entries) == 0 && req.LeaderCommitIndex == 0
}

// encodeAppend encodes an AppendEntries request. When the encoding is
// larger than max it drops the later half of args.Entries, in args itself,
// until it fits: raft reads the request back (its replication advances by
// the entries the request holds), so the follower gets a prefix now and
// the rest in the next request. A single entry that does not fit fails.
func (cs codecs) encodeAppend(group uint32, k kind, args *raft.AppendEntriesRequest, max int) ([]byte, error) {
	for {
		b, err := cs.encodeFrame(group, k, 0, args)
		if err != nil {
			return nil, err
		}
		if len(b)-frameFullHeader <= max {
			return b, nil
		}
		if len(args.Entries) <= 1 {
			return nil, fmt.Errorf("%w: AppendEntries of %d bytes", errFrameTooLarge, len(b)-frameFullHeader)
		}
		args.Entries = args.Entries[:len(args.Entries)/2]
	}
}
