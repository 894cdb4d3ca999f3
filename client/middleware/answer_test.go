package middleware

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/client/ratelimitheader"
	"github.com/quorate/quorate/client/ratelimitheader/ratelimitheadertest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// TestUnavailableAnswersCarryRetryAfter: every 503 of the middleware (an
// Admit error under FailClosed, a policy's on_unavailable: deny) says when
// to come back, over HTTP and, as RetryInfo, under Connect.
func TestUnavailableAnswersCarryRetryAfter(t *testing.T) {
	f := newFake(twoPolicies())
	opts := []Option{WithIdentity(Proxies{}.ClientIP()), WithLimits(Limit{Policy: "api"})}
	for _, c := range []struct {
		name  string
		setup func()
		opts  []Option
		want  string
	}{
		{"admit error", func() { f.err, f.outcome = errors.New("deadline"), client.Verified }, nil, "1"},
		{"on_unavailable deny", func() { f.err, f.outcome, f.allowed = nil, client.Unavailable, false }, nil, "1"},
		{"admit error, 2.5 s", func() { f.err, f.outcome = errors.New("deadline"), client.Verified },
			[]Option{WithUnavailableRetryAfter(2500 * time.Millisecond)}, "3"},
	} {
		c.setup()
		l := mustNew(t, f, append(append([]Option{}, opts...), c.opts...)...)
		w := get(l.Handler(ok200), "/", "192.0.2.1:1")
		if w.Code != http.StatusServiceUnavailable || w.Header().Get(HeaderRetryAfter) != c.want {
			t.Errorf("%s: status %d, Retry-After %q; want 503, %s", c.name, w.Code, w.Header().Get(HeaderRetryAfter), c.want)
		}
		s := connectServer(t, l)
		_, err := quoratev1connect.NewAdmissionServiceClient(s.Client(), s.URL).Peek(t.Context(), connect.NewRequest(&quoratev1.PeekRequest{}))
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable || ce.Meta().Get(HeaderRetryAfter) != c.want {
			t.Fatalf("%s under Connect: %v, want Unavailable with Retry-After %s", c.name, err, c.want)
		}
		var info *errdetails.RetryInfo
		for _, d := range ce.Details() {
			if v, err := d.Value(); err == nil {
				if ri, ok := v.(*errdetails.RetryInfo); ok {
					info = ri
				}
			}
		}
		if info == nil || info.GetRetryDelay().AsDuration() < time.Second {
			t.Errorf("%s under Connect: RetryInfo %v, want at least 1 s", c.name, info)
		}
	}
	if _, err := New(f, append(opts, WithUnavailableRetryAfter(-time.Second))...); err == nil || !strings.Contains(err.Error(), "WithUnavailableRetryAfter") {
		t.Errorf("a negative Retry-After: %v", err)
	}
}

// TestXRateLimitHeaders: the legacy fields, only when asked for, show the
// limit that denied, else the one with the fewest units left.
func TestXRateLimitHeaders(t *testing.T) {
	f := newFake(twoPolicies())
	if w := get(twoLimits(t, f), "/items/1", "192.0.2.1:1"); w.Header().Get(HeaderXLimit) != "" {
		t.Errorf("X-RateLimit fields without WithXRateLimitHeaders: %v", w.Header())
	}
	h := twoLimits(t, f, WithXRateLimitHeaders())
	for i, want := range []struct {
		status                 int
		limit, remaining, rset string
	}{
		{http.StatusOK, "2", "0", "1"}, // per-route: 2, 1 left before, 0 after; reset 0.2 s
		{http.StatusTooManyRequests, "2", "0", "1"},
	} {
		w := get(h, "/items/1", "192.0.2.1:1")
		got := []string{w.Header().Get(HeaderXLimit), w.Header().Get(HeaderXRemaining), w.Header().Get(HeaderXReset)}
		if w.Code != want.status || strings.Join(got, " ") != strings.Join([]string{want.limit, want.remaining, want.rset}, " ") {
			t.Errorf("request %d: status %d, X-RateLimit %v; want %d %+v", i, w.Code, got, want.status, want)
		}
	}
}

// TestConcurrencyFieldsParse: a concurrency limit's pair is a quota in
// concurrent requests, without window or effective window.
func TestConcurrencyFieldsParse(t *testing.T) {
	h := ratelimitheader.Fields([]ratelimitheader.Limit{{Name: "in-flight", Limit: 4, Remaining: 3, Concurrent: true}})
	pol, err := ratelimitheadertest.ParseList(h.Get(HeaderPolicy))
	if err != nil || len(pol) != 1 || pol[0].Params["q"] != 4 || pol[0].Strings["qu"] != "concurrent-requests" || strings.Join(pol[0].Keys, ",") != "q,qu" {
		t.Errorf("%s %q: %+v, %v", HeaderPolicy, h.Get(HeaderPolicy), pol, err)
	}
	cur, err := ratelimitheadertest.ParseList(h.Get(HeaderRateLimit))
	if err != nil || len(cur) != 1 || cur[0].Params["r"] != 3 || strings.Join(cur[0].Keys, ",") != "r" {
		t.Errorf("%s %q: %+v, %v", HeaderRateLimit, h.Get(HeaderRateLimit), cur, err)
	}
}

// TestIdempotencyKeySyntax: a POST's key is a String or Stripe's bare
// value; anything else is 400 naming the field, and the key becomes the
// request ID.
func TestIdempotencyKeySyntax(t *testing.T) {
	f := newFake(twoPolicies())
	h := mustNew(t, f, WithIdentity(Proxies{}.ClientIP()), WithLimits(Limit{Policy: "api"}), WithIdempotencyKey("")).Handler(ok200)
	for _, c := range []struct {
		header []string
		status int
		id     string // the request ID sent; "" for a generated one
	}{
		{nil, http.StatusOK, ""},
		{[]string{HeaderIdempotencyKey, "KG5LxwFBepaKHyUD"}, http.StatusOK, "KG5LxwFBepaKHyUD"},
		{[]string{HeaderIdempotencyKey, `"8e03978e-40d5-43e8"`}, http.StatusOK, "8e03978e-40d5-43e8"},
		{[]string{HeaderIdempotencyKey, `"a\"b"`}, http.StatusOK, `a"b`},
		{[]string{HeaderIdempotencyKey, strings.Repeat("k", 200)}, http.StatusOK, "sha256:"},
		{[]string{HeaderIdempotencyKey, `""`}, http.StatusBadRequest, ""},
		{[]string{HeaderIdempotencyKey, `"open`}, http.StatusBadRequest, ""},
		{[]string{HeaderIdempotencyKey, `"a" x`}, http.StatusBadRequest, ""},
		{[]string{HeaderIdempotencyKey, strings.Repeat("k", 256)}, http.StatusBadRequest, ""},
		{[]string{HeaderIdempotencyKey, "a", HeaderIdempotencyKey, "b"}, http.StatusBadRequest, ""},
	} {
		n := len(f.requests)
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.RemoteAddr = "192.0.2.1:1"
		for i := 0; i+1 < len(c.header); i += 2 {
			r.Header.Add(c.header[i], c.header[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.status {
			t.Errorf("%q: status %d, want %d: %s", c.header, w.Code, c.status, w.Body)
			continue
		}
		if c.status != http.StatusOK {
			if !strings.Contains(w.Body.String(), HeaderIdempotencyKey) || len(f.requests) != n {
				t.Errorf("%q: %q admitted or does not name the field", c.header, w.Body)
			}
			continue
		}
		if id := f.last().RequestID; c.id == "" && id != "" || !strings.HasPrefix(id, c.id) {
			t.Errorf("%q: request ID %q, want %q", c.header, id, c.id)
		}
	}
	// Only POST and PATCH are keyed.
	if w := get(h, "/", "192.0.2.1:1", HeaderIdempotencyKey, `""`); w.Code != http.StatusOK || f.last().RequestID != "" {
		t.Errorf("a GET with a key: status %d, request ID %q; want 200 and no ID", w.Code, f.last().RequestID)
	}
}

func TestRefundNeedsARefunder(t *testing.T) {
	_, err := New(newFake(twoPolicies()), WithIdentity(Proxies{}.ClientIP()), WithLimits(Limit{Policy: "api"}), WithRefundOnServerError())
	if err == nil || !strings.Contains(err.Error(), "WithRefundOnServerError") {
		t.Errorf("refunds through an admitter without Refund: %v", err)
	}
}

// TestDeniedLimitsWindowEndsWithRetryAfter: a denied limit's t is when the
// request would fit, which Retry-After states; its reset (a bucket full
// again) is later, and the draft wants Retry-After no earlier than t's end.
func TestDeniedLimitsWindowEndsWithRetryAfter(t *testing.T) {
	f := newFake(map[string]fakePolicy{"api": {limit: 1, window: 20 * time.Second, reset: 20 * time.Second, retry: 1500 * time.Millisecond}})
	h := mustNew(t, f, WithIdentity(Proxies{}.ClientIP()), WithLimits(Limit{Policy: "api"}), WithXRateLimitHeaders()).Handler(ok200)
	if w := get(h, "/", "192.0.2.1:1"); w.Code != http.StatusOK || w.Header().Get(HeaderRateLimit) != `"api";r=0;t=20` {
		t.Fatalf("admitted: status %d, %s %q; want 200, t=20 (all back in 20 s)", w.Code, HeaderRateLimit, w.Header().Get(HeaderRateLimit))
	}
	w := get(h, "/", "192.0.2.1:1")
	cur, err := ratelimitheadertest.ParseList(w.Header().Get(HeaderRateLimit))
	if w.Code != http.StatusTooManyRequests || err != nil || len(cur) != 1 || cur[0].Params["r"] != 0 || cur[0].Params["t"] != 2 ||
		w.Header().Get(HeaderRetryAfter) != "2" || w.Header().Get(HeaderXReset) != "2" {
		t.Errorf("denied: status %d, %s %q, Retry-After %q, %s %q; want 429, r=0;t=2, 2, 2", w.Code, HeaderRateLimit,
			w.Header().Get(HeaderRateLimit), w.Header().Get(HeaderRetryAfter), HeaderXReset, w.Header().Get(HeaderXReset))
	}
}

// refundingFake is a fakeAdmitter that names its decisions and records
// refunds.
type refundingFake struct {
	*fakeAdmitter
	mu       sync.Mutex
	n        int
	refunded []string // request IDs
}

func (f *refundingFake) Admit(ctx context.Context, r client.Request) (*client.Decision, error) {
	d, err := f.fakeAdmitter.Admit(ctx, r)
	if d != nil && d.RequestID == "" {
		f.mu.Lock()
		f.n++
		d.RequestID = "req-" + strconv.Itoa(f.n)
		f.mu.Unlock()
	}
	return d, err
}

func (f *refundingFake) Refund(_ context.Context, _, requestID string) (bool, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refunded = append(f.refunded, requestID)
	return true, 1, nil
}

func (f *refundingFake) refunds() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.refunded)
}

// TestRefundOnServerErrorCodes: a handler's 5xx, and under Connect the
// server-error codes, refund the request; a success or a 4xx does not.
func TestRefundOnServerErrorCodes(t *testing.T) {
	f := &refundingFake{fakeAdmitter: newFake(twoPolicies())}
	l := mustNew(t, f, WithIdentity(Proxies{}.ClientIP()), WithLimits(Limit{Policy: "api"}), WithRefundOnServerError())
	for _, c := range []struct {
		status int
		refund bool
	}{{http.StatusOK, false}, {http.StatusNotFound, false}, {http.StatusInternalServerError, true}, {http.StatusServiceUnavailable, true}} {
		before := len(f.refunds())
		get(l.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(c.status) })), "/", "192.0.2.1:1")
		if got := len(f.refunds()) - before; got != map[bool]int{false: 0, true: 1}[c.refund] {
			t.Errorf("handler answering %d: %d refunds", c.status, got)
		}
	}
	s := connectServer(t, l)
	cl := quoratev1connect.NewAdmissionServiceClient(s.Client(), s.URL)
	before := len(f.refunds())
	if _, err := cl.Peek(t.Context(), connect.NewRequest(&quoratev1.PeekRequest{})); err != nil {
		t.Fatal(err)
	}
	if len(f.refunds()) != before {
		t.Errorf("a served call was refunded")
	}
	if _, err := cl.Admit(t.Context(), connect.NewRequest(&quoratev1.AdmitRequest{})); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("unimplemented call: %v", err)
	}
	if got := f.refunds(); len(got) != before+1 {
		t.Errorf("a call failing Unimplemented: refunds %v, want one more", got)
	}
}
