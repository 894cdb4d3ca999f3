package peermux

import (
	"bytes"
	"errors"
	"io"
	"math"
	"testing"
)

func TestMuxHeaderRoundTrip(t *testing.T) {
	for _, ch := range []uint64{0, 1, 127, 128, 300, math.MaxUint32, ChannelForward, math.MaxUint64} {
		hdr := appendMuxHeader(nil, ch)
		if hdr[0] != muxMagic || len(hdr) > muxMaxHeaderLen {
			t.Fatalf("channel %d: header % x", ch, hdr)
		}
		r := bytes.NewReader(append(hdr, "payload"...))
		got, err := readMuxHeader(r)
		if err != nil || got != ch {
			t.Fatalf("channel %d: read %d, %v", ch, got, err)
		}
		if rest, _ := io.ReadAll(r); string(rest) != "payload" {
			t.Fatalf("channel %d: reading the header consumed the payload: left %q", ch, rest)
		}
	}
	if got := appendMuxHeader(nil, 300); !bytes.Equal(got, []byte{muxMagic, 0xac, 0x02}) {
		t.Fatalf("header of channel 300 is % x, want a7 ac 02", got)
	}
}

func TestMuxHeaderRejectsGarbage(t *testing.T) {
	tooLong := append([]byte{muxMagic}, bytes.Repeat([]byte{0xff}, 11)...)
	over64 := append(append([]byte{muxMagic}, bytes.Repeat([]byte{0xff}, 9)...), 0x02)
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, io.EOF},
		{"raft RPC byte", []byte{0x00, 0x01}, errMuxBadMagic},
		{"HTTP", []byte("GET / HTTP/1.1\r\n"), errMuxBadMagic},
		{"TLS", []byte{0x16, 0x03, 0x01}, errMuxBadMagic},
		{"varint over 10 bytes", tooLong, errMuxChannelID},
		{"varint over 64 bits", over64, errMuxChannelID},
		{"magic only", []byte{muxMagic}, io.EOF},
		{"truncated varint", []byte{muxMagic, 0x80, 0x80}, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		if ch, err := readMuxHeader(bytes.NewReader(tt.in)); !errors.Is(err, tt.want) {
			t.Errorf("%s: got channel %d, err %v; want %v", tt.name, ch, err, tt.want)
		}
	}
}

func TestMuxHeaderCarriesClusterID(t *testing.T) {
	id := newTestClusterID()
	for _, ch := range []uint64{0, 300, ChannelForward} {
		hdr := AppendHeader(nil, ch, id)
		if hdr[0] != muxMagicCluster || len(hdr) > muxMaxHeaderLen {
			t.Fatalf("channel %d: header % x", ch, hdr)
		}
		r := bytes.NewReader(append(hdr, "payload"...))
		got, cluster, err := readPeerHeader(r)
		if err != nil || got != ch || cluster != id {
			t.Fatalf("channel %d: read %d, %q, %v", ch, got, cluster, err)
		}
		if rest, _ := io.ReadAll(r); string(rest) != "payload" {
			t.Fatalf("reading the header consumed the payload: left %q", rest)
		}
	}
	// Without an ID the header is the older layout.
	if hdr := AppendHeader(nil, 5, ""); !bytes.Equal(hdr, []byte{muxMagic, 5}) {
		t.Fatalf("header without a cluster ID: % x", hdr)
	}
	if _, _, err := readPeerHeader(bytes.NewReader([]byte{muxMagicCluster, 5, 1, 2})); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated cluster ID: %v", err)
	}
}
