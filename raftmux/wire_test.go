package raftmux

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// fill sets every field of the struct v points to, recursively, to a
// value of its own (counted from *n), so that a field the encoding
// forgets comes back different.
func fill(t *testing.T, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Unix(int64(*n), int64(*n)).UTC()))
			return
		}
		for i := range v.NumField() {
			fill(t, v.Field(i), n)
		}
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		v.SetUint(uint64(*n))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(-int64(*n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		switch v.Type().Elem().Kind() {
		case reflect.Uint8:
			v.SetBytes([]byte{byte(*n), 0, byte(*n >> 8)})
		case reflect.Pointer:
			s := reflect.MakeSlice(v.Type(), 2, 2)
			for i := range 2 {
				e := reflect.New(v.Type().Elem().Elem())
				fill(t, e.Elem(), n)
				s.Index(i).Set(e)
			}
			v.Set(s)
		default:
			t.Fatalf("no filler for %s", v.Type())
		}
	default:
		t.Fatalf("no filler for %s", v.Type())
	}
}

// rpcStructs are raft's RPC structs, each kind the transport carries.
func rpcStructs() []any {
	return []any{&raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{}, &raft.RequestVoteRequest{}, &raft.RequestVoteResponse{},
		&raft.RequestPreVoteRequest{}, &raft.RequestPreVoteResponse{}, &raft.InstallSnapshotRequest{}, &raft.InstallSnapshotResponse{},
		&raft.TimeoutNowRequest{}, &raft.TimeoutNowResponse{}}
}

// Every field of every RPC struct survives a trip, filled or zero, as a
// request and as a response behind an error text; every proper prefix of
// an encoding and any trailing byte are refused, without a panic.
func TestWireRoundTripsEveryField(t *testing.T) {
	cs := newCodecs()
	for _, proto := range rpcStructs() {
		typ := reflect.TypeOf(proto).Elem()
		full := reflect.New(typ)
		n := 0
		fill(t, full.Elem(), &n)
		for _, in := range []any{full.Interface(), reflect.New(typ).Interface()} {
			b, err := cs.encodeFrame(7, kindResponse, 9, "an error", in)
			if err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			payload := b[frameFullHeader:]
			out := reflect.New(typ).Interface()
			var errText string
			if err := cs.decode(payload, &errText, out); err != nil {
				t.Fatalf("%s: decode: %v", typ, err)
			}
			if errText != "an error" || !reflect.DeepEqual(in, out) {
				t.Errorf("%s: %q %+v came back as %q %+v", typ, "an error", in, errText, out)
			}
			for i := range len(payload) {
				var s string
				if err := cs.decode(payload[:i], &s, reflect.New(typ).Interface()); !errors.Is(err, errWire) {
					t.Fatalf("%s: a prefix of %d of %d bytes decoded: %v", typ, i, len(payload), err)
				}
			}
			var s string
			if err := cs.decode(append(payload[:len(payload):len(payload)], 0), &s, reflect.New(typ).Interface()); !errors.Is(err, errWire) {
				t.Errorf("%s: a trailing byte was accepted: %v", typ, err)
			}
		}
	}
}

// Nil and empty byte slices and a zero time come back as they went.
func TestWireKeepsNilEmptyAndZeroTime(t *testing.T) {
	cs := newCodecs()
	in := &raft.AppendEntriesRequest{Leader: []byte{}, Entries: []*raft.Log{{Data: []byte{}}, {Extensions: []byte{}, AppendedAt: time.Unix(0, 5)}}}
	b, err := cs.encodeFrame(1, kindAppendEntries, 0, in)
	if err != nil {
		t.Fatal(err)
	}
	out := &raft.AppendEntriesRequest{}
	if err := cs.decode(b[frameFullHeader:], out); err != nil {
		t.Fatal(err)
	}
	if out.Leader == nil || out.RPCHeader.ID != nil || out.Entries[0].Data == nil || out.Entries[0].Extensions != nil || //nolint:staticcheck // raft's field
		!out.Entries[0].AppendedAt.IsZero() || out.Entries[1].Extensions == nil || !out.Entries[1].AppendedAt.Equal(time.Unix(0, 5)) {
		t.Errorf("came back as %+v, entries %+v %+v", out, out.Entries[0], out.Entries[1])
	}
}

// A count of entries over the bytes left is refused before it allocates.
func TestWireRefusesHugeEntryCount(t *testing.T) {
	w := wbuf{}
	_ = w.value(&raft.AppendEntriesRequest{})
	// Header (3 fields), term, leader, prev entry, prev term, then the count.
	p := w.b[:7]
	p = append(p, 0xff, 0xff, 0xff, 0xff, 0x0f)
	if err := newCodecs().decode(p, &raft.AppendEntriesRequest{}); !errors.Is(err, errWire) {
		t.Errorf("a count of 2^32 entries in %d bytes: %v", len(p), err)
	}
}

// BenchmarkWire encodes and decodes an AppendEntries of 16 entries of
// 200 bytes, and its response, beside raft's own msgpack encoding (what a
// raft.NetworkTransport and this transport used before) in the same run.
func BenchmarkWire(b *testing.B) {
	entries := make([]*raft.Log, 16)
	for i := range entries {
		entries[i] = &raft.Log{Index: uint64(1000 + i), Term: 7, Type: raft.LogCommand, Data: make([]byte, 200), AppendedAt: time.Now()}
	}
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n1"), Addr: []byte("10.0.0.1:7170")},
		Term: 7, PrevLogEntry: 999, PrevLogTerm: 7, Entries: entries, LeaderCommitIndex: 998}
	resp := &raft.AppendEntriesResponse{RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n2"), Addr: []byte("10.0.0.2:7170")},
		Term: 7, LastLog: 1015, Success: true}
	b.Run("quorate", func(b *testing.B) {
		cs := newCodecs()
		b.ReportAllocs()
		for b.Loop() {
			f, _ := cs.encodeFrame(1, kindAppendEntries, 0, req)
			var in raft.AppendEntriesRequest
			if err := cs.decode(f[frameFullHeader:], &in); err != nil {
				b.Fatal(err)
			}
			r, _ := cs.encodeFrame(1, kindResponse, 1, "", resp)
			var s string
			var out raft.AppendEntriesResponse
			if err := cs.decode(r[frameFullHeader:], &s, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("msgpack", func(b *testing.B) {
		h := &codec.MsgpackHandle{}
		h.TimeNotBuiltin = true
		enc, dec := codec.NewEncoder(io.Discard, h), codec.NewDecoderBytes(nil, h)
		b.ReportAllocs()
		for b.Loop() {
			var buf bytes.Buffer
			enc.Reset(&buf)
			if err := enc.Encode(req); err != nil {
				b.Fatal(err)
			}
			var in raft.AppendEntriesRequest
			dec.ResetBytes(buf.Bytes())
			if err := dec.Decode(&in); err != nil {
				b.Fatal(err)
			}
			var rb bytes.Buffer
			enc.Reset(&rb)
			if err := enc.Encode(""); err != nil {
				b.Fatal(err)
			}
			if err := enc.Encode(resp); err != nil {
				b.Fatal(err)
			}
			var s string
			var out raft.AppendEntriesResponse
			dec.ResetBytes(rb.Bytes())
			if err := dec.Decode(&s); err != nil {
				b.Fatal(err)
			}
			if err := dec.Decode(&out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
