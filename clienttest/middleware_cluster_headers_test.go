package clienttest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/client/middleware"
	"github.com/quorate/quorate/client/ratelimitheader/ratelimitheadertest"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// clusterClient starts a 3-node cluster over TCP with policies applied and
// returns a client of it.
func clusterClient(t *testing.T, policies ...*quoratev1.Policy) *client.Client {
	t.Helper()
	c := nodetest.NewCluster(t, 3)
	c.WaitReady(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: policies})); err != nil {
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
	return cl
}

// calendarSeconds is the length in seconds of the UTC calendar period of
// kind holding at.
func calendarSeconds(kind string, at time.Time) int64 {
	at = at.UTC()
	day := time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC)
	var start, end time.Time
	switch kind {
	case "day":
		start, end = day, day.AddDate(0, 0, 1)
	case "week":
		start = day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
		end = start.AddDate(0, 0, 7)
	case "month":
		start = time.Date(at.Year(), at.Month(), 1, 0, 0, 0, 0, time.UTC)
		end = start.AddDate(0, 1, 0)
	case "year":
		start = time.Date(at.Year(), 1, 1, 0, 0, 0, 0, time.UTC)
		end = start.AddDate(1, 0, 0)
	}
	return int64(end.Sub(start) / time.Second)
}

// TestClusterHeadersEveryAlgorithm checks the RateLimit-Policy and
// RateLimit pair of every algorithm Admit decides, answered by a 3-node
// cluster: each field parses as an RFC 9651 List, q is what a client may
// sustain per window w (a token bucket's burst apart, as quorate-burst), r
// what is left now and t when it is all back. (A concurrency policy is
// decided by leases, not Admit; its pair: TestConcurrencyFieldsParse.)
func TestClusterHeadersEveryAlgorithm(t *testing.T) {
	type want struct {
		q, w, burst   int64 // burst 0: no quorate-burst parameter
		r, tMin, tMax int64
	}
	cases := []struct {
		policy *quoratev1.Policy
		want   func(now time.Time) want
	}{
		{&quoratev1.Policy{Name: "h-tb", Algorithm: "token_bucket", Limit: 60, Period: durationpb.New(time.Minute), Burst: proto.Int64(20)},
			// One unit spent: full again in one emission interval (1 s).
			func(time.Time) want { return want{q: 60, w: 60, burst: 20, r: 19, tMin: 1, tMax: 1} }},
		{&quoratev1.Policy{Name: "h-tb-flat", Algorithm: "token_bucket", Limit: 10, Period: durationpb.New(time.Second)},
			func(time.Time) want { return want{q: 10, w: 1, r: 9, tMin: 1, tMax: 1} }},
		{&quoratev1.Policy{Name: "h-fw", Algorithm: "fixed_window", Limit: 100, Period: durationpb.New(time.Hour)},
			func(time.Time) want { return want{q: 100, w: 3600, r: 99, tMin: 1, tMax: 3600} }},
		{&quoratev1.Policy{Name: "h-sw", Algorithm: "sliding_window", Limit: 100, Period: durationpb.New(time.Minute)},
			// Empty once the spend's window and the next have passed.
			func(time.Time) want { return want{q: 100, w: 60, r: 99, tMin: 60, tMax: 120} }},
		{&quoratev1.Policy{Name: "h-sl", Algorithm: "sliding_log", Limit: 5, Period: durationpb.New(time.Minute)},
			func(time.Time) want { return want{q: 5, w: 60, r: 4, tMin: 60, tMax: 60} }},
	}
	for _, cal := range []string{"day", "week", "month", "year"} {
		cases = append(cases, struct {
			policy *quoratev1.Policy
			want   func(now time.Time) want
		}{&quoratev1.Policy{Name: "h-quota-" + cal, Algorithm: "quota", Limit: 1000, Calendar: cal},
			func(now time.Time) want {
				w := calendarSeconds(cal, now)
				return want{q: 1000, w: w, r: 999, tMin: 1, tMax: w}
			}})
	}
	var policies []*quoratev1.Policy
	for _, c := range cases {
		policies = append(policies, c.policy)
	}
	cl := clusterClient(t, policies...)

	mux := http.NewServeMux()
	for _, c := range cases {
		lim, err := middleware.New(cl, middleware.WithIdentity(middleware.Proxies{Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}.ClientIP()),
			middleware.WithLimits(middleware.Limit{Name: c.policy.Name, Policy: c.policy.Name}), middleware.WithXRateLimitHeaders())
		if err != nil {
			t.Fatal(err)
		}
		mux.Handle("GET /"+c.policy.Name, lim.Handler(ok200))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	for _, c := range cases {
		name := c.policy.Name
		before := time.Now()
		resp, err := srv.Client().Get(srv.URL + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", name, resp.StatusCode)
		}
		pol, err := ratelimitheadertest.ParseList(resp.Header.Get(middleware.HeaderPolicy))
		if err != nil || len(pol) != 1 {
			t.Fatalf("%s: %s %q: %v", name, middleware.HeaderPolicy, resp.Header.Get(middleware.HeaderPolicy), err)
		}
		cur, err := ratelimitheadertest.ParseList(resp.Header.Get(middleware.HeaderRateLimit))
		if err != nil || len(cur) != 1 {
			t.Fatalf("%s: %s %q: %v", name, middleware.HeaderRateLimit, resp.Header.Get(middleware.HeaderRateLimit), err)
		}
		// A calendar period may end between the request and now: either
		// period's answer is right.
		var ok bool
		var wnt want
		for _, at := range []time.Time{before, time.Now()} {
			wnt = c.want(at)
			p, r := pol[0], cur[0]
			wantKeys := "q,w"
			if wnt.burst != 0 {
				wantKeys = "q,w,quorate-burst"
			}
			if p.Name == name && p.Params["q"] == wnt.q && p.Params["w"] == wnt.w && p.Params["quorate-burst"] == wnt.burst &&
				strings.Join(p.Keys, ",") == wantKeys && len(p.Strings) == 0 &&
				r.Name == name && r.Params["r"] == wnt.r && r.Params["t"] >= wnt.tMin && r.Params["t"] <= wnt.tMax &&
				strings.Join(r.Keys, ",") == "r,t" && len(r.Strings) == 0 {
				ok = true
				break
			}
		}
		if !ok {
			t.Errorf("%s: %s %q, %s %q; want q=%d w=%d burst=%d, r=%d t in %d..%d", name,
				middleware.HeaderPolicy, resp.Header.Get(middleware.HeaderPolicy), middleware.HeaderRateLimit, resp.Header.Get(middleware.HeaderRateLimit),
				wnt.q, wnt.w, wnt.burst, wnt.r, wnt.tMin, wnt.tMax)
		}
		// The legacy fields say the same: the quota, what is left, the reset.
		if got := resp.Header.Get(middleware.HeaderXLimit) + " " + resp.Header.Get(middleware.HeaderXRemaining); got != itoa(wnt.q)+" "+itoa(wnt.r) ||
			resp.Header.Get(middleware.HeaderXReset) != itoa(cur[0].Params["t"]) {
			t.Errorf("%s: X-RateLimit limit/remaining %q reset %q; want %d %d, %d", name, got, resp.Header.Get(middleware.HeaderXReset), wnt.q, wnt.r, cur[0].Params["t"])
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
