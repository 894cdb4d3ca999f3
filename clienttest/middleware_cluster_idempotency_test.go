package clienttest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client/middleware"
	"github.com/quorate/quorate/client/ratelimitheader/ratelimitheadertest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// answer is what a test keeps of a response.
type answer struct {
	status    int
	remaining int64 // r of the RateLimit field; -1 without the field
	header    http.Header
}

// send makes a request (method and path) of srv with the idempotency key
// idem (none when empty) and returns its status and r.
func send(t *testing.T, srv *httptest.Server, method, path, idem string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if idem != "" {
		req.Header.Set(middleware.HeaderIdempotencyKey, idem)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	a := answer{status: resp.StatusCode, remaining: -1, header: resp.Header}
	if f := resp.Header.Get(middleware.HeaderRateLimit); f != "" {
		items, err := ratelimitheadertest.ParseList(f)
		if err != nil || len(items) != 1 {
			t.Fatalf("%s %q: %v", middleware.HeaderRateLimit, f, err)
		}
		a.remaining = items[0].Params["r"]
	}
	return a
}

var loopback = middleware.Proxies{Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}.ClientIP()

// TestClusterIdempotencyKeyChargesOnce: on a 3-node cluster, two requests
// with one Idempotency-Key are charged once (the second gets the first's
// answer); the key used for another request (another cost) is 422; a
// retry after a denial is decided anew once its Retry-After has passed,
// and then charged once too; and a policy whose clients decide from budget
// leases still charges a keyed request once (the client takes it to the
// cluster).
func TestClusterIdempotencyKeyChargesOnce(t *testing.T) {
	cl := clusterClient(t,
		&quoratev1.Policy{Name: "idem-hour", Algorithm: "fixed_window", Limit: 3, Period: durationpb.New(time.Hour)},
		&quoratev1.Policy{Name: "idem-2s", Algorithm: "fixed_window", Limit: 1, Period: durationpb.New(2 * time.Second)},
		&quoratev1.Policy{Name: "idem-grant", Algorithm: "fixed_window", Limit: 1000, Period: durationpb.New(time.Hour),
			Local: &quoratev1.LocalDecisions{Mode: "grant"}},
	)
	mux := http.NewServeMux()
	for _, route := range []struct {
		path, policy string
		cost         int64
	}{{"/hour", "idem-hour", 1}, {"/hour-x2", "idem-hour", 2}, {"/2s", "idem-2s", 1}, {"/grant", "idem-grant", 1}} {
		lim, err := middleware.New(cl, middleware.WithIdentity(loopback), middleware.WithIdempotencyKey(""),
			middleware.WithLimits(middleware.Limit{Policy: route.policy, Cost: func(*http.Request) int64 { return route.cost }}))
		if err != nil {
			t.Fatal(err)
		}
		mux.Handle("POST "+route.path, lim.Handler(ok200))
		mux.Handle("GET "+route.path, lim.Handler(ok200))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	// Two requests, one key: one charge.
	first, again := send(t, srv, http.MethodPost, "/hour", "order-1"), send(t, srv, http.MethodPost, "/hour", "order-1")
	if first.status != http.StatusOK || again.status != http.StatusOK || first.remaining != 2 || again.remaining != 2 {
		t.Fatalf("one key twice: %+v then %+v, want 200 with r=2 both", first, again)
	}
	if a := send(t, srv, http.MethodGet, "/hour", "order-1"); a.status != http.StatusOK || a.remaining != 1 {
		t.Fatalf("a GET with the key after them: %+v, want r=1 (the key charged once; a GET is charged whatever its key)", a)
	}
	// The same key for another request (cost 2): refused, nothing charged.
	if a := send(t, srv, http.MethodPost, "/hour-x2", "order-1"); a.status != http.StatusUnprocessableEntity {
		t.Fatalf("key reused for another request: %+v, want 422", a)
	}
	if a := send(t, srv, http.MethodPost, "/hour", "order-2"); a.status != http.StatusOK || a.remaining != 0 {
		t.Fatalf("after the refused reuse: %+v, want r=0 (the reuse charged nothing)", a)
	}

	// A denied key is denied while its Retry-After runs, then decided anew.
	if a := send(t, srv, http.MethodPost, "/2s", ""); a.status != http.StatusOK {
		t.Fatalf("first of the 2 s window: %+v", a)
	}
	denied := send(t, srv, http.MethodPost, "/2s", "job-1")
	if denied.status != http.StatusTooManyRequests {
		t.Fatalf("second of the window: %+v, want 429", denied)
	}
	retry, err := strconv.Atoi(denied.header.Get(middleware.HeaderRetryAfter))
	if err != nil || retry < 1 || retry > 2 {
		t.Fatalf("Retry-After %q, want 1..2", denied.header.Get(middleware.HeaderRetryAfter))
	}
	deadline := time.Now().Add(20 * time.Second)
	var admitted answer
	for {
		admitted = send(t, srv, http.MethodPost, "/2s", "job-1")
		if admitted.status == http.StatusOK {
			break
		}
		if admitted.status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("retries of a denied key: %+v, want 429 until the window ends, then 200", admitted)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not a synchronization
	}
	if a := send(t, srv, http.MethodPost, "/2s", "job-1"); a.status != http.StatusOK || a.remaining != admitted.remaining {
		t.Fatalf("a retry of the admitted key: %+v, want 200 r=%d (charged once)", a, admitted.remaining)
	}

	// Budget leases: once the client decides the policy locally, a keyed
	// request still goes to the cluster.
	deadline = time.Now().Add(20 * time.Second)
	for local := cl.Stats().LocalGrant; ; {
		send(t, srv, http.MethodPost, "/grant", "")
		if cl.Stats().LocalGrant > local {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the client never decided idem-grant from a grant")
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	local := cl.Stats().LocalGrant
	first = send(t, srv, http.MethodPost, "/grant", "pay-1")
	for i := range 5 {
		if a := send(t, srv, http.MethodPost, "/grant", "pay-1"); first.status != http.StatusOK || first.remaining < 0 || a.remaining != first.remaining || cl.Stats().LocalGrant != local {
			t.Fatalf("a keyed request under budget leases: %+v, then retry %d %+v; want the cluster's answer each time", first, i, a)
		}
	}
}

// TestClusterRefundOnServerError: on a 3-node cluster, requests the handler
// fails with a 5xx give their units back, those it serves keep them.
func TestClusterRefundOnServerError(t *testing.T) {
	cl := clusterClient(t, &quoratev1.Policy{Name: "refund-hour", Algorithm: "fixed_window", Limit: 2, Period: durationpb.New(time.Hour)})
	var mu sync.Mutex
	var errs []error
	lim, err := middleware.New(cl, middleware.WithIdentity(loopback), middleware.WithRefundOnServerError(), middleware.WithLimits(middleware.Limit{Policy: "refund-hour"}),
		middleware.WithOnError(func(_ *http.Request, err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /fail", lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "broken", http.StatusBadGateway)
	})))
	mux.Handle("GET /missing", lim.Handler(http.NotFoundHandler()))
	mux.Handle("GET /ok", lim.Handler(ok200))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	for i := range 4 {
		if a := send(t, srv, http.MethodGet, "/fail", ""); a.status != http.StatusBadGateway || a.remaining != 1 {
			t.Fatalf("failed request %d: %+v, want 502 with r=1 (admitted, then refunded)", i, a)
		}
	}
	// A 4xx is the caller's: charged.
	if a := send(t, srv, http.MethodGet, "/missing", ""); a.status != http.StatusNotFound || a.remaining != 1 {
		t.Fatalf("404: %+v, want r=1", a)
	}
	if a := send(t, srv, http.MethodGet, "/ok", ""); a.status != http.StatusOK || a.remaining != 0 {
		t.Fatalf("served request: %+v, want 200 with r=0", a)
	}
	if a := send(t, srv, http.MethodGet, "/ok", ""); a.status != http.StatusTooManyRequests {
		t.Fatalf("third charged request: %+v, want 429", a)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 0 {
		t.Errorf("errors: %v", errs)
	}
}
