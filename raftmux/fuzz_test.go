package raftmux

import (
	"bytes"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzFrameReader feeds arbitrary bytes to the frame reader and the
// request decoder: no panic, no payload over the maximum, and every frame
// read re-encodes to the bytes it came from.
func FuzzFrameReader(f *testing.F) {
	cs := newCodecs()
	vote, _ := cs.encodeFrame(3, kindRequestVote, 9, &raft.RequestVoteRequest{Term: 2, LastLogIndex: 5})
	app, _ := cs.encodeFrame(1, kindAppendEntries, 1, &raft.AppendEntriesRequest{Term: 1, Entries: []*raft.Log{{Index: 1, Data: []byte("x")}}})
	f.Add(vote)
	f.Add(append(app, vote...))
	f.Add(appendFrame(nil, 1, kindError, 2, []byte("no")))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 1})
	const max = 4096
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := frameReader{r: bytes.NewReader(in), max: max}
		off := 0
		for {
			fm, err := fr.next()
			if err != nil {
				return
			}
			if len(fm.payload) > max {
				t.Fatalf("payload of %d bytes over the maximum %d", len(fm.payload), max)
			}
			enc := appendFrame(nil, fm.group, fm.kind, fm.id, fm.payload)
			if !bytes.Equal(enc, in[off:off+len(enc)]) {
				t.Fatalf("frame re-encodes to %x, read from %x", enc, in[off:off+len(enc)])
			}
			off += len(enc)
			if fm.kind.isRequest() {
				_, _ = cs.decodeRequest(fm.kind, fm.payload)
			}
		}
	})
}
