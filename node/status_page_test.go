package node_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

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
	code, body := get("ops")
	if code != http.StatusOK {
		t.Fatalf("an admin: %d %s, want 200", code, body)
	}
	for _, want := range []string{`data-policy="acc-p"`, `data-member="node1"`, `data-member="node3"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s:\n%s", want, body)
		}
	}
}
