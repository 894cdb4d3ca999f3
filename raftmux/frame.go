package raftmux

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A frame on a raftmux connection:
//
//	+-----------+----------+------+------------+---------------------+
//	| length    | group    | kind | request ID | payload (wire.go)   |
//	| uint32 BE | uint32 BE | 1 B | uint64 BE  | length-13 bytes     |
//	+-----------+----------+------+------------+---------------------+
//
// length counts every byte after itself (so it is at least 13). The
// request ID is the dialer's: a response carries the ID of its request.
const (
	frameLenSize    = 4
	frameHeaderSize = 4 + 1 + 8
	frameFullHeader = frameLenSize + frameHeaderSize

	// smallPayload is the largest payload read into a buffer of its claimed
	// size at once; a longer one grows its buffer as its bytes arrive, so a
	// peer that claims a large frame and sends nothing makes the reader
	// allocate little.
	smallPayload = 64 << 10
)

// kind is what a frame carries.
type kind uint8

// Requests use kinds below 0x80, responses 0x80 and up.
const (
	kindAppendEntries   kind = 1 // raft.AppendEntriesRequest, ordered per group
	kindHeartbeat       kind = 2 // raft.AppendEntriesRequest sent by raft's heartbeat loop
	kindRequestVote     kind = 3 // raft.RequestVoteRequest
	kindRequestPreVote  kind = 4 // raft.RequestPreVoteRequest
	kindTimeoutNow      kind = 5 // raft.TimeoutNowRequest
	kindInstallSnapshot kind = 6 // raft.InstallSnapshotRequest, snapshot connections only

	// kindResponse's payload is the responder's error string then the
	// response struct (wire.go), as the group's consumer answered.
	kindResponse kind = 0x80
	// kindError's payload is a transport error's text (unknown group, a
	// request that does not decode, an overloaded group): no response.
	kindError kind = 0x81
)

func (k kind) isRequest() bool {
	return k >= kindAppendEntries && k <= kindTimeoutNow
}

var (
	errFrameTooLarge = errors.New("raftmux: frame larger than the maximum frame size")
	errFrameShort    = errors.New("raftmux: frame length shorter than its header")
)

// frame is one decoded frame.
type frame struct {
	group   uint32
	kind    kind
	id      uint64
	payload []byte
}

// newFrameBuf returns a frame header (length left zero) for the payload to
// be appended to; finishFrame fills in the length.
func newFrameBuf(group uint32, k kind, id uint64, sizeHint int) []byte {
	b := make([]byte, frameFullHeader, frameFullHeader+sizeHint)
	binary.BigEndian.PutUint32(b[4:8], group)
	b[8] = byte(k)
	binary.BigEndian.PutUint64(b[9:17], id)
	return b
}

// finishFrame writes the length of the frame b into its header.
func finishFrame(b []byte) []byte {
	binary.BigEndian.PutUint32(b[0:4], uint32(len(b)-frameLenSize))
	return b
}

// setFrameID sets the request ID of the encoded frame b.
func setFrameID(b []byte, id uint64) {
	binary.BigEndian.PutUint64(b[9:17], id)
}

// appendFrame appends a whole frame to b.
func appendFrame(b []byte, group uint32, k kind, id uint64, payload []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(frameHeaderSize+len(payload)))
	b = binary.BigEndian.AppendUint32(b, group)
	b = append(b, byte(k))
	b = binary.BigEndian.AppendUint64(b, id)
	return append(b, payload...)
}

// frameReader reads frames of at most max payload bytes.
type frameReader struct {
	r   io.Reader
	max int
	hdr [frameFullHeader]byte
	// started, when set, is called (to arm a read deadline) once a frame
	// has begun: after its first byte, with the bytes its header still
	// needs, and again after its header, with its payload's length.
	started func(n int)
}

// next reads one frame. A length over the maximum fails with
// errFrameTooLarge before anything of the payload is read or allocated.
func (fr *frameReader) next() (frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:1]); err != nil {
		return frame{}, err
	}
	if fr.started != nil {
		fr.started(frameFullHeader - 1)
	}
	if _, err := io.ReadFull(fr.r, fr.hdr[1:]); err != nil {
		return frame{}, noEOF(err)
	}
	n := binary.BigEndian.Uint32(fr.hdr[0:4])
	if n < frameHeaderSize {
		return frame{}, fmt.Errorf("%w (%d)", errFrameShort, n)
	}
	size := int64(n) - frameHeaderSize
	if size > int64(fr.max) {
		return frame{}, fmt.Errorf("%w (%d > %d)", errFrameTooLarge, size, fr.max)
	}
	f := frame{
		group: binary.BigEndian.Uint32(fr.hdr[4:8]),
		kind:  kind(fr.hdr[8]),
		id:    binary.BigEndian.Uint64(fr.hdr[9:17]),
	}
	if fr.started != nil && size > 0 {
		fr.started(int(size))
	}
	p, err := readPayload(fr.r, int(size))
	if err != nil {
		return frame{}, err
	}
	f.payload = p
	return f, nil
}

// readPayload reads n bytes; above smallPayload its buffer grows with what
// arrives instead of being allocated at n up front.
func readPayload(r io.Reader, n int) ([]byte, error) {
	if n <= smallPayload {
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			return nil, noEOF(err)
		}
		return p, nil
	}
	var b bytes.Buffer
	b.Grow(smallPayload)
	if _, err := b.ReadFrom(io.LimitReader(r, int64(n))); err != nil {
		return nil, err
	}
	if b.Len() < n {
		return nil, io.ErrUnexpectedEOF
	}
	return b.Bytes(), nil
}

// noEOF turns an EOF inside a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
