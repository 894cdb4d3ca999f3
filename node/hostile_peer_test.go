package node_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
)

// hostilePeer is a client of the peer port that does not follow the
// protocol: it sends send, then nothing, and the node must close the
// connection within within (measured from the end of send).
type hostilePeer struct {
	name   string
	send   []byte
	within time.Duration
}

// runHostilePeers runs every case against node 0's peer port at once, each
// on its own connection, and then checks that the cluster still serves.
func runHostilePeers(t *testing.T, c *nodetest.Cluster, cases []hostilePeer) {
	t.Helper()
	addr := c.Node(0).RaftAddr()
	var wg sync.WaitGroup
	for _, tc := range cases {
		wg.Go(func() {
			cn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Errorf("%s: dial: %v", tc.name, err)
				return
			}
			defer cn.Close()
			if len(tc.send) > 0 {
				if _, err := cn.Write(tc.send); err != nil {
					t.Errorf("%s: write: %v", tc.name, err)
					return
				}
			}
			start := time.Now()
			slack := 5 * time.Second // a busy machine
			cn.SetReadDeadline(start.Add(tc.within + slack))
			n, err := cn.Read(make([]byte, 64))
			var ne net.Error
			switch {
			case n > 0:
				t.Errorf("%s: the node answered %d bytes; want the connection closed", tc.name, n)
			case err == nil, errors.As(err, &ne) && ne.Timeout():
				t.Errorf("%s: still open %v later, want it closed within %v", tc.name, time.Since(start), tc.within)
			default:
				t.Logf("%s: closed after %v (%v)", tc.name, time.Since(start).Round(time.Millisecond), err)
			}
		})
	}
	wg.Wait()
	serving(t, c, "p")
}

func TestHostilePeers(t *testing.T) {
	const handshake, idle = 500 * time.Millisecond, time.Second
	c := nodetest.NewClusterWith(t, nodetest.Options{Configure: func(i int, cfg *node.Config) {
		cfg.PeerHandshakeTimeout, cfg.PeerIdleTimeout = handshake, idle
		cfg.RequestTimeout = time.Second // the forwarding channel's idle timeout: 2 s
	}})
	applyPolicy(t, c, "p", 1_000_000, time.Second, 1_000_000)
	const magic, magicID = 0xA7, 0xA8
	cluster := clusterIDOfNode(t, c, 0)
	id, _ := hex.DecodeString(cluster)
	other := bytes.Repeat([]byte{0x5a}, 16)
	hdr := func(ch []byte, id []byte) []byte { return append(append([]byte{magicID}, ch...), id...) }
	meta, fwd := []byte{0}, []byte{0x80, 0x80, 0x80, 0x80, 0x10} // channels 0 and 1<<32
	raft := []byte{0x81, 0x80, 0x80, 0x80, 0x10}                 // channel 1<<32 + 1
	runHostilePeers(t, c, []hostilePeer{
		{name: "connects and sends nothing", within: handshake},
		{name: "magic byte only", send: []byte{magicID}, within: handshake},
		{name: "half a channel ID", send: []byte{magicID, 0x80}, within: handshake},
		{name: "half a cluster ID", send: append([]byte{magicID, 0}, id[:8]...), within: handshake},
		{name: "meta group header, then nothing", send: hdr(meta, id), within: handshake},
		{name: "forwarding header, then nothing", send: hdr(fwd, id), within: handshake},
		{name: "header of a group not hosted", send: hdr([]byte{9}, id), within: time.Second},
		{name: "header without a cluster ID", send: []byte{magic, 0, 0}, within: time.Second},
		{name: "header of another cluster", send: append(hdr(meta, other), 0), within: time.Second},
		{name: "HTTP request", send: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), within: time.Second},
		{name: "TLS hello", send: []byte{0x16, 0x03, 0x01, 0x00, 0x05}, within: time.Second},
		{name: "channel ID over 10 bytes", send: append([]byte{magicID}, bytes.Repeat([]byte{0xff}, 11)...), within: time.Second},
		// Past the handshake: Raft has the connection, the idle timeout
		// closes it (a partial RPC type byte waits for the rest).
		{name: "meta group header and a Raft RPC type, then nothing", send: append(hdr(meta, id), 0), within: handshake + idle},
		// The shared Raft connection is exempt from the idle timeout
		// between frames, not within one: a frame begun must finish.
		{name: "shared Raft header and one byte of a frame", send: append(hdr(raft, id), 0), within: handshake + idle},
		{name: "forwarding header and half an HTTP/2 preface", send: append(hdr(fwd, id), "PRI * HTTP/2.0\r\n"...), within: handshake + 2*time.Second},
	})
}
