package jepsen

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A TLS cluster serves TLS on both ports of every node, the nodes' own
// traffic (joins, Raft, forwarding) goes through the network mode's path
// (the proxy relays the TLS bytes end to end; in nftables mode the nodes
// dial each other on 127.0.0.11, …, which their certificates name), a node
// added later gets its certificate too, and the harness's clients reach
// every node over TLS.
func TestTLSCluster(t *testing.T) {
	for _, mode := range []string{NetNftables, NetProxy} {
		t.Run(mode, func(t *testing.T) {
			start := time.Now()
			c := startTestCluster(t, ClusterOptions{Net: mode, TLS: true, Spare: 1})
			t.Logf("started over TLS in %v", time.Since(start))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if v := CheckTLS(ctx, c); !v.OK {
				t.Fatalf("%s: %v", v.Summary, v.Violations)
			}
			for i := range 3 {
				eventually(t, 10*time.Second, "admit through "+c.Nodes[i].ID, func() error {
					_, err := admit(c, i, 3*time.Second)
					return err
				})
			}
			added, err := c.AddNode(ctx)
			if err != nil {
				t.Fatalf("AddNode: %v", err)
			}
			if v := CheckTLS(ctx, c); !v.OK || !strings.HasPrefix(v.Summary, "4 members") {
				t.Fatalf("after adding %s: %s: %v", c.Nodes[added].ID, v.Summary, v.Violations)
			}
			eventually(t, 10*time.Second, "admit through "+c.Nodes[added].ID, func() error {
				_, err := admit(c, added, 3*time.Second)
				return err
			})
			t.Logf("%s mode: %v", mode, time.Since(start))
		})
	}
}

// CheckTLS fails on a plaintext cluster: named as such, and, when the
// harness believes it TLS and dials it so, on every probe of every node.
func TestCheckTLSFailsOnPlaintext(t *testing.T) {
	c := startNetCluster(t, NetProxy)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if v := CheckTLS(ctx, c); v.OK {
		t.Fatalf("CheckTLS passed on a plaintext cluster: %s", v.Summary)
	}
	if err := c.setUpTLS(); err != nil {
		t.Fatal(err)
	}
	c.http = newHTTPClient(c.net.dialContext, c.tls.src)
	v := CheckTLS(ctx, c)
	if v.OK {
		t.Fatalf("CheckTLS passed on plaintext nodes dialled with TLS: %s", v.Summary)
	}
	all := strings.Join(v.Violations, "\n")
	t.Logf("violations:\n%s", all)
	for _, n := range c.Nodes {
		if got := strings.Count(all, n.ID+" API port: "); got != 2 { // no TLS answer, and a plaintext one
			t.Errorf("%d violations of %s's API port, want 2", got, n.ID)
		}
		for _, want := range []string{n.ID + ": ClusterStatus over TLS: ",
			n.ID + " API port: answered ClusterStatus in plaintext", n.ID + " peer port: "} {
			if !strings.Contains(all, want) {
				t.Errorf("no violation %q", want)
			}
		}
	}
}
