package middleware

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/client/ratelimitheader/ratelimitheadertest"
	"github.com/quorate/quorate/client/slot"
)

type principalKey struct{}

func principalOf(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(principalKey{}).(string)
	return p, ok
}

var ok200 = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })

func mustNew(t *testing.T, a Admitter, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(a, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func get(h http.Handler, target, remote string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// twoLimits is a mux whose routes are limited per identity (100 per minute)
// and per identity and route (2 per second).
func twoLimits(t *testing.T, f *fakeAdmitter, opts ...Option) http.Handler {
	l := mustNew(t, f, append([]Option{
		WithIdentity(Principal(principalOf), Proxies{}.ClientIP()),
		WithLimits(
			Limit{Name: "per-identity", Policy: "api"},
			Limit{Name: "per-route", Policy: "route", Key: []KeyFunc{Route(nil)}},
		)}, opts...)...)
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", l.Handler(ok200))
	mux.Handle("GET /users/{id}", l.Handler(ok200))
	return mux
}

func twoPolicies() map[string]fakePolicy {
	return map[string]fakePolicy{
		"api":   {limit: 100, window: time.Minute, reset: 1500 * time.Millisecond, retry: 30 * time.Second},
		"route": {limit: 2, window: time.Second, reset: 200 * time.Millisecond, retry: 300 * time.Millisecond},
	}
}

func TestHeadersFollowTheDraft(t *testing.T) {
	f := newFake(twoPolicies())
	h := twoLimits(t, f)
	w := get(h, "/items/1", "192.0.2.1:1234")
	if w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", w.Code, w.Body)
	}
	pol, err := ratelimitheadertest.ParseList(w.Header().Get(HeaderPolicy))
	if err != nil {
		t.Fatalf("%s: %q: %v", HeaderPolicy, w.Header().Get(HeaderPolicy), err)
	}
	cur, err := ratelimitheadertest.ParseList(w.Header().Get(HeaderRateLimit))
	if err != nil {
		t.Fatalf("%s: %q: %v", HeaderRateLimit, w.Header().Get(HeaderRateLimit), err)
	}
	if len(pol) != 2 || len(cur) != 2 {
		t.Fatalf("want one item per limit: %+v / %+v", pol, cur)
	}
	wantPol := []struct {
		name string
		q, w int64
	}{{"per-identity", 100, 60}, {"per-route", 2, 1}}
	for i, want := range wantPol {
		got := pol[i]
		if got.Name != want.name || got.Params["q"] != want.q || got.Params["w"] != want.w || strings.Join(got.Keys, ",") != "q,w" {
			t.Errorf("%s item %d: %+v, want %+v", HeaderPolicy, i, got, want)
		}
	}
	wantCur := []struct {
		name string
		r, t int64
	}{{"per-identity", 99, 2}, {"per-route", 1, 1}} // t: 1.5 s and 0.2 s rounded up
	for i, want := range wantCur {
		got := cur[i]
		if got.Name != want.name || got.Params["r"] != want.r || got.Params["t"] != want.t || strings.Join(got.Keys, ",") != "r,t" {
			t.Errorf("%s item %d: %+v, want %+v", HeaderRateLimit, i, got, want)
		}
	}
	if w.Header().Get(HeaderRetryAfter) != "" || w.Header().Get(HeaderDeniedBy) != "" {
		t.Errorf("an admitted answer carries %s / %s", HeaderRetryAfter, HeaderDeniedBy)
	}
}

func TestMultiLimitDenialNamesTheLimit(t *testing.T) {
	f := newFake(twoPolicies())
	h := twoLimits(t, f)
	for i := range 2 {
		if w := get(h, "/items/1", "192.0.2.1:1234"); w.Code != http.StatusOK {
			t.Fatalf("request %d: status %d", i, w.Code)
		}
	}
	w := get(h, "/items/2", "192.0.2.1:1234") // the same route template
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", w.Code)
	}
	if got := w.Header().Get(HeaderDeniedBy); got != `"per-route"` {
		t.Errorf("%s = %q, want \"per-route\"", HeaderDeniedBy, got)
	}
	if !strings.Contains(w.Body.String(), `"per-route"`) {
		t.Errorf("body %q does not name the limit", w.Body)
	}
	if got := w.Header().Get(HeaderRetryAfter); got != "1" {
		t.Errorf("Retry-After %q, want 1 (0.3 s rounded up)", got)
	}
	cur, err := ratelimitheadertest.ParseList(w.Header().Get(HeaderRateLimit))
	if err != nil || len(cur) != 2 || cur[1].Name != "per-route" || cur[1].Params["r"] != 0 || cur[0].Params["r"] != 98 {
		t.Errorf("%s on denial: %+v, %v", HeaderRateLimit, cur, err)
	}
	// Another route of the same identity has its own per-route budget.
	if w := get(h, "/users/1", "192.0.2.1:1234"); w.Code != http.StatusOK {
		t.Errorf("another route: status %d, want 200", w.Code)
	}
}

func TestRetryAfterRoundsUp(t *testing.T) {
	for _, c := range []struct {
		retry time.Duration
		want  string
	}{{0, "1"}, {200 * time.Millisecond, "1"}, {time.Second, "1"}, {1010 * time.Millisecond, "2"}, {59*time.Second + time.Nanosecond, "60"}} {
		f := newFake(map[string]fakePolicy{"api": {limit: 0, window: time.Second, retry: c.retry}})
		h := mustNew(t, f, WithIdentity(Proxies{}.ClientIP()), WithLimits(Limit{Policy: "api"})).Handler(ok200)
		w := get(h, "/", "192.0.2.1:1")
		if w.Code != http.StatusTooManyRequests || w.Header().Get(HeaderRetryAfter) != c.want {
			t.Errorf("retry after %v: status %d Retry-After %q, want 429 %s", c.retry, w.Code, w.Header().Get(HeaderRetryAfter), c.want)
		}
		if got := w.Header().Get(HeaderDeniedBy); got != `"api"` {
			t.Errorf("single limit: %s = %q, want \"api\"", HeaderDeniedBy, got)
		}
	}
}

func TestKeysShareTheIdentityTag(t *testing.T) {
	f := newFake(twoPolicies())
	h := twoLimits(t, f)
	r := httptest.NewRequest(http.MethodGet, "/items/7", nil)
	r = r.WithContext(context.WithValue(r.Context(), principalKey{}, "al{i}ce"))
	h.ServeHTTP(httptest.NewRecorder(), r)
	req := f.last()
	if req.Policy != "api" || len(req.Also) != 1 || req.Also[0].Policy != "route" {
		t.Fatalf("request %+v: want api first, route in Also", req)
	}
	if req.Key != "{user:al%7Bi%7Dce}" || req.Also[0].Key != "{user:al%7Bi%7Dce}:route:GET /items/{id}" {
		t.Errorf("keys %q, %q", req.Key, req.Also[0].Key)
	}
	if slot.HashTag(req.Key) != slot.HashTag(req.Also[0].Key) {
		t.Errorf("keys %q and %q do not share a hash tag", req.Key, req.Also[0].Key)
	}
}

func TestRouteTemplateKey(t *testing.T) {
	f := newFake(twoPolicies())
	h := twoLimits(t, f)
	get(h, "/items/1", "192.0.2.1:1")
	get(h, "/items/2", "192.0.2.1:1")
	a, b := f.requests[0].Also[0].Key, f.requests[1].Also[0].Key
	if a != b || a != "{ip:192.0.2.1}:route:GET /items/{id}" {
		t.Errorf("route keys %q, %q: want both {ip:192.0.2.1}:route:GET /items/{id}", a, b)
	}

	// A limiter around the whole mux, itself under an outer mux that sets
	// r.Pattern to "/", finds the inner pattern through MuxRoute.
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", ok200)
	f = newFake(twoPolicies())
	root := http.NewServeMux()
	root.Handle("/", mustNew(t, f, WithIdentity(Proxies{}.ClientIP()),
		WithLimits(Limit{Policy: "route", Key: []KeyFunc{MuxRoute(mux)}})).Handler(mux))
	get(root, "/items/3", "192.0.2.1:1")
	get(root, "/nowhere", "192.0.2.1:1")
	if got := f.requests[0].Key; got != "{ip:192.0.2.1}:route:GET /items/{id}" {
		t.Errorf("around the mux: key %q", got)
	}
	if got := f.requests[1].Key; got != "{ip:192.0.2.1}:route:(none)" {
		t.Errorf("unmatched path: key %q", got)
	}
}

func TestMissingKey(t *testing.T) {
	f := newFake(twoPolicies())
	lim := Limit{Name: "per-route", Policy: "route", Key: []KeyFunc{Route(nil)}} // no pattern outside a mux
	h := mustNew(t, f, WithIdentity(Proxies{}.ClientIP()), WithLimits(lim)).Handler(ok200)
	w := get(h, "/x", "192.0.2.1:1")
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"per-route"`) {
		t.Errorf("reject: status %d body %q, want 400 naming per-route", w.Code, w.Body)
	}
	w = get(h, "/x", "not-an-address")
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "identity") {
		t.Errorf("no identity: status %d body %q, want 400 naming the identity", w.Code, w.Body)
	}
	h = mustNew(t, f, WithIdentity(Proxies{}.ClientIP()), WithMissingKey(SkipMissing),
		WithLimits(Limit{Policy: "api"}, lim)).Handler(ok200)
	w = get(h, "/x", "192.0.2.1:1")
	if w.Code != http.StatusOK || len(f.requests) != 1 || len(f.last().Also) != 0 || f.last().Policy != "api" {
		t.Errorf("skip: status %d requests %+v, want 200 with the api limit only", w.Code, f.requests)
	}
	if w := get(h, "/x", "not-an-address"); w.Code != http.StatusOK || len(f.requests) != 1 {
		t.Errorf("skip without identity: status %d, %d requests; want 200 without Admit", w.Code, len(f.requests))
	}
}

func TestAdmitErrorsAndUnverifiedDecisions(t *testing.T) {
	f := newFake(twoPolicies())
	var errs []error
	var unverified []client.Outcome
	opts := []Option{WithIdentity(Proxies{}.ClientIP()), WithLimits(Limit{Policy: "api"}),
		WithOnError(func(_ *http.Request, err error) { errs = append(errs, err) }),
		WithOnUnverified(func(_ *http.Request, d *client.Decision) { unverified = append(unverified, d.Outcome) })}

	f.err = &client.OutcomeUnknownError{RequestID: "r1", Attempts: 3, Last: errors.New("deadline")}
	if w := get(mustNew(t, f, opts...).Handler(ok200), "/", "192.0.2.1:1"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("fail closed: status %d, want 503", w.Code)
	}
	if w := get(mustNew(t, f, append(opts, WithFailMode(FailOpen))...).Handler(ok200), "/", "192.0.2.1:1"); w.Code != http.StatusOK || w.Header().Get(HeaderRateLimit) != "" {
		t.Errorf("fail open: status %d, %s %q; want 200 without fields", w.Code, HeaderRateLimit, w.Header().Get(HeaderRateLimit))
	}
	if len(errs) != 2 {
		t.Errorf("OnError called %d times, want 2", len(errs))
	}

	f.err = nil
	h := mustNew(t, f, opts...).Handler(ok200)
	for _, c := range []struct {
		outcome client.Outcome
		allowed bool
		status  int
	}{
		{client.Bypassed, true, http.StatusOK},
		{client.LocalDecision, true, http.StatusOK},
		{client.LocalDecision, false, http.StatusTooManyRequests},
		{client.Unavailable, false, http.StatusServiceUnavailable},
	} {
		f.outcome, f.allowed = c.outcome, c.allowed
		w := get(h, "/", "192.0.2.1:1")
		if w.Code != c.status {
			t.Errorf("%v allowed=%v: status %d, want %d", c.outcome, c.allowed, w.Code, c.status)
		}
		if w.Header().Get(HeaderPolicy) != "" || w.Header().Get(HeaderRateLimit) != "" {
			t.Errorf("%v: an unverified decision carries RateLimit fields", c.outcome)
		}
		if c.status == http.StatusTooManyRequests && w.Header().Get(HeaderRetryAfter) != "2" {
			t.Errorf("%v denied: Retry-After %q, want 2", c.outcome, w.Header().Get(HeaderRetryAfter))
		}
	}
	f.outcome, f.allowed = client.LocalDecision, false
	w := get(twoLimits(t, f), "/items/1", "192.0.2.1:1")
	if w.Code != http.StatusTooManyRequests || w.Header().Get(HeaderDeniedBy) != "" {
		t.Errorf("local denial of two limits without checks: status %d, %s %q; want 429 naming none",
			w.Code, HeaderDeniedBy, w.Header().Get(HeaderDeniedBy))
	}
	if len(unverified) != 4 {
		t.Errorf("OnUnverified called %d times, want 4", len(unverified))
	}
}

func TestNewNamesTheFieldAtFault(t *testing.T) {
	a := newFake(nil)
	id := WithIdentity(Proxies{}.ClientIP())
	for _, c := range []struct {
		opts []Option
		want string
	}{
		{[]Option{id}, "limits"},
		{[]Option{WithLimits(Limit{Policy: "p"})}, "identity"},
		{[]Option{id, WithLimits(Limit{Name: "x"})}, "limits[0].Policy"},
		{[]Option{id, WithLimits(Limit{Policy: "p", Name: "é"})}, "limits[0].Name"},
		{[]Option{id, WithLimits(Limit{Policy: "p"}, Limit{Policy: "p"})}, "limits[1].Name"},
		{[]Option{id, WithLimits(Limit{Policy: "p", Key: []KeyFunc{nil}})}, "limits[0].Key[0]"},
	} {
		if _, err := New(a, c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want an error naming %s", err, c.want)
		}
	}
}
