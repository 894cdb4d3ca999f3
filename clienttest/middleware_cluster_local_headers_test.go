package clienttest

import (
	"math/bits"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client/middleware"
	"github.com/quorate/quorate/client/ratelimitheader/ratelimitheadertest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestClusterHeadersLocalDecisions: answers the client decided from budget
// leases carry the same RateLimit-Policy as the cluster's (q, w and
// quorate-burst from the policy), and a RateLimit whose r is the key's
// remaining as the client knows it (within what the grant holds of the
// truth: the client counts its unspent units from its own stripe) and
// whose t is the key's reset as of the grant's last answer, for every
// algorithm that has local decisions.
func TestClusterHeadersLocalDecisions(t *testing.T) {
	const maxGrant = 10
	local := &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(maxGrant), Ttl: durationpb.New(10 * time.Second)}
	type want struct {
		q, w, burst int64 // burst 0: no quorate-burst parameter
		capacity    int64 // the most r can be
		refills     bool  // a token bucket: r may be more than capacity - spent
		tMax        int64
	}
	cases := []struct {
		policy *quoratev1.Policy
		want   want
	}{
		{&quoratev1.Policy{Name: "l-tb", Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Minute), Local: local},
			want{q: 1000, w: 60, capacity: 1000, refills: true, tMax: 60}},
		{&quoratev1.Policy{Name: "l-tb-burst", Algorithm: "token_bucket", Limit: 600, Period: durationpb.New(time.Minute),
			Burst: proto.Int64(200), Local: local},
			want{q: 600, w: 60, burst: 200, capacity: 200, refills: true, tMax: 20}},
		{&quoratev1.Policy{Name: "l-fw", Algorithm: "fixed_window", Limit: 1000, Period: durationpb.New(time.Hour), Local: local},
			want{q: 1000, w: 3600, capacity: 1000, tMax: 3600}},
		{&quoratev1.Policy{Name: "l-sw", Algorithm: "sliding_window", Limit: 1000, Period: durationpb.New(time.Hour), Local: local},
			want{q: 1000, w: 3600, capacity: 1000, tMax: 7200}},
		{&quoratev1.Policy{Name: "l-quota", Algorithm: "quota", Limit: 1000, Calendar: "year", Local: local},
			want{q: 1000, capacity: 1000, tMax: 366 * 86400}},
	}
	var policies []*quoratev1.Policy
	for _, c := range cases {
		policies = append(policies, c.policy)
	}
	cl := clusterClient(t, policies...)
	mux := http.NewServeMux()
	for _, c := range cases {
		lim, err := middleware.New(cl, middleware.WithIdentity(loopback), middleware.WithLimits(middleware.Limit{Name: c.policy.Name, Policy: c.policy.Name}), middleware.WithXRateLimitHeaders())
		if err != nil {
			t.Fatal(err)
		}
		mux.Handle("GET /"+c.policy.Name, lim.Handler(ok200))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// How far r may be from the truth: the client counts the units its
	// grant holds unspent as its stripe's times the stripes.
	stripes := min(1<<bits.Len(uint(runtime.GOMAXPROCS(0)-1)), 16)
	slack := int64(maxGrant * stripes)

	for _, c := range cases {
		name, w := c.policy.Name, c.want
		if w.w == 0 {
			w.w = calendarSeconds("year", time.Now())
		}
		var spent, locals int64
		deadline := time.Now().Add(30 * time.Second)
		for locals < 20 {
			if time.Now().After(deadline) || spent >= 400 {
				t.Fatalf("%s: %d local decisions in %d requests, want 20", name, locals, spent)
			}
			before := cl.Stats().LocalGrant
			resp, err := srv.Client().Get(srv.URL + "/" + name)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: status %d", name, resp.StatusCode)
			}
			spent++
			if cl.Stats().LocalGrant == before {
				continue // decided by the cluster: TestClusterHeadersEveryAlgorithm's
			}
			locals++
			pol, err := ratelimitheadertest.ParseList(resp.Header.Get(middleware.HeaderPolicy))
			if err != nil || len(pol) != 1 {
				t.Fatalf("%s: %s %q: %v", name, middleware.HeaderPolicy, resp.Header.Get(middleware.HeaderPolicy), err)
			}
			cur, err := ratelimitheadertest.ParseList(resp.Header.Get(middleware.HeaderRateLimit))
			if err != nil || len(cur) != 1 {
				t.Fatalf("%s: local answer's %s %q: %v", name, middleware.HeaderRateLimit, resp.Header.Get(middleware.HeaderRateLimit), err)
			}
			p, r := pol[0], cur[0]
			wantKeys := "q,w"
			if w.burst != 0 {
				wantKeys = "q,w,quorate-burst"
			}
			if p.Name != name || p.Params["q"] != w.q || p.Params["w"] != w.w || p.Params["quorate-burst"] != w.burst ||
				strings.Join(p.Keys, ",") != wantKeys {
				t.Errorf("%s: local answer's %s %q, want q=%d w=%d burst=%d", name, middleware.HeaderPolicy, resp.Header.Get(middleware.HeaderPolicy), w.q, w.w, w.burst)
			}
			lo, hi := w.capacity-spent-slack, min(w.capacity, w.capacity-spent+slack)
			if w.refills {
				hi = w.capacity
			}
			if r.Name != name || strings.Join(r.Keys, ",") != "r,t" || r.Params["r"] < max(lo, 0) || r.Params["r"] > hi ||
				r.Params["t"] < 0 || r.Params["t"] > w.tMax {
				t.Errorf("%s: local answer %d after %d spent: %s %q; want r in %d..%d, t in 0..%d", name, locals, spent,
					middleware.HeaderRateLimit, resp.Header.Get(middleware.HeaderRateLimit), max(lo, 0), hi, w.tMax)
			}
			if got := resp.Header.Get(middleware.HeaderXRemaining); got != itoa(r.Params["r"]) {
				t.Errorf("%s: X-RateLimit-Remaining %q, want r=%d", name, got, r.Params["r"])
			}
		}
	}
}
