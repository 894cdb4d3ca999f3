package node_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	"github.com/quorate/quorate/peermux"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// A TLS cluster forms (joins over the API port's TLS, Raft over the peer
// port's mutual TLS), a follower forwards to the leader over mutual TLS, the
// cluster goes on once its leader stops, and the old leader restarts into
// it.
func TestTLSClusterForwardsAndSurvivesLeaderChange(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, TLS: true})
	applyPolicy(t, c, "tls", 1000, time.Hour, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader := c.Leader(t)
	follower := (leader + 1) % c.Len()
	resp, err := c.Admission(follower).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "tls", Key: "k"}))
	if err != nil || !resp.Msg.GetAllowed() {
		t.Fatalf("admit through follower %d (leader %d): %v, %v", follower, leader, resp, err)
	}
	// Routes names https URLs: the leader's and every member's.
	eventuallyRoutesAgree(t, c, "routes with https URLs", func() *quoratev1.ShardMapStatus { return nil })
	c.Stop(leader)
	next := c.Leader(t)
	if next == leader {
		t.Fatalf("node %d still leads after it stopped", leader)
	}
	r := eventuallyRoutesAgree(t, c, "routes to the new leader", func() *quoratev1.ShardMapStatus { return nil })
	if u := r.GetGroups()[0].GetLeaderUrl(); u != c.APIURL(next) || !strings.HasPrefix(u, "https://") {
		t.Fatalf("routes name leader %s, want %s", u, c.APIURL(next))
	}
	via := (next + 1) % c.Len()
	if via == leader {
		via = (via + 1) % c.Len()
	}
	c.Eventually(t, 20*time.Second, "an admit through the new follower", func() error {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := c.Admission(via).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "tls", Key: "k"}))
		return err
	})
	// The old leader restarts from its state: its peers are in its Raft
	// configuration before its registry has caught up, and it rejoins.
	c.Start(leader)
	c.Eventually(t, 30*time.Second, "an admit through the restarted node", func() error {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := c.Admission(leader).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "tls", Key: "k"}))
		return err
	})
}

// tlsConfigFrom is a client config presenting kp and trusting caFile's CA,
// for a raw dial of a peer port (no host name check, like the nodes').
func tlsConfigFrom(t *testing.T, kp certs.KeyPair, caFile string) *tls.Config {
	t.Helper()
	src, err := certs.NewSource(certs.Options{CertFile: kp.CertFile, KeyFile: kp.KeyFile, CAFile: caFile, Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := src.PeerClientConfig(certs.PeerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// refusedAtTLS dials node i's peer port with cfg, writes a header for ch and
// bytes after it, and checks that the node closes the connection at the TLS
// handshake: nothing is answered, and the mux counts a TLS refusal and no
// header or channel handling.
func refusedAtTLS(t *testing.T, c *nodetest.Cluster, i int, cfg *tls.Config, ch uint64) {
	t.Helper()
	n := c.Node(i)
	before := node.PeerStats(n)
	conn, err := tls.Dial("tcp", n.RaftAddr(), cfg)
	if err == nil {
		// TLS 1.3: the client's handshake ends before the server has checked
		// the client's certificate; the server's refusal comes on the next
		// read.
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		hdr := peermux.AppendHeader(nil, ch, clusterIDOfNode(t, c, i))
		_, _ = conn.Write(append(hdr, make([]byte, 64)...))
		var buf [1]byte
		if _, err = conn.Read(buf[:]); err == nil {
			t.Fatalf("node %d answered a peer it should refuse", i)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("node %d kept the connection open: %v", i, err)
		}
	}
	c.Eventually(t, 10*time.Second, "a TLS refusal counted", func() error {
		if got := node.PeerStats(n).TLSRefused; got <= before.TLSRefused {
			return fmt.Errorf("TLS refusals %d", got)
		}
		return nil
	})
	after := node.PeerStats(n)
	if after.OtherCluster != before.OtherCluster || after.Silent != before.Silent {
		t.Fatalf("the mux read the refused connection's header: before %+v, after %+v", before, after)
	}
}

// A certificate from another CA, or from the cluster's CA naming a node the
// cluster does not know, gets no Raft or forwarding byte read on the peer
// port; another CA's node cannot join through the API port either.
func TestTLSPeerPortRefusesStrangers(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, TLS: true})
	other, err := certs.NewDevCA(filepath.Join(t.TempDir(), "other"), []string{"node1", "node4"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := certs.IssueDevCert(c.CA().Dir, certs.CertRequest{Name: "node-stranger", NodeID: "stranger", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	wrongCA := tlsConfigFrom(t, other.Nodes["node1"], c.CA().CAFile) // names a known node, signed by another CA
	unknown := tlsConfigFrom(t, stranger, c.CA().CAFile)
	for _, ch := range []uint64{0, peermux.ChannelForward} { // the meta group's Raft, forwarding
		refusedAtTLS(t, c, 0, wrongCA, ch)
		refusedAtTLS(t, c, 1, unknown, ch)
	}

	// A node of the other CA asks to join through an API port: its
	// certificate does not verify, so the call never reaches the node.
	src, err := certs.NewSource(certs.Options{CertFile: other.Nodes["node4"].CertFile, KeyFile: other.Nodes["node4"].KeyFile,
		CAFile: c.CA().CAFile, Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := src.ClientConfig(certs.ClientOptions{ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = quoratev1connect.NewAdminServiceClient(hc, c.APIURL(0)).Join(ctx, connect.NewRequest(&quoratev1.JoinRequest{
		Id: "node4", RaftAddr: "127.0.0.1:1", ApiAddr: "127.0.0.1:2"}))
	// TLS 1.3 verifies the client's certificate after the client sent its
	// request: the client reads the server's alert, or, when its write
	// loses the race with the server's close, a closed connection.
	closed := errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || connect.CodeOf(err) == connect.CodeUnavailable
	if err == nil || !strings.Contains(err.Error(), "certificate") && !closed {
		t.Fatalf("a node of another CA asked to join: got %v, want a refused certificate", err)
	}
	status, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprint(status.Msg); strings.Contains(s, "node4") {
		t.Fatalf("node4 is in the cluster: %s", s)
	}
}

// A TLS API port refuses a plaintext client.
func TestTLSAPIRefusesPlaintext(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, TLS: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	plain := quoratev1connect.NewAdminServiceClient(http.DefaultClient, "http://"+c.Node(0).APIAddr())
	if _, err := plain.NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{})); err == nil {
		t.Fatal("a plaintext call to a TLS API port was answered")
	}
	if _, err := c.Admin(0).NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{})); err != nil {
		t.Fatalf("a TLS call: %v", err)
	}
	// HTTP/2 is offered by ALPN.
	cfg := tlsConfigFrom(t, c.CA().Admin, c.CA().CAFile)
	cfg.NextProtos = []string{"h2", "http/1.1"}
	conn, err := tls.Dial("tcp", c.Node(0).APIAddr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN chose %q, want h2", p)
	}
}

// A node refuses to start with a certificate naming another node.
func TestTLSCertificateMustNameTheNode(t *testing.T) {
	ca, err := certs.NewDevCA(filepath.Join(t.TempDir(), "ca"), []string{"node1", "node2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Bootstrap = "node1", t.TempDir(), true
	cfg.APIAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = ca.Nodes["node2"].CertFile, ca.Nodes["node2"].KeyFile, ca.CAFile
	cfg.LogOutput = io.Discard
	n, err := node.New(cfg)
	if err == nil {
		n.Close()
		t.Fatal("node1 started with node2's certificate")
	}
	if !errors.Is(err, node.ErrInvalidConfig) || !strings.Contains(err.Error(), "--id") || !strings.Contains(err.Error(), "node2") {
		t.Fatalf("got %v, want an invalid --id naming node2", err)
	}
}

// serialOf is the serial of the certificate a TLS server at addr presents.
func serialOf(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS dial %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
}

// Rewriting a node's certificate files takes effect without a restart: new
// handshakes on both ports present the new certificate.
func TestTLSCertificateRotation(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, TLS: true})
	n := c.Node(0)
	peerCfg := tlsConfigFrom(t, c.CA().Nodes["node1"], c.CA().CAFile)
	apiCfg := peerCfg.Clone()
	apiCfg.NextProtos = []string{"h2", "http/1.1"}
	old := c.CA().Nodes["node1"].Serial.Text(16)
	if got := serialOf(t, n.APIAddr(), apiCfg); got != old {
		t.Fatalf("API serves serial %s, want %s", got, old)
	}
	kp, err := certs.IssueDevCert(c.CA().Dir, certs.CertRequest{Name: certs.DevNodeName("node1"), NodeID: "node1",
		Hosts: []string{"127.0.0.1", "localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	want := kp.Serial.Text(16)
	c.Eventually(t, 30*time.Second, "the new certificate served", func() error {
		if got := serialOf(t, n.APIAddr(), apiCfg); got != want {
			return fmt.Errorf("API serves %s", got)
		}
		if got := serialOf(t, n.RaftAddr(), peerCfg); got != want {
			return fmt.Errorf("peer port serves %s", got)
		}
		return nil
	})
	// The cluster goes on with it.
	applyPolicy(t, c, "rotated", 10, time.Hour, 10)

	// A rotated certificate that names another node is not served: the
	// node keeps the one it had and says why.
	if _, err := certs.IssueDevCert(c.CA().Dir, certs.CertRequest{Name: certs.DevNodeName("node1"), NodeID: "node9",
		Hosts: []string{"127.0.0.1", "localhost"}}); err != nil {
		t.Fatal(err)
	}
	c.Eventually(t, 30*time.Second, "the certificate naming node9 refused", func() error {
		st, ok := n.TLSStatus()
		if !ok || st.Err == nil || !strings.Contains(st.Err.Error(), `names node "node9"`) {
			return fmt.Errorf("TLS status %+v", st)
		}
		return nil
	})
	if got := serialOf(t, n.APIAddr(), apiCfg); got != want {
		t.Fatalf("API serves %s after a certificate naming another node, want %s still", got, want)
	}
	if got := serialOf(t, n.RaftAddr(), peerCfg); got != want {
		t.Fatalf("peer port serves %s after a certificate naming another node, want %s still", got, want)
	}
}
