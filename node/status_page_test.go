package node_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestStatusPageNeedsTheAdminRole: under an access file the status page
// (which shows keys) is for the admin role only, as AdminService is. The
// page's content is checked in a browser by package statuspage's test.
func TestStatusPageNeedsTheAdminRole(t *testing.T) {
	e := newAccessEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.admission(t, "app-a", 0).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "acc-p", Key: "page-key"})); err != nil {
		t.Fatal(err)
	}
	get := func(caller string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.c.APIURL(1)+"/status", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := e.httpClient(t, e.tokens[caller]).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	if code, body := get("nobody"); code != http.StatusUnauthorized {
		t.Fatalf("without a token: %d %s, want 401", code, body)
	}
	if code, body := get("app-a"); code != http.StatusForbidden || !strings.Contains(body, "admin") {
		t.Fatalf("a client: %d %s, want 403 naming the admin role", code, body)
	}
	// The page lists the policies of node 1's meta replica, which may not
	// have applied the policies node 0 applied when the first GET comes.
	e.c.Eventually(t, 10*time.Second, "node 1's page for an admin lists the policy and the members", func() error {
		code, body := get("ops")
		if code != http.StatusOK {
			return fmt.Errorf("an admin: %d %s, want 200", code, body)
		}
		for _, want := range []string{`data-policy="acc-p"`, `data-member="node1"`, `data-member="node3"`} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("the page lacks %s:\n%s", want, body)
			}
		}
		return nil
	})
}

// With an admin listener the page is served there (to admins: a client's
// certificate, or a node's, is refused), and the API port says where it is.
func TestStatusPageOnTheAdminListener(t *testing.T) {
	dir := t.TempDir()
	accessFile := filepath.Join(dir, "access.yaml")
	rules := fmt.Sprintf("callers:\n  - caller: %s\n    roles: [admin, client]\n  - caller: %s\n    roles: [client]\n",
		certs.DevAdminIdentity, certs.DevClientIdentity)
	if err := os.WriteFile(accessFile, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, TLS: true, Configure: func(_ int, cfg *node.Config) {
		cfg.AccessFile, cfg.AdminAddr = accessFile, "127.0.0.1:0"
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	get := func(client *http.Client, url string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/status", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	if code, body := get(c.HTTPClient(), c.AdminURL(0)); code != http.StatusOK || !strings.Contains(body, `data-member="node1"`) {
		t.Fatalf("an admin on the admin listener: %d %s", code, body)
	}
	if code, body := get(c.HTTPClient(), c.APIURL(0)); code != http.StatusNotFound || !strings.Contains(body, "--admin-addr") {
		t.Fatalf("on the API port: %d %s, want 404 naming --admin-addr", code, body)
	}
	for _, kp := range []certs.KeyPair{c.CA().Client, c.CA().Nodes["node1"]} {
		src, err := certs.NewSource(certs.Options{CertFile: kp.CertFile, KeyFile: kp.KeyFile, CAFile: c.CA().CAFile, Interval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		tr := &http.Transport{ForceAttemptHTTP2: true, DialTLSContext: src.DialTLS((&net.Dialer{}).DialContext)}
		defer tr.CloseIdleConnections()
		if code, body := get(&http.Client{Transport: tr}, c.AdminURL(0)); code != http.StatusForbidden {
			t.Fatalf("%s's certificate: %d %s, want 403", kp.CertFile, code, body)
		}
	}
}
