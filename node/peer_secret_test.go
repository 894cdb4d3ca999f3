package node_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// writePeerSecret writes a new peer secret file in dir and returns its path.
func writePeerSecret(t *testing.T, dir, name string) string {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(b)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// forwardingClient is an HTTP/2 client of the forwarding channel of the
// peer port at peerAddr as any process that reaches the port can make one
// (foreignTransport: the mux header with the cluster's ID, which admins
// see, and no secret), with the headers a node sets on what it forwards
// for caller.
func forwardingClient(t *testing.T, peerAddr, cluster, caller string) *http.Client {
	return &http.Client{Transport: forwardedAs{next: foreignTransport(t, peerAddr, cluster), caller: caller}}
}

type forwardedAs struct {
	next   http.RoundTripper
	caller string
}

func (f forwardedAs) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Quorate-Forwarded-Caller", f.caller)
	r.Header.Set("Quorate-Forwarded-Caller-Source", string(access.SourceToken))
	return f.next.RoundTrip(r)
}

// On a plaintext cluster with an access file and a peer secret, a peer
// connection that presents only the cluster ID is refused before it
// carries anything: it cannot raise a policy's limit, admit as a caller
// under a policy the caller may not use, or join a node at level 1 —
// while the nodes, which hold the secret, form the cluster and forward
// to each other; and a node with another secret cannot join.
func TestPeerSecretGatesPlaintextPeerPort(t *testing.T) {
	dir := t.TempDir()
	tokens := map[string]string{"ops": access.NewToken(), "only-p": access.NewToken()}
	accessPath, tokenPath := filepath.Join(dir, "access.yaml"), filepath.Join(dir, "tokens.yaml")
	writeAtomic(t, accessPath, accessRules)
	writeAtomic(t, tokenPath, tokenFile(tokens))
	secret := writePeerSecret(t, dir, "peer.secret")
	c := nodetest.NewClusterWith(t, nodetest.Options{Token: tokens["ops"], Configure: func(_ int, cfg *node.Config) {
		cfg.AccessFile, cfg.TokenFile, cfg.NodeToken, cfg.PeerSecretFile = accessPath, tokenPath, tokens["ops"], secret
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	policy := func(limit int64) *quoratev1.ApplyPoliciesRequest {
		return &quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{
			{Name: "acc-p", Algorithm: "token_bucket", Limit: limit, Period: durationpb.New(time.Second)},
			{Name: "acc-q", Algorithm: "token_bucket", Limit: limit, Period: durationpb.New(time.Second)},
		}}
	}
	// Every node takes an admin call: those that do not lead the meta group
	// forward it to its leader over the peer port.
	for i := range c.Len() {
		if _, err := c.Admin(i).ApplyPolicies(ctx, connect.NewRequest(policy(10))); err != nil {
			t.Fatalf("applying the policies through node %d: %v", i, err)
		}
	}
	admitsEverywhere(t, c)

	cluster := clusterIDOfNode(t, c, 0)
	refusedBefore := int64(0)
	for i := range c.Len() {
		refusedBefore += node.PeerAuthRefused(c.Node(i))
	}
	for i := range c.Len() {
		peer := c.Node(i).RaftAddr()
		ops := forwardingClient(t, peer, cluster, "ops")
		_, err := quoratev1connect.NewAdminServiceClient(ops, "http://"+peer).ApplyPolicies(ctx, connect.NewRequest(policy(1_000_000)))
		if err == nil {
			t.Errorf("node %d: raising a limit over the peer port with only the cluster ID was accepted", i)
		}
		onlyP := forwardingClient(t, peer, cluster, "only-p")
		_, err = quoratev1connect.NewAdmissionServiceClient(onlyP, "http://"+peer).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "acc-q", Key: "k"}))
		if err == nil {
			t.Errorf("node %d: an admit as only-p under acc-q over the peer port with only the cluster ID was answered", i)
		}
		_, err = quoratev1connect.NewAdminServiceClient(ops, "http://"+peer).Join(ctx, connect.NewRequest(&quoratev1.JoinRequest{
			Id: fmt.Sprintf("intruder%d", i), RaftAddr: "127.0.0.1:1", ApiAddr: "127.0.0.1:2", FeatureLevel: 1, ClusterId: cluster}))
		if err == nil {
			t.Errorf("node %d: a join at level 1 over the peer port with only the cluster ID was accepted", i)
		}
	}
	refused := int64(0)
	for i := range c.Len() {
		refused += node.PeerAuthRefused(c.Node(i))
	}
	if refused-refusedBefore < 3*int64(c.Len()) {
		t.Errorf("the peer ports counted %d refusals for not proving the secret, want at least %d", refused-refusedBefore, 3*c.Len())
	}
	// Nothing changed.
	for i := range c.Len() {
		resp, err := c.Admin(i).GetPolicy(ctx, connect.NewRequest(&quoratev1.GetPolicyRequest{Name: "acc-p"}))
		if err != nil || resp.Msg.GetPolicy().GetLimit() != 10 {
			t.Errorf("node %d: acc-p is %v (%v); want its limit still 10", i, resp.Msg.GetPolicy(), err)
		}
	}
	status, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range status.Msg.GetMembers() {
		if strings.HasPrefix(m.GetId(), "intruder") {
			t.Errorf("%s joined the cluster", m.GetId())
		}
	}

	// A node with another secret: its join over the API port (with the
	// node token) is refused, as no peer connection opens either way, so
	// it never gets the meta log, not even its own registration.
	cfg := *c.Config(1)
	cfg.ID, cfg.DataDir = "node4", filepath.Join(dir, "node4")
	cfg.APIAddr, cfg.RaftAddr, cfg.AdminAddr, cfg.Bootstrap = "127.0.0.1:0", "127.0.0.1:0", "", false
	cfg.Join = c.Config(0).APIAddr
	cfg.PeerSecretFile = writePeerSecret(t, dir, "other.secret")
	cfg.Observer = nil
	n4, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n4.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	// The meta leader asks node4's peer port before it would add it:
	// node4 refuses those connections, and the leader them.
	c.Eventually(t, 30*time.Second, "node4 refusing the leader's connections", func() error {
		if node.PeerAuthRefused(n4) < 3 {
			return fmt.Errorf("%d refused so far", node.PeerAuthRefused(n4))
		}
		return nil
	})
	// Its join is refused: the meta leader asks node4 on its peer port
	// before making it a voter, and cannot open that connection.
	for i := range c.Len() {
		if got := node.MetaServerAddr(c.Node(i), "node4"); got != "" {
			t.Fatalf("node %d: node4, with another peer secret, is in the meta configuration at %q", i, got)
		}
	}
	select {
	case <-n4.Registered():
		t.Fatal("node4, with another peer secret, got the meta log")
	default:
	}
	if id := node.MetaClusterID(n4); id != "" {
		t.Fatalf("node4, with another peer secret, applied the meta log (cluster ID %s)", id)
	}
	admitsEverywhere(t, c)
	if _, err := c.Admin(2).ApplyPolicies(ctx, connect.NewRequest(policy(20))); err != nil {
		t.Fatalf("the cluster after node4's attempts: %v", err)
	}
}

// admitsEverywhere checks that an admit through each node (as the
// cluster's client, ops) gets an answer.
func admitsEverywhere(t *testing.T, c *nodetest.Cluster) {
	t.Helper()
	for i := range c.Len() {
		c.Eventually(t, 15*time.Second, fmt.Sprintf("an admit through node %d", i), func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "acc-p", Key: fmt.Sprintf("k%d", i)}))
			return err
		})
	}
}
