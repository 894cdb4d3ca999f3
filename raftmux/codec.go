package raftmux

import (
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// codecs holds the msgpack handles of a Hub: the encoding is the one a
// raft.NetworkTransport uses by default (time.Time in the format every
// decoder reads), so every field of raft's structs survives a trip.
//
// Encoders and decoders are costly to make and are reused through pools.
type codecs struct {
	encoders *sync.Pool
	decoders *sync.Pool
}

func newCodecs() codecs {
	enc := &codec.MsgpackHandle{}
	enc.TimeNotBuiltin = true
	dec := &codec.MsgpackHandle{}
	return codecs{
		encoders: &sync.Pool{New: func() any { return codec.NewEncoder(io.Discard, enc) }},
		decoders: &sync.Pool{New: func() any { return codec.NewDecoderBytes([]byte{}, dec) }},
	}
}

// encodeFrame returns the frame (request ID left 0) of v.
func (cs codecs) encodeFrame(group uint32, k kind, id uint64, vs ...interface{}) ([]byte, error) {
	b := newFrameBuf(group, k, id, 128)
	enc := cs.encoders.Get().(*codec.Encoder)
	defer func() {
		enc.Reset(io.Discard)
		cs.encoders.Put(enc)
	}()
	enc.Reset(b)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return nil, fmt.Errorf("raftmux: encode: %w", err)
		}
	}
	return finishFrame(b.Bytes()), nil
}

// decode decodes payload into vs in turn.
func (cs codecs) decode(payload []byte, vs ...interface{}) error {
	dec := cs.decoders.Get().(*codec.Decoder)
	defer func() {
		dec.ResetBytes([]byte{})
		cs.decoders.Put(dec)
	}()
	dec.ResetBytes(payload)
	for _, v := range vs {
		if err := dec.Decode(v); err != nil {
			return fmt.Errorf("raftmux: decode: %w", err)
		}
	}
	return nil
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
