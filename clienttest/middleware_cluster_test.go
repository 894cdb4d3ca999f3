package clienttest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/client/middleware"
	"github.com/quorate/quorate/client/ratelimitheader/ratelimitheadertest"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// ok200 is the service behind the middleware in these tests.
var ok200 = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })

// TestClusterMiddleware puts a service behind the middleware and a real
// client of a 3-node cluster over TCP: the fields, the 429, the /64 and the
// route template as the cluster counts them.
func TestClusterMiddleware(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	c.WaitReady(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{
		{Name: "mw-identity", Algorithm: "fixed_window", Limit: 100, Period: durationpb.New(time.Hour)},
		{Name: "mw-route", Algorithm: "fixed_window", Limit: 2, Period: durationpb.New(time.Hour)},
	}}))
	if err != nil {
		t.Fatalf("apply policies: %v", err)
	}
	cl, err := client.New(client.Config{
		Servers:    []string{c.APIURL(0), c.APIURL(1), c.APIURL(2)},
		HTTPClient: c.HTTPClient(),
		Timeout:    10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })

	lim, err := middleware.New(cl,
		middleware.WithIdentity(middleware.Proxies{Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}.ClientIP()),
		middleware.WithLimits(
			middleware.Limit{Name: "per-identity", Policy: "mw-identity"},
			middleware.Limit{Name: "per-route", Policy: "mw-route", Key: []middleware.KeyFunc{middleware.Route(nil)}},
		))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", lim.Handler(ok200))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	call := func(path, forwardedFor string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", forwardedFor) // the test is the trusted proxy
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	fields := func(resp *http.Response) (pol, cur []ratelimitheadertest.Item) {
		t.Helper()
		var err error
		if pol, err = ratelimitheadertest.ParseList(resp.Header.Get(middleware.HeaderPolicy)); err != nil || len(pol) != 2 {
			t.Fatalf("%s %q: %v", middleware.HeaderPolicy, resp.Header.Get(middleware.HeaderPolicy), err)
		}
		if cur, err = ratelimitheadertest.ParseList(resp.Header.Get(middleware.HeaderRateLimit)); err != nil || len(cur) != 2 {
			t.Fatalf("%s %q: %v", middleware.HeaderRateLimit, resp.Header.Get(middleware.HeaderRateLimit), err)
		}
		return pol, cur
	}

	// Two addresses of one /64, two paths of one route template: one budget.
	for i, hop := range []string{"2001:db8:1:2::1", "2001:db8:1:2:ffff::99"} {
		resp := call("/items/"+strconv.Itoa(i), hop)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		pol, cur := fields(resp)
		if pol[0].Name != "per-identity" || pol[0].Params["q"] != 100 || pol[1].Name != "per-route" || pol[1].Params["q"] != 2 {
			t.Errorf("request %d: %s %+v", i, middleware.HeaderPolicy, pol)
		}
		// w is the policy's window, when the cluster reports it (w is
		// optional in the draft: a concurrency policy has none).
		for _, it := range pol {
			if w, ok := it.Params["w"]; ok && w != 3600 {
				t.Errorf("request %d: %s %+v: w is not 3600", i, middleware.HeaderPolicy, it)
			} else if !ok {
				t.Logf("request %d: %s %+v: the cluster reports no window", i, middleware.HeaderPolicy, it)
			}
		}
		if cur[0].Params["r"] != int64(99-i) || cur[1].Params["r"] != int64(1-i) || cur[1].Params["t"] < 1 || cur[1].Params["t"] > 3600 {
			t.Errorf("request %d: %s %+v", i, middleware.HeaderRateLimit, cur)
		}
	}
	resp := call("/items/9", "2001:db8:1:2::5")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third request of the /64: status %d, want 429", resp.StatusCode)
	}
	if got := resp.Header.Get(middleware.HeaderDeniedBy); got != `"per-route"` {
		t.Errorf("%s %q, want \"per-route\"", middleware.HeaderDeniedBy, got)
	}
	if s, err := strconv.Atoi(resp.Header.Get(middleware.HeaderRetryAfter)); err != nil || s < 1 || s > 3600 {
		t.Errorf("Retry-After %q, want whole seconds in 1..3600", resp.Header.Get(middleware.HeaderRetryAfter))
	}
	if _, cur := fields(resp); cur[0].Params["r"] != 98 || cur[1].Params["r"] != 0 {
		t.Errorf("denial: %s %+v; want per-identity untouched (98) and per-route 0", middleware.HeaderRateLimit, cur)
	}
	// Another /64 has budgets of its own.
	if resp := call("/items/1", "2001:db8:1:3::1"); resp.StatusCode != http.StatusOK {
		t.Errorf("another /64: status %d, want 200", resp.StatusCode)
	}
}
