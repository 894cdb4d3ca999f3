package node_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
)

// peerHeader is the peer port's connection header for channel ch from a
// node of cluster: the magic byte, ch as an unsigned varint (ch < 128 here)
// and the cluster ID's 16 bytes.
func peerHeader(tb testing.TB, ch byte, cluster string) []byte {
	raw, err := hex.DecodeString(cluster)
	if err != nil || len(raw) != 16 {
		tb.Fatalf("cluster ID %q: %v", cluster, err)
	}
	return append([]byte{0xA8, ch}, raw...)
}

// clusterIDOfNode waits until node i records a cluster ID and returns it.
func clusterIDOfNode(tb testing.TB, c *nodetest.Cluster, i int) string {
	tb.Helper()
	var id string
	c.Eventually(tb, 20*time.Second, "a cluster ID", func() error {
		if id = c.Node(i).Status().GetClusterId(); id == "" {
			return errors.New("none yet")
		}
		return nil
	})
	return id
}

// serving checks that a rate-limited admit through each running node gets an
// answer.
func serving(t *testing.T, c *nodetest.Cluster, policy string) {
	t.Helper()
	for i := range c.Len() {
		if !c.Running(i) {
			continue
		}
		c.Eventually(t, 15*time.Second, fmt.Sprintf("an admit through node %d", i), func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := admit(ctx, c, i, policy, fmt.Sprintf("k%d", i), 1)
			return err
		})
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// Connections that send a channel header and then nothing are closed once
// the handshake timeout passes, hold no Raft buffers meanwhile, and do not
// keep the cluster from serving.
func TestPeerPortHeaderOnlyConnectionsAreClosed(t *testing.T) {
	const conns = 2000
	handshake := 3 * time.Second
	c := nodetest.NewClusterWith(t, nodetest.Options{Configure: func(i int, cfg *node.Config) {
		cfg.PeerHandshakeTimeout = handshake
	}})
	applyPolicy(t, c, "p", 1_000_000, time.Second, 1_000_000)
	serving(t, c, "p")
	target := c.Node(0).RaftAddr()
	cluster := clusterIDOfNode(t, c, 0) // not a secret: a header with it goes as far as any

	before := heapInUse()
	opened := make([]net.Conn, 0, conns)
	defer func() {
		for _, cn := range opened {
			cn.Close()
		}
	}()
	start := time.Now()
	for i := range conns {
		cn, err := net.Dial("tcp", target)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		opened = append(opened, cn)
		ch := byte(0) // the meta group's Raft
		if i%2 == 1 {
			ch = 1 // a data group's channel, hosted or not
		}
		if _, err := cn.Write(peerHeader(t, ch, cluster)); err != nil {
			t.Fatalf("header %d: %v", i, err)
		}
	}
	t.Logf("opened %d header-only connections in %v", conns, time.Since(start))
	// Give the node time to take them all in: a connection it handed to
	// Raft would get its buffers now.
	nodetest.Eventually(t, 10*time.Second, "the node to take the connections", func() error {
		if got := node.PeerConnsAccepted(c.Node(0)); got < conns {
			return fmt.Errorf("%d accepted", got)
		}
		return nil
	})
	if grown := int64(heapInUse()) - int64(before); grown > 64<<20 {
		t.Errorf("heap grew by %d MiB with %d header-only connections open", grown>>20, conns)
	}
	serving(t, c, "p")

	// Every one is closed by the node, within the handshake timeout (and
	// some slack for a busy machine).
	deadline := start.Add(handshake + 10*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i, cn := range opened {
		wg.Go(func() {
			cn.SetReadDeadline(deadline)
			_, err := cn.Read(make([]byte, 1))
			var ne net.Error
			if err == nil || errors.As(err, &ne) && ne.Timeout() {
				errs <- fmt.Errorf("connection %d still open %v after it sent its header (err %v)", i, time.Since(start), err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
		break
	}
	serving(t, c, "p")
}
