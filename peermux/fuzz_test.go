package peermux

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"os"
	"runtime"
	"testing"
)

// countingReader is a finite reader that records how far into the
// connection its callers asked to read (what they had read plus the buffer
// they asked to fill), so a decoder that sized a buffer from a length the
// bytes claim (and read into it) shows; once data is exhausted it fails
// with end.
type countingReader struct {
	data      []byte
	end       error
	read      int
	requested int
}

func (r *countingReader) Read(p []byte) (int, error) {
	r.requested = max(r.requested, r.read+len(p))
	if len(r.data) == 0 {
		return 0, r.end
	}
	n := copy(p, r.data)
	r.data, r.read = r.data[n:], r.read+n
	return n, nil
}

// maxHeaderAllocBytes bounds what reading one header may allocate: a
// cluster ID, its hex form and an error message, far below anything a
// decoder trusting a claimed length would take.
const maxHeaderAllocBytes = 64 << 10

// FuzzPeerHeader checks the peer port's connection header, the first bytes
// any peer (or anyone reaching the port) sends: reading arbitrary bytes
// never panics, never asks the connection for more than a header's worth
// of bytes nor allocates more than a small bound, consumes nothing past the
// header, and fails only with the header's own errors or the reader's; what
// it accepts re-encodes to a header that reads back the same. Independently,
// every header AppendHeader writes reads back identical.
func FuzzPeerHeader(f *testing.F) {
	id := "00112233445566778899aabbccddeeff"
	for _, seed := range []struct {
		data    []byte
		ch      uint64
		cluster string
	}{
		{AppendHeader(nil, ChannelForward, id), ChannelForward, id},
		{AppendHeader(nil, 0, ""), 0, ""},
		{AppendHeader(nil, 7, id), 7, "AABBCCDDEEFF00112233445566778899"},
		{append(AppendHeader(nil, math.MaxUint64, id), "raft"...), math.MaxUint64, id},
		{appendMuxHeader(nil, 300), 300, "not hex"},
		{AppendHeader(nil, 1, id)[:10], 1, id[:30]},                          // truncated cluster ID
		{[]byte{muxMagic, 0x80, 0x80}, 2, ""},                                // truncated varint
		{append([]byte{muxMagic}, bytes.Repeat([]byte{0xff}, 11)...), 3, ""}, // varint too long
		{append(append([]byte{muxMagicCluster}, bytes.Repeat([]byte{0xff}, 9)...), 0x02), 4, ""},
		{append(append([]byte{muxMagicCluster}, 0x80, 0x00), bytes.Repeat([]byte{1}, 40)...), 5, id + "00"}, // non-minimal varint, oversized tail
		{[]byte("GET / HTTP/1.1\r\n"), 6, ""},
		{[]byte{0x16, 0x03, 0x01, 0x02, 0x00}, 8, ""},
		{nil, 9, ""},
		{authSeed(10, id), 10, id},                     // an authenticating header
		{authSeed(11, "")[:30], 11, ""},                // one cut in its nonce
		{append(authSeed(12, ""), "proof"...), 12, ""}, // no cluster ID, the exchange after it
	} {
		f.Add(seed.data, false, seed.ch, seed.cluster)
		f.Add(seed.data, true, seed.ch, seed.cluster)
	}
	f.Fuzz(func(t *testing.T, data []byte, timeout bool, ch uint64, cluster string) {
		checkHeaderDecode(t, data, timeout)
		checkHeaderRoundTrip(t, ch, cluster)
	})
}

// authSeed is an authenticating header (muxMagicAuth's) of ch and cluster.
func authSeed(ch uint64, cluster string) []byte {
	h := authHeader(ch, cluster)
	return h.appendAuth(nil)
}

// checkHeaderDecode reads a header from data, then a reader that fails
// (io.EOF, or a deadline with timeout).
func checkHeaderDecode(t *testing.T, data []byte, timeout bool) {
	end := io.EOF
	if timeout {
		end = os.ErrDeadlineExceeded
	}
	r := &countingReader{data: data, end: end}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ch, cluster, err := readPeerHeader(r)
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > maxHeaderAllocBytes {
		t.Fatalf("reading a header from % x allocated %d bytes", data, alloc)
	}
	if r.requested > muxMaxHeaderLen {
		t.Fatalf("reading a header from % x asked the connection for %d bytes (a header is at most %d)", data, r.requested, muxMaxHeaderLen)
	}
	consumed := len(data) - len(r.data)
	if ch2, err2 := readMuxHeader(bytes.NewReader(data)); (err == nil) != (err2 == nil) || (err == nil && ch2 != ch) {
		t.Fatalf("readMuxHeader(% x) = %d, %v; readPeerHeader = %d, %v", data, ch2, err2, ch, err)
	}
	if err != nil {
		switch {
		case errors.Is(err, errMuxBadMagic), errors.Is(err, errMuxChannelID):
		case timeout && errors.Is(err, os.ErrDeadlineExceeded):
		case !timeout && (err == io.EOF || err == io.ErrUnexpectedEOF):
		default:
			t.Fatalf("reading a header from % x: untyped error %v (%T)", data, err, err)
		}
		if ch != 0 || cluster != "" {
			t.Fatalf("reading a header from % x failed (%v) but returned channel %d, cluster %q", data, err, ch, cluster)
		}
		return
	}
	if consumed > muxMaxHeaderLen {
		t.Fatalf("the header of % x took %d bytes (at most %d)", data, consumed, muxMaxHeaderLen)
	}
	if data[0] == muxMagic && cluster != "" || data[0] == muxMagicCluster && len(cluster) != 2*ClusterIDLen ||
		data[0] == muxMagicAuth && cluster != "" && len(cluster) != 2*ClusterIDLen {
		t.Fatalf("header % x: magic %#02x with cluster %q", data[:consumed], data[0], cluster)
	}
	// A channel ID may arrive as a non-minimal varint: the header written
	// for what was read is the same or shorter, and reads back the same.
	again := AppendHeader(nil, ch, cluster)
	if len(again) > consumed {
		t.Fatalf("header % x re-encodes longer: % x", data[:consumed], again)
	}
	if ch2, cluster2, err := readPeerHeader(bytes.NewReader(again)); err != nil || ch2 != ch || cluster2 != cluster {
		t.Fatalf("header % x (channel %d, cluster %q) re-encoded as % x reads %d, %q, %v", data[:consumed], ch, cluster, again, ch2, cluster2, err)
	}
}

// checkHeaderRoundTrip writes the header of (ch, cluster) after a prefix,
// with a payload after it, and reads it back.
func checkHeaderRoundTrip(t *testing.T, ch uint64, cluster string) {
	prefix := []byte("prefix")
	hdr := AppendHeader(append([]byte(nil), prefix...), ch, cluster)
	if !bytes.HasPrefix(hdr, prefix) {
		t.Fatalf("AppendHeader overwrote what it appends to: % x", hdr)
	}
	hdr = hdr[len(prefix):]
	if len(hdr) > muxMaxHeaderLen {
		t.Fatalf("header of channel %d, cluster %q is %d bytes (at most %d)", ch, cluster, len(hdr), muxMaxHeaderLen)
	}
	want := ""
	if raw, err := hex.DecodeString(cluster); err == nil && len(raw) == ClusterIDLen {
		want = hex.EncodeToString(raw)
	}
	r := bytes.NewReader(append(hdr, "payload"...))
	got, gotCluster, err := readPeerHeader(r)
	if err != nil || got != ch || gotCluster != want {
		t.Fatalf("header % x of channel %d, cluster %q reads back %d, %q, %v (want cluster %q)", hdr, ch, cluster, got, gotCluster, err, want)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "payload" {
		t.Fatalf("reading header % x consumed the payload: left %q", hdr, rest)
	}
}
