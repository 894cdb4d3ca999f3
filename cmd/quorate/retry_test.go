package main

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
	"slices"
	"strings"
	"sync"
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
		{"outcome unknown wrapped in rpcError", wrapRPC("Admit", "http://a", "r", outcomeUnknownErr()), true, true},

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
	wait := func(b jitteredBackoff, n int) time.Duration {
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

// fastRetrier retries quickly, for tests of the loop.
func fastRetrier(servers ...string) retrier {
	return retrier{servers: servers, backoff: newJitteredBackoff(time.Millisecond, 4*time.Millisecond),
		retryHint: "retry with: quorate admit --request-id r-42"}
}

// attemptLog records what a fake attempt function saw.
type attemptLog struct {
	mu       sync.Mutex
	servers  []string
	payloads [][]byte
}

func (l *attemptLog) add(server string, req *quoratev1.AdmitRequest) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		panic(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.servers = append(l.servers, server)
	l.payloads = append(l.payloads, b)
}

func TestRetryLoopStopsOnSuccessWithTheSameRequest(t *testing.T) {
	req := &quoratev1.AdmitRequest{Policy: "p", Key: "k", RequestId: newRequestID(), Caller: "svc"}
	sent := proto.Clone(req)
	var log attemptLog
	errs := []error{outcomeUnknownErr(), dialErr(), connect.NewWireError(connect.CodeDeadlineExceeded, errors.New("slow"))}
	attempts, err := fastRetrier("a", "b").do(context.Background(), func(ctx context.Context, server string) error {
		log.add(server, req)
		if n := len(log.servers); n <= len(errs) {
			return errs[n-1]
		}
		return nil
	})
	if err != nil || attempts != 4 {
		t.Fatalf("got %d attempts, %v; want 4 attempts and success", attempts, err)
	}
	if len(log.servers) != 4 {
		t.Fatalf("attempt function called %d times after success, want 4", len(log.servers))
	}
	for i, p := range log.payloads {
		if string(p) != string(log.payloads[0]) {
			t.Errorf("attempt %d sent a different payload than attempt 1", i+1)
		}
	}
	if !proto.Equal(req, sent) {
		t.Errorf("the request changed during the retries: %v, was %v", req, sent)
	}
}

func TestRetryLoopRotatesServers(t *testing.T) {
	var log attemptLog
	attempts, err := fastRetrier("a", "b", "c").do(context.Background(), func(ctx context.Context, server string) error {
		log.add(server, &quoratev1.AdmitRequest{})
		if len(log.servers) < 5 {
			return dialErr()
		}
		return nil
	})
	if err != nil || attempts != 5 {
		t.Fatalf("got %d attempts, %v; want 5 and success", attempts, err)
	}
	if want := []string{"a", "b", "c", "a", "b"}; !slices.Equal(log.servers, want) {
		t.Errorf("servers tried: %v, want %v", log.servers, want)
	}
}

func TestRetryLoopDoesNotRetryInvalidArgument(t *testing.T) {
	for _, code := range []connect.Code{connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeResourceExhausted, connect.CodeFailedPrecondition} {
		t.Run(code.String(), func(t *testing.T) {
			answer := connect.NewWireError(code, errors.New("request_id was already used"))
			calls := 0
			attempts, err := fastRetrier("a", "b").do(context.Background(), func(context.Context, string) error {
				calls++
				return answer
			})
			if attempts != 1 || calls != 1 {
				t.Errorf("%d attempts, %d calls; want 1", attempts, calls)
			}
			if err != answer { // returned as it is, not wrapped
				t.Errorf("got %v (%T), want the attempt's error", err, err)
			}
		})
	}
}

func TestRetryLoopStopsAtTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var last error
	attempts, err := fastRetrier("a", "b").do(ctx, func(ctx context.Context, _ string) error {
		last = outcomeUnknownErr() // a new error each time, to tell the last one
		return last
	})
	if attempts < 2 {
		t.Errorf("%d attempts in 50ms of 1-4ms waits, want several", attempts)
	}
	var re *retryError
	if !errors.As(err, &re) {
		t.Fatalf("got %v (%T), want a *retryError", err, err)
	}
	if !errors.Is(err, last) {
		t.Errorf("error %v does not wrap the last attempt's error", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !re.Unknown || re.Attempts != attempts {
		t.Errorf("got %+v; want stopped by the deadline, outcome unknown, %d attempts", re, attempts)
	}
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("code %v, want the last attempt's unavailable", connect.CodeOf(err))
	}
	// The message must say so, and how to retry.
	wantErrNaming(t, err, "outcome is unknown", "--request-id r-42")
}

func TestRetryLoopDeadlineDuringAnAttempt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	attempts, err := fastRetrier("a").do(ctx, func(ctx context.Context, _ string) error {
		<-ctx.Done() // the request was sent; no answer came
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	})
	var re *retryError
	if attempts != 1 || !errors.As(err, &re) || !re.Unknown || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %d attempts, %v; want 1 attempt cut by the deadline with an unknown outcome", attempts, err)
	}
	wantErrNaming(t, err, "outcome is unknown", "--request-id r-42")
}

func TestRetryLoopDeadlineWhenNothingWasSent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := fastRetrier("a", "b").do(ctx, func(context.Context, string) error { return dialErr() })
	var re *retryError
	if !errors.As(err, &re) || re.Unknown || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a retryError at the deadline with a known outcome", err)
	}
	if strings.Contains(err.Error(), "unknown") || !strings.Contains(err.Error(), "not applied") {
		t.Errorf("error %q should say the request was not applied", err)
	}
}

func TestRetryLoopRemembersAnUnknownOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	calls := 0
	_, err := fastRetrier("a", "b").do(ctx, func(context.Context, string) error {
		calls++
		if calls == 1 {
			return outcomeUnknownErr()
		}
		return dialErr() // later attempts reach no server
	})
	var re *retryError
	if !errors.As(err, &re) || !re.Unknown {
		t.Fatalf("got %v; the first attempt's outcome is unknown, so the result is", err)
	}

	// An answer after an unknown outcome ends the retries and keeps the mark.
	calls = 0
	answer := connect.NewWireError(connect.CodeNotFound, errors.New("unknown policy"))
	attempts, err := fastRetrier("a").do(context.Background(), func(context.Context, string) error {
		calls++
		if calls == 1 {
			return outcomeUnknownErr()
		}
		return answer
	})
	if attempts != 2 || !errors.As(err, &re) || !re.Unknown || re.Stopped != nil || !errors.Is(err, answer) ||
		connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("got %d attempts, %v; want 2, ending with not_found and an unknown outcome", attempts, err)
	}
}

func TestRetryLoopCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	attempts, err := fastRetrier("a").do(ctx, func(context.Context, string) error {
		cancel() // Ctrl-C while the attempt fails
		return notLeaderErr()
	})
	if attempts != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %d attempts, %v; want 1 and canceled", attempts, err)
	}
}

// fakeAdmission is an AdmissionService whose answers a test scripts. It
// records every request it receives.
type fakeAdmission struct {
	quoratev1connect.UnimplementedAdmissionServiceHandler
	mu       sync.Mutex
	received []*quoratev1.AdmitRequest
	answer   func(n int, req *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, error) // n counts from 1

	// Peek and Refund, for the tests that use them.
	peeks   []*quoratev1.PeekRequest
	peek    func(n int, req *quoratev1.PeekRequest) (*quoratev1.PeekResponse, error)
	refunds []*quoratev1.RefundRequest
	refund  func(n int, req *quoratev1.RefundRequest) (*quoratev1.RefundResponse, error)
}

func (f *fakeAdmission) Peek(_ context.Context, req *connect.Request[quoratev1.PeekRequest]) (*connect.Response[quoratev1.PeekResponse], error) {
	f.mu.Lock()
	f.peeks = append(f.peeks, proto.CloneOf(req.Msg))
	n := len(f.peeks)
	f.mu.Unlock()
	resp, err := f.peek(n, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

func (f *fakeAdmission) Refund(_ context.Context, req *connect.Request[quoratev1.RefundRequest]) (*connect.Response[quoratev1.RefundResponse], error) {
	f.mu.Lock()
	f.refunds = append(f.refunds, proto.CloneOf(req.Msg))
	n := len(f.refunds)
	f.mu.Unlock()
	resp, err := f.refund(n, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// peekRequests and refundRequests return what the fake received.
func (f *fakeAdmission) peekRequests() []*quoratev1.PeekRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.peeks)
}

func (f *fakeAdmission) refundRequests() []*quoratev1.RefundRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.refunds)
}

func (f *fakeAdmission) Admit(_ context.Context, req *connect.Request[quoratev1.AdmitRequest]) (*connect.Response[quoratev1.AdmitResponse], error) {
	f.mu.Lock()
	f.received = append(f.received, proto.CloneOf(req.Msg))
	n := len(f.received)
	f.mu.Unlock()
	resp, err := f.answer(n, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

func (f *fakeAdmission) requests() []*quoratev1.AdmitRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.received)
}

// serveFake serves f on a test server. When dropFirst is set, the first HTTP
// request's connection is closed without an answer, as by a crashing node.
func serveFake(t *testing.T, f *fakeAdmission, dropFirst bool) *httptest.Server {
	t.Helper()
	_, h := quoratev1connect.NewAdmissionServiceHandler(f)
	return serveHandler(t, h, dropFirst)
}

// serveHandler serves h (a fake service's Connect handler) on a test server,
// dropping the first connection when dropFirst is set, as serveFake.
func serveHandler(t *testing.T, h http.Handler, dropFirst bool) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	var dropped sync.Once
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		drop := false
		if dropFirst {
			dropped.Do(func() { drop = true })
		}
		if drop {
			_, _ = io.Copy(io.Discard, r.Body)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.Close()
			return
		}
		h.ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestAdmitRetriesWithTheSameRequest(t *testing.T) {
	first := &quoratev1.AdmitResponse{Allowed: true, Limit: 10, Remaining: 9, PolicyVersion: 3}
	f := &fakeAdmission{answer: func(n int, _ *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, error) {
		switch n {
		case 1:
			return nil, outcomeUnknownErr() // applied, but the answer was lost
		case 2:
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("no leader"))
		default:
			dup := proto.CloneOf(first)
			dup.Duplicate = true
			return dup, nil
		}
	}}
	srv := serveFake(t, f, true) // and the very first connection drops
	out, errOut, err := runCLI(t, "admit", "-v", "--server", srv.URL, "--policy", "p", "--key", "k", "--cost", "2", "--caller", "billing")
	if err != nil {
		t.Fatalf("admit: %v\nstderr: %s", err, errOut)
	}
	reqs := f.requests()
	if len(reqs) != 3 {
		t.Fatalf("server saw %d requests, want 3 (after one dropped connection)", len(reqs))
	}
	if reqs[0].GetRequestId() == "" || reqs[0].GetCaller() != "billing" || reqs[0].GetCost() != 2 {
		t.Errorf("request %v lacks its request ID, caller or cost", reqs[0])
	}
	for i, r := range reqs {
		if !proto.Equal(r, reqs[0]) {
			t.Errorf("attempt %d sent %v, the first sent %v", i+1, r, reqs[0])
		}
	}
	// 4 attempts: the dropped connection, outcome unknown, unavailable, the answer.
	if !strings.HasPrefix(out, "allowed (duplicate)  remaining=9/10") || !strings.Contains(out, "attempts=4") ||
		!strings.Contains(out, "request_id="+reqs[0].GetRequestId()) {
		t.Errorf("output %q; want a duplicate allowed decision after 4 attempts with the request ID", out)
	}
	if strings.Count(errOut, "retrying in") != 3 {
		t.Errorf("stderr should report 3 retries:\n%s", errOut)
	}
}

func TestAdmitUnknownOutcomeAtTheDeadline(t *testing.T) {
	f := &fakeAdmission{answer: func(int, *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, error) {
		return nil, outcomeUnknownErr()
	}}
	srv := serveFake(t, f, false)
	_, _, err := runCLI(t, "admit", "--server", srv.URL, "--policy", "p", "--key", "tenant a", "--request-id", "R-1", "--timeout", "150ms", "-o", "json")
	// The code is the last attempt's: unavailable, or deadline_exceeded when
	// the deadline cut an attempt in flight (timing decides which).
	if code := connect.CodeOf(err); code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v (code %v), want unavailable at the deadline", err, connect.CodeOf(err))
	}
	wantErrNaming(t, err, "outcome is unknown", "quorate admit --server "+srv.URL+" --policy p --key 'tenant a' --request-id R-1")
	if n := len(f.requests()); n < 2 {
		t.Errorf("server saw %d attempts in 150ms, want several", n)
	}
}

func TestAdmitDoesNotRetryAnAnswer(t *testing.T) {
	f := &fakeAdmission{answer: func(int, *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, error) {
		return nil, errWithDetail(connect.CodeInvalidArgument, "request_id reused", &quoratev1.FieldViolation{Field: "request_id", Description: "reused"})
	}}
	srv := serveFake(t, f, false)
	_, _, err := runCLI(t, "admit", "--server", srv.URL+","+srv.URL, "--policy", "p", "--key", "k")
	var rpcErr *rpcError
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !errors.As(err, &rpcErr) {
		t.Fatalf("got %v, want the invalid_argument answer as an *rpcError", err)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("server saw %d attempts, want 1", n)
	}
}

func TestFormatDecision(t *testing.T) {
	d := &quoratev1.AdmitResponse{Allowed: false, Limit: 5, Remaining: 0, Duplicate: true}
	if got := formatDecision(d, "r", 1); !strings.HasPrefix(got, "denied (duplicate)   remaining=0/5") || strings.Contains(got, "attempts") {
		t.Errorf("got %q", got)
	}
	d.Duplicate = false
	if got := formatDecision(d, "r", 3); !strings.HasPrefix(got, "denied   remaining=0/5") || !strings.HasSuffix(got, "request_id=r  attempts=3") {
		t.Errorf("got %q", got)
	}
}

func TestServerList(t *testing.T) {
	got, err := serverURLs("127.0.0.1:7070, http://127.0.0.1:7071/")
	if want := []string{"http://127.0.0.1:7070", "http://127.0.0.1:7071"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("serverURLs = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"a:1,", ",a:1", "a:1,ftp://b"} {
		if _, err := serverURLs(bad); err == nil {
			t.Errorf("serverURLs(%q): want an error", bad)
		}
	}
	// Commands that do not retry take one server.
	_, _, err = runCLI(t, "policy", "list", "--server", "a:1,b:2")
	wantErrNaming(t, err, "--server")
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{"abc-1.2": "abc-1.2", "": "''", "a b": "'a b'", "it's": `'it'\''s'`, "http://h:1,h:2": "http://h:1,h:2"} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
