package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// attempts records the attempts the fake servers of a test got.
type attempts struct {
	mu       sync.Mutex
	servers  []string
	payloads [][]byte
}

// refunds answers the n-th Refund (counted over every fake of log) with
// errs(n), or refunds when that is nil.
type refunds struct {
	quoratev1connect.UnimplementedAdmissionServiceHandler
	name string
	errs func(n int) error
	log  *attempts
}

func (f *refunds) Refund(_ context.Context, req *connect.Request[quoratev1.RefundRequest]) (*connect.Response[quoratev1.RefundResponse], error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req.Msg)
	if err != nil {
		return nil, err
	}
	f.log.mu.Lock()
	f.log.payloads = append(f.log.payloads, b)
	f.log.servers = append(f.log.servers, f.name)
	n := len(f.log.servers)
	f.log.mu.Unlock()
	if err := f.errs(n); err != nil {
		return nil, err
	}
	return connect.NewResponse(&quoratev1.RefundResponse{Refunded: true, Cost: 2}), nil
}

// TestInvokeRetriesTheSameRequestInTurn: with DisableRouting, Invoke's
// attempts go to the servers in turn, every one with the same payload, until
// one is answered.
func TestInvokeRetriesTheSameRequestInTurn(t *testing.T) {
	var log attempts
	errs := func(n int) error {
		switch n {
		case 1:
			return outcomeUnknownErr()
		case 2:
			return notLeaderErr()
		case 3, 4:
			return connect.NewError(connect.CodeDeadlineExceeded, errors.New("apply timed out"))
		}
		return nil
	}
	var urls []string
	for _, name := range []string{"a", "b", "c"} {
		urls = append(urls, serve(t, &refunds{name: name, errs: errs, log: &log}))
	}
	c, err := New(Config{Servers: urls, DisableRouting: true, InitialBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := &quoratev1.RefundRequest{Caller: "svc", RequestId: NewRequestID(), Key: "k"}
	sent := proto.Clone(req)
	var retries atomic.Int64
	c.cfg.OnRetry = func(RetryInfo) { retries.Add(1) }
	resp, err := Invoke(context.Background(), c, Call{Procedure: "Refund", Key: "k", RequestID: req.RequestId},
		func(ctx context.Context, s Services) (*connect.Response[quoratev1.RefundResponse], error) {
			return s.Admission.Refund(ctx, connect.NewRequest(req))
		})
	if err != nil || !resp.GetRefunded() {
		t.Fatalf("%v, %v", resp, err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if want := []string{"a", "b", "c", "a", "b"}; !slices.Equal(log.servers, want) || retries.Load() != 4 {
		t.Errorf("servers tried %v after %d retries, want %v", log.servers, retries.Load(), want)
	}
	for i, b := range log.payloads {
		if string(b) != string(log.payloads[0]) {
			t.Errorf("attempt %d sent a different payload than the first", i+1)
		}
	}
	if !proto.Equal(req, sent) {
		t.Errorf("the request changed during the retries")
	}
}

// TestInvokeRemembersAnUnknownOutcome: an attempt that may have been
// applied leaves the outcome unknown even when a later attempt is answered
// with an error about the request, or reaches no server.
func TestInvokeRemembersAnUnknownOutcome(t *testing.T) {
	for name, later := range map[string]error{
		"not_found after":  connect.NewError(connect.CodeNotFound, errors.New("no such request")),
		"no server after":  dialErr(),
		"read-only before": nil,
	} {
		t.Run(name, func(t *testing.T) {
			f := &refunds{name: "a", log: &attempts{}, errs: func(n int) error {
				if n == 1 || later == nil {
					return outcomeUnknownErr()
				}
				return later
			}}
			c := fastClient(t, serve(t, f))
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := Invoke(ctx, c, Call{Procedure: "Refund", RequestID: "r-1", ReadOnly: later == nil},
				func(ctx context.Context, s Services) (*connect.Response[quoratev1.RefundResponse], error) {
					return s.Admission.Refund(ctx, connect.NewRequest(&quoratev1.RefundRequest{RequestId: "r-1"}))
				})
			var ou *OutcomeUnknownError
			if got := errors.As(err, &ou); got != (later != nil) {
				t.Fatalf("%v: outcome unknown %t, want %t", err, got, later != nil)
			}
			if ou != nil && (ou.RequestID != "r-1" || ou.Attempts < 2) {
				t.Errorf("%+v", ou)
			}
		})
	}
}

// TestDisableCoalescing: concurrent Admits to one node are each their own
// Admit call.
func TestDisableCoalescing(t *testing.T) {
	const n = 16
	var arrived atomic.Int64
	all := make(chan struct{})
	h := admitFunc(func(ctx context.Context) error {
		if arrived.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	mux := http.NewServeMux()
	mux.Handle(quoratev1connect.NewAdmissionServiceHandler(&admitOnly{f: h}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := New(Config{Servers: []string{srv.URL}, DisableCoalescing: true, DisableRouting: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Policy: "p", Key: "k", NoFallback: true}
	}
	for i, r := range c.AdmitBatch(context.Background(), reqs) {
		if r.Err != nil || !r.Decision.Allowed {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	if arrived.Load() != n {
		t.Errorf("%d Admit calls, want %d", arrived.Load(), n)
	}
}

// admitFunc is what admitOnly does before it answers.
type admitFunc func(ctx context.Context) error

// admitOnly answers every Admit allowed once f returns nil; AdmitBatch is
// unimplemented.
type admitOnly struct {
	quoratev1connect.UnimplementedAdmissionServiceHandler
	f admitFunc
}

func (a *admitOnly) Admit(ctx context.Context, _ *connect.Request[quoratev1.AdmitRequest]) (*connect.Response[quoratev1.AdmitResponse], error) {
	if err := a.f(ctx); err != nil {
		return nil, err
	}
	return connect.NewResponse(&quoratev1.AdmitResponse{Allowed: true}), nil
}

// TestAsMismatch: the classification of mismatches, and that a mismatch is
// final and certain.
func TestAsMismatch(t *testing.T) {
	cause := connect.NewError(connect.CodeUnavailable, errors.New("http: server gave HTTP response to HTTPS client"))
	m := AsMismatch("Admit", "https://127.0.0.1:1", cause)
	if m == nil || m.Kind != MismatchPlaintextServer || m.Server != "https://127.0.0.1:1" || m.Procedure != "Admit" {
		t.Fatalf("AsMismatch: %+v", m)
	}
	if retryable(m) || outcomeUnknown(m) || undecided(m) {
		t.Errorf("retryable %t, outcomeUnknown %t, undecided %t; want none", retryable(m), outcomeUnknown(m), undecided(m))
	}
	if connect.CodeOf(m) != connect.CodeFailedPrecondition || !errors.Is(m, cause) {
		t.Errorf("code %v, wraps the cause %t; want failed_precondition and the cause", connect.CodeOf(m), errors.Is(m, cause))
	}
	if !strings.Contains(m.Error(), "https://127.0.0.1:1") || !strings.Contains(m.Error(), "serves plaintext") {
		t.Errorf("message %q", m)
	}
	// The same error from a plaintext server URL is not a mismatch.
	if m := AsMismatch("Admit", "http://127.0.0.1:1", cause); m != nil {
		t.Errorf("plaintext server: %v, want no mismatch", m)
	}
	// A Quorate node's own unimplemented (a wire error) is its answer.
	wire := connect.NewWireError(connect.CodeUnimplemented, errors.New("node: Routes is not served yet"))
	if m := AsMismatch("Routes", "http://127.0.0.1:1", wire); m != nil {
		t.Errorf("a node's unimplemented: %v, want no mismatch", m)
	}
	// An HTTP server's 404 is not a node's answer.
	notFound := connect.NewError(connect.CodeUnimplemented, errors.New("HTTP status 404 Not Found"))
	if m := AsMismatch("Admit", "http://127.0.0.1:1", notFound); m == nil || m.Kind != MismatchNotQuorate || connect.CodeOf(m) != connect.CodeUnimplemented {
		t.Errorf("404: %v, want not a Quorate node", m)
	}
	// One item of a batch is an answer.
	item := itemErrorOf(&quoratev1.AdmitBatchError{Code: "unimplemented"})
	if m := AsMismatch("Admit", "http://127.0.0.1:1", item); m != nil {
		t.Errorf("batch item: %v, want no mismatch", m)
	}
}
