package node_test

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// registryOf is node i's registry, failing the test on a stopped node.
func registryOf(t *testing.T, c *nodetest.Cluster, i int) map[string]fsm.Node {
	t.Helper()
	n := c.Node(i)
	if n == nil {
		t.Fatalf("node %d is not running", i)
	}
	return node.Registry(n)
}

// registriesStay checks that every running node's registry is want.
func registriesStay(t *testing.T, c *nodetest.Cluster, want map[string]fsm.Node) {
	t.Helper()
	for i := range c.Len() {
		if !c.Running(i) {
			continue
		}
		if got := registryOf(t, c, i); !maps.Equal(got, want) {
			t.Fatalf("node %d: registry %v, want %v", i, got, want)
		}
	}
}

// joinVia asks node i's admin API, through client, to join req.
func joinVia(client quoratev1connect.AdminServiceClient, req *quoratev1.JoinRequest) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := client.Join(ctx, connect.NewRequest(req))
	return err
}

// admitsServed checks that an Admit of each of keys is answered through
// each running node, with no retry elsewhere.
func admitsServed(t *testing.T, c *nodetest.Cluster, policy string, keys int) {
	t.Helper()
	for i := range c.Len() {
		for k := range keys {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			// With a request ID, as a careful client sends: the node retries
			// it across a leader change (the machine may be loaded).
			_, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: policy, Key: fmt.Sprintf("k%d", k),
				Caller: "test", RequestId: fmt.Sprintf("served-%d", admitSeq.Add(1))}))
			cancel()
			if err != nil {
				t.Fatalf("admit of k%d through node %d: %v", k, i, err)
			}
		}
	}
}

// An anonymous Join that names the live node3 with other addresses is
// refused, on an open cluster, through every node: node3 answers at its
// registered addresses, so it keeps them. Nothing changes: the registry,
// node3's place in the meta group's configuration, its reachability, and
// Admits through every node in every group.
func TestJoinCannotMoveLiveNodeOnOpenCluster(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Configure: func(_ int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
	}})
	waitGroups(t, c, 2)
	applyPolicy(t, c, "p", 1_000_000, time.Second, 1_000_000)
	admitsServed(t, c, "p", 16)
	before := registryOf(t, c, 0)
	self := before["node3"]
	for _, tc := range []struct {
		name, raft, api, fields string
	}{
		{"both addresses", "127.0.0.1:1", "127.0.0.1:2", "raft_addr, api_addr"},
		{"its API address", self.RaftAddr, "127.0.0.1:2", "api_addr"},
		{"its Raft address", "127.0.0.1:1", self.APIAddr, "raft_addr"},
	} {
		for i := range c.Len() {
			err := joinVia(c.Admin(i), &quoratev1.JoinRequest{Id: "node3", RaftAddr: tc.raft, ApiAddr: tc.api, FeatureLevel: fsm.FeatureLevel})
			wantAccessCode(t, fmt.Sprintf("%s through node %d", tc.name, i), err, connect.CodeFailedPrecondition,
				tc.fields+": node \"node3\" answers at its registered", "keeps its addresses")
		}
	}
	// A node nobody runs: nothing answers at its peer port, so it is not
	// made a voter the meta group could never reach.
	for i := range c.Len() {
		err := joinVia(c.Admin(i), &quoratev1.JoinRequest{Id: "ghost", RaftAddr: "127.0.0.1:1", ApiAddr: "127.0.0.1:2", FeatureLevel: fsm.FeatureLevel})
		wantAccessCode(t, fmt.Sprintf("a node nobody runs, through node %d", i), err, connect.CodeFailedPrecondition,
			`raft_addr: nothing answers as node "ghost" on the peer port at 127.0.0.1:1`)
	}
	registriesStay(t, c, before)
	for i := range c.Len() {
		if got := node.MetaServerAddr(c.Node(i), "node3"); got != self.RaftAddr {
			t.Fatalf("node %d: node3 in the meta configuration at %q, want %s", i, got, self.RaftAddr)
		}
		if got := node.MetaServerAddr(c.Node(i), "ghost"); got != "" {
			t.Fatalf("node %d: a node nobody runs is in the meta configuration at %q", i, got)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Msg.GetMembers() {
		if m.GetError() != "" || m.GetStatus() == nil {
			t.Fatalf("member %s unreachable: %v", m.GetId(), m)
		}
	}
	admitsServed(t, c, "p", 16)
}

// On a cluster with an access file, only node3 itself may change node3's
// addresses, and only once they no longer answer: an admin caller that is
// not node3 (the nodes' shared admin token, another admin) is refused,
// naming the caller that would prove node3; node3's own token is refused
// while node3 answers at its registered addresses. Nothing changes, and
// node3 keeps serving.
func TestJoinCannotMoveLiveNodeWithAccessFile(t *testing.T) {
	e := newAccessEnv(t)
	c := e.c
	before := registryOf(t, c, 0)
	newTokenFor(t, e, "quorate://node/node3")
	bogus := &quoratev1.JoinRequest{Id: "node3", RaftAddr: "127.0.0.1:1", ApiAddr: "127.0.0.1:2", FeatureLevel: fsm.FeatureLevel}
	for _, caller := range []string{"ops", "admin-b"} {
		for i := range c.Len() {
			err := joinVia(e.admin(t, caller, i), bogus)
			wantAccessCode(t, fmt.Sprintf("%s through node %d", caller, i), err, connect.CodePermissionDenied,
				"raft_addr, api_addr", "only node3 itself", "quorate://node/node3", fmt.Sprintf("caller %q (token)", caller))
		}
	}
	for i := range c.Len() {
		err := joinVia(e.admin(t, "quorate://node/node3", i), bogus)
		wantAccessCode(t, fmt.Sprintf("node3's own token through node %d", i), err, connect.CodeFailedPrecondition, "keeps its addresses")
	}
	registriesStay(t, c, before)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range c.Len() {
		if _, err := e.admission(t, "app-a", i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "acc-p", Key: "k"})); err != nil {
			t.Fatalf("admit through node %d: %v", i, err)
		}
	}
}

// newTokenFor adds a token of caller, with the admin role, to e's token and
// access files, and waits until every node accepts it.
func newTokenFor(t *testing.T, e *accessEnv, caller string) string {
	t.Helper()
	tok := access.NewToken()
	e.tokens[caller] = tok
	writeAtomic(t, e.tokenPath, tokenFile(e.tokens))
	writeAtomic(t, e.accessPath, accessRules+fmt.Sprintf("  - caller: %q\n    roles: [admin]\n", caller))
	e.c.Eventually(t, 20*time.Second, "the new caller accepted everywhere", func() error {
		for i := range e.c.Len() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err := quoratev1connect.NewAdminServiceClient(e.httpClient(t, tok), e.c.APIURL(i)).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
			cancel()
			if err != nil {
				return fmt.Errorf("node %d: %w", i, err)
			}
		}
		return nil
	})
	return tok
}

// A node restarted at new addresses (its old ones dead) moves to them: the
// registry and the meta group's configuration follow, and it serves again.
// On an open cluster its first call is anonymous; with an access file the
// node proves itself with its own token (caller quorate://node/<id>). The
// audit trail records the real caller of each join: the anonymous call
// with the address it came from, or the token's caller.
func TestNodeRestartsAtNewAddresses(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		accessFile             bool
		wantCaller, wantSource string
	}{
		{"open", false, "", "none"},
		{"access file", true, "quorate://node/node3", "token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := nodetest.Options{}
			if tc.accessFile {
				opts = nodeTokenCluster(t)
			}
			c := nodetest.NewClusterWith(t, opts)
			applyPolicy(t, c, "p", 1_000_000, time.Second, 1_000_000)
			old := registryOf(t, c, 0)["node3"]
			c.Stop(2)
			c.Config(2).APIAddr, c.Config(2).RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
			c.Start(2)
			moved := c.Node(2).Status()
			if moved.GetRaftAddr() == old.RaftAddr || moved.GetApiAddr() == old.APIAddr {
				t.Fatalf("node3 restarted at %s/%s, its old addresses", moved.GetRaftAddr(), moved.GetApiAddr())
			}
			c.Eventually(t, 30*time.Second, "node3 registered at its new addresses everywhere", func() error {
				for i := range c.Len() {
					m := node.Registry(c.Node(i))["node3"]
					if m.RaftAddr != moved.GetRaftAddr() || m.APIAddr != moved.GetApiAddr() {
						return fmt.Errorf("node %d: node3 at %s/%s", i, m.RaftAddr, m.APIAddr)
					}
					if got := node.MetaServerAddr(c.Node(i), "node3"); got != moved.GetRaftAddr() {
						return fmt.Errorf("node %d: node3 in the meta configuration at %s", i, got)
					}
				}
				return nil
			})
			c.Eventually(t, 30*time.Second, "admits through every node", func() error {
				for i := range c.Len() {
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					_, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "p", Key: "k"}))
					cancel()
					if err != nil {
						return fmt.Errorf("node %d: %w", i, err)
					}
				}
				return nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := c.Admin(0).ListAudit(ctx, connect.NewRequest(&quoratev1.ListAuditRequest{Limit: 1000}))
			if err != nil {
				t.Fatal(err)
			}
			var rec *quoratev1.AuditEntry
			for _, e := range resp.Msg.GetEntries() {
				if e.GetAction() == "node add" && strings.Contains(e.GetSummary(), "node3 raft="+moved.GetRaftAddr()) {
					rec = e
				}
			}
			// The move's join is node3's first at its new addresses: it
			// knows no leader yet, so it asks --join's API port.
			switch {
			case rec == nil:
				t.Fatalf("no audit record of node3's move in %v", resp.Msg.GetEntries())
			case rec.GetCaller() != tc.wantCaller || rec.GetSource() != tc.wantSource || !strings.HasPrefix(rec.GetSummary(), "join from 127.0.0.1:"):
				t.Fatalf("node3's move recorded as %v; want caller %q (%s), and the address it came from", rec, tc.wantCaller, tc.wantSource)
			}
		})
	}
}

// nodeTokenCluster is the options of a cluster with an access file where
// each node has a bearer token of its own, of caller quorate://node/<id>
// with the admin role, and the test's clients that of "ops".
func nodeTokenCluster(t *testing.T) nodetest.Options {
	t.Helper()
	dir := t.TempDir()
	tokens := map[string]string{"ops": access.NewToken()}
	rules := "callers:\n  - caller: ops\n    roles: [admin, client]\n"
	for i := range 3 {
		caller := fmt.Sprintf("quorate://node/node%d", i+1)
		tokens[caller] = access.NewToken()
		rules += fmt.Sprintf("  - caller: %q\n    roles: [admin]\n", caller)
	}
	accessPath, tokenPath := filepath.Join(dir, "access.yaml"), filepath.Join(dir, "tokens.yaml")
	writeAtomic(t, accessPath, rules)
	writeAtomic(t, tokenPath, tokenFile(tokens))
	return nodetest.Options{Token: tokens["ops"], Configure: func(i int, cfg *node.Config) {
		cfg.AccessFile, cfg.TokenFile = accessPath, tokenPath
		cfg.NodeToken = tokens[fmt.Sprintf("quorate://node/node%d", i+1)]
	}}
}
