package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// Errors as the server and the transport produce them.

// errWithDetail is a server's answer with a detail, as the client sees it.
func errWithDetail(code connect.Code, msg string, detail proto.Message) *connect.Error {
	ce := connect.NewWireError(code, errors.New(msg))
	d, err := connect.NewErrorDetail(detail)
	if err != nil {
		panic(err)
	}
	ce.AddDetail(d)
	return ce
}

func outcomeUnknownErr() *connect.Error {
	return errWithDetail(connect.CodeUnavailable, "node: outcome unknown: leadership lost while committing",
		&quoratev1.OutcomeUnknown{Reason: "leadership lost"})
}

func notLeaderErr() *connect.Error {
	return errWithDetail(connect.CodeUnavailable, "node: not leader", &quoratev1.NotLeader{})
}

// dialErr is what net/http returns for a refused connection, as connect
// wraps it.
func dialErr() error {
	return connect.NewError(connect.CodeUnavailable, &url.Error{Op: "Post", URL: "http://127.0.0.1:1/x",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}})
}

// realRefusedDial dials a port that was just closed.
func realRefusedDial(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	conn, err := net.Dial("tcp", addr)
	if err == nil {
		conn.Close()
		t.Skip("the closed port was taken again")
	}
	return fmt.Errorf("post: %w", err)
}

func TestRetryable(t *testing.T) {
	resetRead := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	tests := []struct {
		name string
		err  error
		want bool
		// unknown is whether the attempt may have been applied.
		unknown bool
	}{
		{"nil", nil, false, false},
		{"plain error", errors.New("boom"), false, true},

		// Every Connect code, as the server would answer it.
		{"canceled", connect.NewWireError(connect.CodeCanceled, errors.New("x")), false, false},
		{"unknown", connect.NewWireError(connect.CodeUnknown, errors.New("x")), false, false},
		{"invalid_argument", connect.NewWireError(connect.CodeInvalidArgument, errors.New("x")), false, false},
		{"deadline_exceeded from the server", connect.NewWireError(connect.CodeDeadlineExceeded, errors.New("apply timed out")), true, true},
		{"not_found", connect.NewWireError(connect.CodeNotFound, errors.New("x")), false, false},
		{"already_exists", connect.NewWireError(connect.CodeAlreadyExists, errors.New("x")), false, false},
		{"permission_denied", connect.NewWireError(connect.CodePermissionDenied, errors.New("x")), false, false},
		{"resource_exhausted", connect.NewWireError(connect.CodeResourceExhausted, errors.New("x")), false, false},
		{"failed_precondition", connect.NewWireError(connect.CodeFailedPrecondition, errors.New("x")), false, false},
		{"aborted", connect.NewWireError(connect.CodeAborted, errors.New("x")), false, false},
		{"out_of_range", connect.NewWireError(connect.CodeOutOfRange, errors.New("x")), false, false},
		{"unimplemented", connect.NewWireError(connect.CodeUnimplemented, errors.New("x")), false, false},
		{"internal", connect.NewWireError(connect.CodeInternal, errors.New("x")), false, false},
		{"unavailable without detail", connect.NewWireError(connect.CodeUnavailable, errors.New("no leader")), true, false},
		{"data_loss", connect.NewWireError(connect.CodeDataLoss, errors.New("x")), false, false},
		{"unauthenticated", connect.NewWireError(connect.CodeUnauthenticated, errors.New("x")), false, false},

		// Details.
		{"unavailable with outcome unknown", outcomeUnknownErr(), true, true},
		{"unavailable with not leader", notLeaderErr(), true, false},
		{"unavailable made by the client", connect.NewError(connect.CodeUnavailable, errors.New("x")), true, true},
		{"invalid_argument with field violation", errWithDetail(connect.CodeInvalidArgument, "request_id reused",
			&quoratev1.FieldViolation{Field: "request_id"}), false, false},
		{"outcome unknown wrapped", fmt.Errorf("admit: %w", outcomeUnknownErr()), true, true},

		// One item of an AdmitBatch answer.
		{"batch item unavailable", itemErrorOf(&quoratev1.AdmitBatchError{Code: "unavailable", Message: "no leader"}), true, false},
		{"batch item outcome unknown", itemErrorOf(&quoratev1.AdmitBatchError{Code: "unavailable", OutcomeUnknown: true}), true, true},
		{"batch item invalid_argument", itemErrorOf(&quoratev1.AdmitBatchError{Code: "invalid_argument", Field: "key"}), false, false},
		{"batch item deadline_exceeded", itemErrorOf(&quoratev1.AdmitBatchError{Code: "deadline_exceeded"}), true, true},
		{"never sent", errors.Join(ErrNotSent, context.DeadlineExceeded), false, false},

		// The transport.
		{"dial error wrapped by connect", dialErr(), true, false},
		{"dial error wrapped by fmt", fmt.Errorf("admit: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), true, false},
		{"real refused dial", realRefusedDial(t), true, false},
		{"connection reset", connect.NewError(connect.CodeUnavailable, resetRead), true, true},
		{"io.EOF", io.EOF, true, true},
		{"unexpected EOF reading the body", connect.NewError(connect.CodeUnknown, io.ErrUnexpectedEOF), true, true},
		{"broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), true, true},

		// The caller's own deadline: the time to retry is over.
		{"parent deadline", context.DeadlineExceeded, false, true},
		{"parent deadline wrapped", fmt.Errorf("admit: %w", context.DeadlineExceeded), false, true},
		{"parent deadline as connect wraps it", connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded), false, true},
		{"parent canceled", connect.NewError(connect.CodeCanceled, context.Canceled), false, true},
		{"dial cut by the parent deadline", &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retryable(tt.err); got != tt.want {
				t.Errorf("retryable(%v) = %v, want %v", tt.err, got, tt.want)
			}
			if got := outcomeUnknown(tt.err); got != tt.unknown {
				t.Errorf("outcomeUnknown(%v) = %v, want %v", tt.err, got, tt.unknown)
			}
		})
	}
}

func TestBackoffWait(t *testing.T) {
	// wait returns the jittered wait before retry number n (1 for the wait
	// after the first failed attempt) of a request's fresh copy of b.
	wait := func(orig *jitteredBackoff, n int) time.Duration {
		b := *orig
		b.Reset()
		var d time.Duration
		for range n {
			d = b.NextBackOff()
		}
		return d
	}
	b := newJitteredBackoff(20*time.Millisecond, 500*time.Millisecond)
	for i, ms := range []time.Duration{20, 40, 80, 160, 320, 500, 500, 500} {
		n, want := i+1, ms*time.Millisecond
		seen := make(map[time.Duration]bool)
		for range 100 {
			got := wait(b, n)
			if got < want/2 || got > want {
				t.Fatalf("wait(%d) = %v, want within [%v, %v]", n, got, want/2, want)
			}
			seen[got] = true
		}
		if len(seen) < 2 {
			t.Errorf("wait(%d) has no jitter: always %v", n, wait(b, n))
		}
	}
	if got := wait(b, 1000); got > b.MaxInterval {
		t.Errorf("wait(1000) = %v, want at most %v", got, b.MaxInterval)
	}
}

// flaky answers every Admit with err until n attempts were made, then
// admits; it records the request IDs it saw.
type flaky struct {
	quoratev1connect.UnimplementedAdmissionServiceHandler
	err      func() error
	n        int64
	attempts atomic.Int64
	ids      chan string
}

func (f *flaky) Admit(_ context.Context, req *connect.Request[quoratev1.AdmitRequest]) (*connect.Response[quoratev1.AdmitResponse], error) {
	f.ids <- req.Msg.GetRequestId()
	if f.attempts.Add(1) <= f.n {
		return nil, f.err()
	}
	return connect.NewResponse(&quoratev1.AdmitResponse{Allowed: true, Limit: 10, Remaining: 9}), nil
}

func serve(t *testing.T, h quoratev1connect.AdmissionServiceHandler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(quoratev1connect.NewAdmissionServiceHandler(h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func fastClient(t *testing.T, servers ...string) *Client {
	t.Helper()
	c, err := New(Config{Servers: servers, InitialBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestAdmitRetriesWithTheSameRequestID(t *testing.T) {
	f := &flaky{err: outcomeUnknownErrAsError, n: 3, ids: make(chan string, 10)}
	var retries atomic.Int64
	c := fastClient(t, serve(t, f))
	c.cfg.OnRetry = func(RetryInfo) { retries.Add(1) }
	d, err := c.Admit(context.Background(), Request{Policy: "p", Key: "k", NoFallback: true})
	if err != nil || !d.Allowed || d.Outcome != Verified {
		t.Fatalf("%+v, %v", d, err)
	}
	close(f.ids)
	for id := range f.ids {
		if id != d.RequestID || len(id) != 32 {
			t.Fatalf("attempt with request ID %q, answer %q", id, d.RequestID)
		}
	}
	if f.attempts.Load() != 4 || retries.Load() != 3 {
		t.Fatalf("%d attempts, %d retries; want 4, 3", f.attempts.Load(), retries.Load())
	}
}

func TestAdmitOutcomeUnknownAtTheDeadline(t *testing.T) {
	f := &flaky{err: outcomeUnknownErrAsError, n: 1 << 30, ids: make(chan string, 1<<16)}
	c := fastClient(t, serve(t, f))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Admit(ctx, Request{Policy: "p", Key: "k", RequestID: "r-1", NoFallback: true})
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) || ou.RequestID != "r-1" || ou.Attempts < 2 {
		t.Fatalf("%v, want an OutcomeUnknownError after retries", err)
	}
}

func TestAdmitNotAppliedWhenOutOfTime(t *testing.T) {
	f := &flaky{err: func() error { return notLeaderErr() }, n: 1 << 30, ids: make(chan string, 1<<16)}
	c := fastClient(t, serve(t, f))
	// The wait before a second attempt is longer than the time left: the
	// call ends after one attempt, answered NotLeader (certainly not
	// applied), rather than with an attempt cut by the deadline (unknown).
	c.cfg.InitialBackoff, c.cfg.MaxBackoff = time.Hour, time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Admit(ctx, Request{Policy: "p", Key: "k", NoFallback: true})
	var ou *OutcomeUnknownError
	if errors.As(err, &ou) || connect.CodeOf(err) != connect.CodeUnavailable || f.attempts.Load() != 1 {
		t.Fatalf("%v after %d attempts, want Unavailable (certainly not applied) after 1", err, f.attempts.Load())
	}
}

func TestAdmitDoesNotRetryAnAnswer(t *testing.T) {
	f := &flaky{err: func() error { return connect.NewError(connect.CodeInvalidArgument, errors.New("key: empty")) }, n: 1 << 30, ids: make(chan string, 10)}
	c := fastClient(t, serve(t, f))
	_, err := c.Admit(context.Background(), Request{Policy: "p"})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || f.attempts.Load() != 1 {
		t.Fatalf("%v after %d attempts, want InvalidArgument after 1", err, f.attempts.Load())
	}
}

func outcomeUnknownErrAsError() error { return outcomeUnknownErr() }

func TestNewValidates(t *testing.T) {
	for _, cfg := range []Config{{}, {Servers: []string{" "}}, {Servers: []string{"a:1"}, Timeout: -1},
		{Servers: []string{"a:1"}, LocalShare: 2}, {Servers: []string{"a:1"}, Policies: []Policy{{Name: "p", OnUnavailable: "maybe"}}}} {
		if c, err := New(cfg); err == nil {
			c.Close()
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}
