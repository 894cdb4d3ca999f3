package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"encoding/binary"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// A TLS cluster with an access file and an admin listener on each node: the
// nodes join through the admin listeners with their certificates alone (no
// node token); admin calls are served on the admin listener and refused,
// naming it, on the API port; data calls are not served on the admin
// listener; a node's certificate may ask a node's status and join as
// itself, and nothing else.
func TestAdminListenerOnTLSCluster(t *testing.T) {
	dir := t.TempDir()
	accessFile := filepath.Join(dir, "access.yaml")
	rules := fmt.Sprintf("callers:\n  - caller: %s\n    roles: [admin, client]\n  - caller: %s\n    roles: [client]\n",
		certs.DevAdminIdentity, certs.DevClientIdentity)
	if err := os.WriteFile(accessFile, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, TLS: true, Configure: func(i int, cfg *node.Config) {
		cfg.AccessFile, cfg.AdminAddr = accessFile, "127.0.0.1:0"
	}})
	if got := c.Config(1).Join; got != c.Config(0).AdminAddr {
		t.Fatalf("node2 joined through %s, want node1's admin listener %s", got, c.Config(0).AdminAddr)
	}
	applyPolicy(t, c, "adm", 100, time.Minute, 100) // through c.Admin: the admin listener
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for i := range 3 {
		onAPI := quoratev1connect.NewAdminServiceClient(c.HTTPClient(), c.APIURL(i))
		_, err := onAPI.ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
		wantAccessCode(t, fmt.Sprintf("admin call on node %d's API port", i), err, connect.CodeUnimplemented, "--admin-addr")
		if _, err := c.Admin(i).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{})); err != nil {
			t.Fatalf("admin call on node %d's admin listener: %v", i, err)
		}
		if _, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "adm", Key: "k"})); err != nil {
			t.Fatalf("data call on node %d's API port: %v", i, err)
		}
		onAdmin := quoratev1connect.NewAdmissionServiceClient(c.HTTPClient(), c.AdminURL(i))
		_, err = onAdmin.Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "adm", Key: "k"}))
		if code := connect.CodeOf(err); code != connect.CodeUnimplemented && code != connect.CodeNotFound {
			t.Fatalf("data call on node %d's admin listener: %v, want it not served", i, err)
		}
	}

	// node2's certificate, as a client of node1's admin listener.
	kp := c.CA().Nodes["node2"]
	src, err := certs.NewSource(certs.Options{CertFile: kp.CertFile, KeyFile: kp.KeyFile, CAFile: c.CA().CAFile, Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	tr := &http.Transport{ForceAttemptHTTP2: true, DialTLSContext: src.DialTLS((&net.Dialer{}).DialContext)}
	defer tr.CloseIdleConnections()
	asNode := quoratev1connect.NewAdminServiceClient(&http.Client{Transport: tr}, c.AdminURL(0))
	st, err := asNode.NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
	if err != nil || st.Msg.GetNode().GetId() != "node1" {
		t.Fatalf("a node's certificate asks node1's status: %v, %v", st, err)
	}
	_, err = asNode.ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{}))
	wantAccessCode(t, "a node's certificate applies policies", err, connect.CodePermissionDenied, "quorate://node/node2")
	_, err = asNode.Join(ctx, connect.NewRequest(&quoratev1.JoinRequest{Id: "node9", RaftAddr: "127.0.0.1:1", ApiAddr: "127.0.0.1:2"}))
	wantAccessCode(t, "node2's certificate joins as node9", err, connect.CodePermissionDenied, `"node2"`, `"node9"`)
}

// The API port holds at most --max-conns connections and --max-conns-per-ip
// from one address; one past the first is closed as soon as it is
// accepted, one past the second takes the place of its address's oldest
// idle connection, and a place freed is taken again.
func TestAPIConnectionBounds(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Configure: func(_ int, cfg *node.Config) {
		cfg.MaxConns, cfg.MaxConnsPerIP = 16, 10
	}})
	n := c.Node(0)
	c.HTTPClient().CloseIdleConnections()
	openConns := func(want int64) {
		t.Helper()
		c.Eventually(t, 10*time.Second, fmt.Sprintf("%d connections open", want), func() error {
			if api, _ := n.APIConnStats(); api.Open != want {
				return fmt.Errorf("%d open", api.Open)
			}
			return nil
		})
	}
	openConns(0)
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		conn, err := d.Dial("tcp", n.APIAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	refused := func(conn net.Conn, what string) {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) &&
			!strings.Contains(fmt.Sprint(err), "connection reset") {
			t.Fatalf("%s: read %v, want the connection closed", what, err)
		}
	}
	var first []net.Conn
	for range 10 {
		first = append(first, dial("127.0.0.1"))
	}
	openConns(10)
	dial("127.0.0.1")
	refused(first[0], "the oldest idle connection from 127.0.0.1, once an 11th arrives")
	openConns(10)
	for range 6 {
		dial("127.0.0.2")
	}
	openConns(16)
	refused(dial("127.0.0.2"), "the 17th connection in all")
	if api, _ := n.APIConnStats(); api.Refused != 1 || api.Evicted != 1 {
		t.Fatalf("refused %d connections and closed %d for others, want 1 and 1", api.Refused, api.Evicted)
	}

	first[1].Close()
	openConns(15)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Admin(0).NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{})); err != nil {
		t.Fatalf("a call once a place is free: %v", err)
	}
}

// An attacker that holds its address's --max-conns-per-ip with connections
// that never complete a request (idle, slow headers, a slow body, HTTP/2
// idle after its preface), and opens new ones as fast as they are closed,
// does not lock out a client at the same address that completes requests:
// each of the client's calls is answered.
func TestPerIPBoundServesClientsThatCompleteRequests(t *testing.T) {
	const perIP = 16
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Configure: func(_ int, cfg *node.Config) {
		cfg.MaxConnsPerIP = perIP
	}})
	applyPolicy(t, c, "per-ip", 1000, time.Minute, 1000)
	n := c.Node(0)
	c.HTTPClient().CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hold := []string{
		"",                                     // idle
		"POST /" + admitPath + " HTTP/1.1\r\n", // slow headers
		"POST /" + admitPath + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", // slow body
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",                                          // HTTP/2, idle
	}
	attackerDone := make(chan struct{})
	go func() {
		defer close(attackerDone)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", n.APIAddr())
			if err == nil {
				_, _ = conn.Write([]byte(hold[i%len(hold)]))
				context.AfterFunc(ctx, func() { conn.Close() })
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	c.Eventually(t, 20*time.Second, "the attacker reaches the bound", func() error {
		if api, _ := n.APIConnStats(); api.Refused+api.Evicted == 0 {
			return fmt.Errorf("%d open", api.Open)
		}
		return nil
	})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := quoratev1connect.NewAdmissionServiceClient(&http.Client{Transport: tr}, c.APIURL(0))
	for i := range 30 {
		callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := client.Admit(callCtx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "per-ip", Key: "k"}))
		callCancel()
		if err != nil {
			t.Fatalf("call %d of the client sharing the attacker's address: %v", i, err)
		}
		time.Sleep(100 * time.Millisecond) // the client's pace, not a synchronization
	}
	cancel()
	<-attackerDone
}

// Each HTTP/2 connection to the API port is told it may carry at most
// --max-streams-per-conn calls at once.
func TestAPIStreamsPerConnection(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Configure: func(_ int, cfg *node.Config) {
		cfg.MaxStreamsPerConn = 3
	}})
	conn, err := net.Dial("tcp", c.Node(0).APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// The client preface and an empty SETTINGS frame (RFC 9113 §3.4, §6.5),
	// then the server's frames until its SETTINGS.
	const settingsFrame, maxConcurrentStreams = 0x4, 0x3
	if _, err := conn.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, settingsFrame, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	for {
		var h [9]byte
		if _, err := io.ReadFull(conn, h[:]); err != nil {
			t.Fatal(err)
		}
		payload := make([]byte, int(h[0])<<16|int(h[1])<<8|int(h[2]))
		if _, err := io.ReadFull(conn, payload); err != nil {
			t.Fatal(err)
		}
		if h[3] != settingsFrame || h[4]&0x1 != 0 { // not SETTINGS, or its ACK
			continue
		}
		for p := payload; len(p) >= 6; p = p[6:] {
			if binary.BigEndian.Uint16(p) == maxConcurrentStreams {
				if v := binary.BigEndian.Uint32(p[2:]); v != 3 {
					t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d, want 3", v)
				}
				return
			}
		}
		t.Fatalf("the server's SETTINGS do not bound concurrent streams: % x", payload)
	}
}

// The connection bounds and the admin address are checked with the rest of
// the config, the error naming the flag.
func TestListenerConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*node.Config)
		want string
	}{
		{"per-ip above total", func(c *node.Config) { c.MaxConns, c.MaxConnsPerIP = 100, 200 }, "--max-conns-per-ip"},
		{"too few conns", func(c *node.Config) { c.MaxConns = 3 }, "--max-conns"},
		{"negative streams", func(c *node.Config) { c.MaxStreamsPerConn = -1 }, "--max-streams-per-conn"},
		{"admin addr not host:port", func(c *node.Config) { c.AdminAddr = "nowhere" }, "--admin-addr"},
		{"admin addr beyond loopback in plaintext", func(c *node.Config) {
			c.AdminAddr, c.AccessFile = "10.1.2.3:7072", "/etc/quorate/access.yaml"
		}, "--admin-addr"},
		{"admin addr beyond loopback without access file", func(c *node.Config) {
			c.AdminAddr, c.InsecurePlaintext = "10.1.2.3:7072", true
		}, "--access-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := node.DefaultConfig()
			cfg.ID, cfg.DataDir, cfg.Bootstrap = "n1", t.TempDir(), true
			tc.set(&cfg)
			err := cfg.Validate()
			if !errors.Is(err, node.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want+":") {
				t.Fatalf("Validate: %v, want an invalid config naming %s", err, tc.want)
			}
		})
	}
}
