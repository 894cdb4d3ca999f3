package peermux

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The peer multiplexer lets every service between nodes — the Raft
// connections every hosted group shares (package raftmux), and the
// forwarding channel (requests forwarded to a group's leader, and
// PeerService) — share one listener and one address. Each TCP connection
// carries one channel, named once, by a header the dialer writes first:
//
//	+-------+--------------------------+------------+---------------------+
//	| magic | channel ID               | cluster ID | the channel's own   |
//	| 0xA8  | unsigned varint, 1..10 B | 16 bytes   | bytes (for          |
//	|       | (encoding/binary)        |            | ChannelRaft: the    |
//	|       |                          |            | groups' Raft RPCs)  |
//	+-------+--------------------------+------------+---------------------+
//
// A dialer that knows no cluster ID yet (a node joining, before it learned
// its cluster's) sends magic 0xA7 and no cluster ID. A listener that knows its cluster's
// ID refuses a header with another ID or none (cluster.go). The header
// and the first byte after it must arrive within the handshake timeout;
// only then is the connection handed to its channel (peerconn.go).
//
// A mux with a peer secret (Options.Secret) sends magic 0xA9 instead: the
// channel ID, the cluster ID (16 zero bytes when it knows none) and a
// 32-byte nonce, and the two ends then prove the secret to each other
// before the channel's bytes (auth.go). Such a mux refuses the other
// headers, and a mux without a secret refuses this one.
//
// The magic byte doubles as the header's version: a different layout gets a
// different byte. It is far from Raft's own first bytes (RPC types 0–5), from
// TLS (0x16) and from ASCII, so a pre-mux Raft peer, an HTTP client or a port
// scanner is turned away at the first byte, and a mux header sent to a
// pre-mux Raft listener fails there as an unknown RPC type. The server sends
// no reply: a connection it rejects (bad magic, a varint longer than 10 bytes
// or over 64 bits, an unknown channel, another cluster, no full header and
// first byte within the handshake timeout) is closed, which the dialer sees
// as a failed RPC — Raft retries, so a group whose replica starts here a moment after its peers
// does not need the dials to wait for it.
//
// Channel IDs: the node's services are numbered from 1<<32 up; no channel
// has a lower ID.
const (
	muxMagic byte = 0xA7

	// muxMagicCluster opens the header of a dialer that knows its cluster
	// ID: the magic, the channel ID, then the 16 bytes of the cluster ID
	// (cluster.go). A dialer that knows none sends muxMagic's header.
	muxMagicCluster byte = 0xA8

	// muxMagicAuth opens the header of a dialer that authenticates with
	// the cluster's peer secret: the magic, the channel ID, the cluster ID
	// (zeros for none) and the dialer's nonce (auth.go).
	muxMagicAuth byte = 0xA9

	// ClusterIDLen is the length of a cluster ID in bytes (its hex form,
	// which the mux's methods take, has twice as many digits).
	ClusterIDLen = 16

	// ChannelForward is the channel of follower→leader forwarding.
	ChannelForward uint64 = 1 << 32

	// ChannelRaft carries a node's shared Raft connection to a peer: every
	// hosted group's RPCs in frames that name the group (package raftmux).
	ChannelRaft uint64 = 1<<32 + 1

	// ChannelRaftSnapshot carries one InstallSnapshot per connection
	// (package raftmux), apart from the shared connection.
	ChannelRaftSnapshot uint64 = 1<<32 + 2

	// muxHeaderTimeout is how long an accepted connection may take to send
	// its header and the first byte after it (Options.HandshakeTimeout).
	muxHeaderTimeout = 5 * time.Second

	// muxIdleTimeout closes an accepted connection that has sent nothing
	// for this long (Options.IdleTimeout).
	muxIdleTimeout = 2 * time.Minute

	// muxMaxConns caps the connections the peer port holds open at once: a
	// node needs a few per peer (the shared Raft connection, snapshots in
	// flight, forwarding), so a cluster of any size stays well under it.
	muxMaxConns = 16384

	// muxMaxHandshakesPerIP caps the connections from one IP that have not
	// finished their handshake: a peer's connections finish it in a round
	// trip, so only a flood reaches it.
	muxMaxHandshakesPerIP = 1024

	// muxMaxHeaderLen is the longest header: the magic byte, a 64-bit
	// uvarint, a cluster ID and a nonce.
	muxMaxHeaderLen = 1 + binary.MaxVarintLen64 + ClusterIDLen + authNonceLen

	// muxAcceptQueue is how many handshaken connections may wait for a
	// channel's Accept.
	muxAcceptQueue = 16
)

var (
	errMuxBadMagic  = errors.New("peermux: peer connection: not a Quorate peer header")
	errMuxChannelID = errors.New("peermux: peer connection: channel ID is not a 64-bit uvarint")
	errMuxClosed    = fmt.Errorf("peermux: peer mux closed: %w", net.ErrClosed)
	errMuxInUse     = errors.New("peermux: peer mux: channel already has a listener")
)

// appendMuxHeader appends the header that opens a connection on channel ch.
func appendMuxHeader(b []byte, ch uint64) []byte {
	return binary.AppendUvarint(append(b, muxMagic), ch)
}

// AppendHeader appends the header that opens a connection on channel ch
// from a node of cluster (a cluster ID in hex, or "" when the node knows
// none), as Dial writes it.
func AppendHeader(b []byte, ch uint64, cluster string) []byte {
	raw, err := hex.DecodeString(cluster)
	if err != nil || len(raw) != ClusterIDLen {
		return appendMuxHeader(b, ch)
	}
	return append(binary.AppendUvarint(append(b, muxMagicCluster), ch), raw...)
}

// peerHeader is what a connection's header says.
type peerHeader struct {
	ch      uint64
	cluster string // the dialer's cluster ID in hex; "" for none
	auth    bool   // muxMagicAuth: rawID and nonce are set, and auth.go's exchange follows
	rawID   [ClusterIDLen]byte
	nonce   [authNonceLen]byte
}

// authHeader returns the header a mux with a peer secret opens a
// connection on channel ch with, from a node of cluster (a cluster ID in
// hex, or "" when it knows none), with a fresh nonce.
func authHeader(ch uint64, cluster string) peerHeader {
	h := peerHeader{ch: ch, auth: true}
	if raw, err := hex.DecodeString(cluster); err == nil && len(raw) == ClusterIDLen {
		copy(h.rawID[:], raw)
		h.cluster = hex.EncodeToString(raw)
	}
	_, _ = rand.Read(h.nonce[:]) // never fails (crypto/rand)
	return h
}

// appendAuth appends h's header in muxMagicAuth's layout.
func (h *peerHeader) appendAuth(b []byte) []byte {
	b = binary.AppendUvarint(append(b, muxMagicAuth), h.ch)
	return append(append(b, h.rawID[:]...), h.nonce[:]...)
}

// readMuxHeader reads a connection's header from r one byte at a time, so
// that nothing past it is consumed, and returns the channel ID.
func readMuxHeader(r io.Reader) (uint64, error) {
	ch, _, err := readPeerHeader(r)
	return ch, err
}

// readPeerHeader reads a connection's header like readMuxHeader and also
// returns the dialer's cluster ID ("" when its header carries none).
func readPeerHeader(r io.Reader) (uint64, string, error) {
	var h peerHeader
	if err := readHeader(r, &h); err != nil {
		return 0, "", err
	}
	return h.ch, h.cluster, nil
}

// readHeader reads a connection's header into h without consuming
// anything past it; on error h is left zero.
func readHeader(r io.Reader, h *peerHeader) error {
	br := byteReader{r: r}
	magic, err := br.ReadByte()
	if err != nil {
		return err
	}
	if magic != muxMagic && magic != muxMagicCluster && magic != muxMagicAuth {
		return fmt.Errorf("%w (first byte %#02x)", errMuxBadMagic, magic)
	}
	ch, err := binary.ReadUvarint(&br)
	if err != nil {
		if br.err != nil { // EOF, a deadline, a reset: not the varint's fault
			return err
		}
		return fmt.Errorf("%w: %v", errMuxChannelID, err)
	}
	if magic == muxMagic {
		*h = peerHeader{ch: ch}
		return nil
	}
	var raw [ClusterIDLen]byte
	if _, err := io.ReadFull(r, raw[:]); err != nil {
		return err
	}
	got := peerHeader{ch: ch, rawID: raw}
	if magic == muxMagicAuth {
		if _, err := io.ReadFull(r, got.nonce[:]); err != nil {
			return err
		}
		got.auth = true
	}
	if magic == muxMagicCluster || raw != ([ClusterIDLen]byte{}) {
		got.cluster = hex.EncodeToString(raw[:])
	}
	*h = got
	return nil
}

// byteReader is an io.ByteReader without read-ahead.
type byteReader struct {
	r   io.Reader
	buf [1]byte
	err error // the underlying reader's error, if any
}

func (b *byteReader) ReadByte() (byte, error) {
	if _, err := io.ReadFull(b.r, b.buf[:]); err != nil {
		b.err = err
		return 0, err
	}
	return b.buf[0], nil
}
