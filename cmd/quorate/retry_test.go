package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/cmd/internal/apiflags"
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

// closedPort returns the address of a port that was just closed: a dial
// to it is refused.
func closedPort(t *testing.T) string {
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
	return addr
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
// dropping the first connection when dropFirst is set, as serveFake. The
// calls a client makes in the background (Routes, Policies)
// are never dropped: the first call a command makes is.
func serveHandler(t *testing.T, h http.Handler, dropFirst bool) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	var dropped sync.Once
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		drop := false
		if dropFirst && !backgroundCall(r.URL.Path) {
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

// backgroundCall reports whether path is that of a call package client
// makes on its own, or of the probe a data command sends before its request
// (probe.go).
func backgroundCall(path string) bool {
	for _, p := range []string{quoratev1connect.AdmissionServiceRoutesProcedure, quoratev1connect.AdmissionServicePoliciesProcedure, "/healthz"} {
		if path == p {
			return true
		}
	}
	return false
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

// onePolicyAdmin is an AdminService that answers ListPolicies with one
// policy.
type onePolicyAdmin struct {
	quoratev1connect.UnimplementedAdminServiceHandler
}

func (onePolicyAdmin) ListPolicies(context.Context, *connect.Request[quoratev1.ListPoliciesRequest]) (*connect.Response[quoratev1.ListPoliciesResponse], error) {
	return connect.NewResponse(&quoratev1.ListPoliciesResponse{Policies: []*quoratev1.Policy{{Name: "api-free", Algorithm: "token_bucket", Limit: 10, Version: 1}}}), nil
}

// A command that talks to one node takes a --server list (or
// $QUORATE_SERVER holding one) and uses the first node that accepts a
// connection, or the first of them when none does.
func TestSingleServerCommandTakesAList(t *testing.T) {
	_, h := quoratev1connect.NewAdminServiceHandler(onePolicyAdmin{})
	srv := serveHandler(t, h, false)
	dead := closedPort(t)
	out, errOut, err := runCLI(t, "policy", "list", "--server", dead+","+srv.URL)
	if err != nil || !strings.Contains(out, "api-free") {
		t.Fatalf("policy list over %s,%s: %v\n%s%s", dead, srv.URL, err, out, errOut)
	}
	t.Setenv(apiflags.ServerEnv, dead+", "+srv.URL)
	if out, _, err := runCLI(t, "policy", "list"); err != nil || !strings.Contains(out, "api-free") {
		t.Fatalf("policy list with $%s=%s,%s: %v\n%s", apiflags.ServerEnv, dead, srv.URL, err, out)
	}
	// None reachable: the first is named in the error.
	other := closedPort(t)
	_, _, err = runCLI(t, "policy", "list", "--server", dead+","+other, "--timeout", "3s")
	wantErrNaming(t, err, dead)
	// A bad entry is refused, naming the flag.
	_, _, err = runCLI(t, "policy", "list", "--server", srv.URL+",ftp://b")
	wantErrNaming(t, err, "--server")
}

// Every attempt's connection refused: at --timeout the request certainly
// was not applied, and the error says so (exit status 1).
func TestAdmitDeadlineWhenNothingWasSent(t *testing.T) {
	_, _, err := runCLI(t, "admit", "--server", closedPort(t), "--policy", "p", "--key", "k", "--timeout", "200ms")
	var re *retryError
	if !errors.As(err, &re) || re.Unknown || !errors.Is(err, context.DeadlineExceeded) || re.Attempts < 2 {
		t.Fatalf("got %v, want a retryError at the deadline after several attempts, with a known outcome", err)
	}
	if strings.Contains(err.Error(), "unknown") || !strings.Contains(err.Error(), "not applied") || exitStatus(err) != exitError {
		t.Errorf("error %q (exit status %d) should say the request was not applied, exit status 1", err, exitStatus(err))
	}
}

// An attempt whose outcome is unknown keeps the result unknown (exit status
// 3) even when a later attempt is answered with an error about the request.
func TestAdmitRemembersAnUnknownOutcome(t *testing.T) {
	f := &fakeAdmission{answer: func(n int, _ *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, error) {
		if n == 1 {
			return nil, outcomeUnknownErr()
		}
		return nil, connect.NewWireError(connect.CodeNotFound, errors.New("unknown policy"))
	}}
	srv := serveFake(t, f, false)
	_, _, err := runCLI(t, "admit", "--server", srv.URL, "--policy", "p", "--key", "k", "--request-id", "R-2")
	var re *retryError
	if !errors.As(err, &re) || !re.Unknown || re.Stopped != nil || connect.CodeOf(err) != connect.CodeNotFound || exitStatus(err) != exitUnknown {
		t.Fatalf("got %v (code %v, exit status %d); want not_found with an unknown outcome, exit status 3", err, connect.CodeOf(err), exitStatus(err))
	}
	wantErrNaming(t, err, "outcome is unknown", "--request-id R-2")
	if n := len(f.requests()); n != 2 {
		t.Errorf("server saw %d attempts, want 2", n)
	}
}

// A dead node in the --server list does not stop a retry: the next attempt
// goes to another node, with the same request.
func TestAdmitRetriesOnAnotherServer(t *testing.T) {
	f := &fakeAdmission{answer: func(int, *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, error) {
		return &quoratev1.AdmitResponse{Allowed: true, Limit: 10, Remaining: 9}, nil
	}}
	srv := serveFake(t, f, false)
	out, errOut, err := runCLI(t, "admit", "-v", "--server", closedPort(t)+","+srv.URL, "--policy", "p", "--key", "k")
	if err != nil || !strings.HasPrefix(out, "allowed") || !strings.Contains(out, "attempts=2") || !strings.Contains(errOut, "attempt 1 failed") {
		t.Fatalf("admit: %v\n%s%s", err, out, errOut)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{"abc-1.2": "abc-1.2", "": "''", "a b": "'a b'", "it's": `'it'\''s'`, "http://h:1,h:2": "http://h:1,h:2"} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
