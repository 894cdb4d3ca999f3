package main

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// fakeLease is a LeaseService whose answers a test scripts. It records every
// request it receives. A method whose answer function is nil is
// unimplemented.
type fakeLease struct {
	quoratev1connect.UnimplementedLeaseServiceHandler
	mu       sync.Mutex
	acquires []*quoratev1.AcquireLeaseRequest
	renews   []*quoratev1.RenewLeaseRequest
	releases []*quoratev1.ReleaseLeaseRequest
	checks   []*quoratev1.CheckFenceRequest

	acquire func(n int, req *quoratev1.AcquireLeaseRequest) (*quoratev1.AcquireLeaseResponse, error) // n counts from 1
	renew   func(n int, req *quoratev1.RenewLeaseRequest) (*quoratev1.RenewLeaseResponse, error)
	release func(n int, req *quoratev1.ReleaseLeaseRequest) (*quoratev1.ReleaseLeaseResponse, error)
	check   func(n int, req *quoratev1.CheckFenceRequest) (*quoratev1.CheckFenceResponse, error)
}

// fakeAnswer records req in log and answers it with answer.
func fakeAnswer[Req proto.Message, Resp any](f *fakeLease, log *[]Req, answer func(int, Req) (*Resp, error), req Req) (*connect.Response[Resp], error) {
	f.mu.Lock()
	*log = append(*log, proto.CloneOf(req))
	n := len(*log)
	f.mu.Unlock()
	if answer == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("not scripted"))
	}
	resp, err := answer(n, req)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// received returns a copy of one of f's request logs.
func received[Req any](f *fakeLease, log *[]Req) []Req {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(*log)
}

func (f *fakeLease) AcquireLease(_ context.Context, req *connect.Request[quoratev1.AcquireLeaseRequest]) (*connect.Response[quoratev1.AcquireLeaseResponse], error) {
	return fakeAnswer(f, &f.acquires, f.acquire, req.Msg)
}

func (f *fakeLease) RenewLease(_ context.Context, req *connect.Request[quoratev1.RenewLeaseRequest]) (*connect.Response[quoratev1.RenewLeaseResponse], error) {
	return fakeAnswer(f, &f.renews, f.renew, req.Msg)
}

func (f *fakeLease) ReleaseLease(_ context.Context, req *connect.Request[quoratev1.ReleaseLeaseRequest]) (*connect.Response[quoratev1.ReleaseLeaseResponse], error) {
	return fakeAnswer(f, &f.releases, f.release, req.Msg)
}

func (f *fakeLease) CheckFence(_ context.Context, req *connect.Request[quoratev1.CheckFenceRequest]) (*connect.Response[quoratev1.CheckFenceResponse], error) {
	return fakeAnswer(f, &f.checks, f.check, req.Msg)
}

func serveFakeLease(t *testing.T, f *fakeLease, dropFirst bool) *httptest.Server {
	t.Helper()
	_, h := quoratev1connect.NewLeaseServiceHandler(f)
	return serveHandler(t, h, dropFirst)
}

// staleTokenErr is the server's answer to a token that holds no slot.
func staleTokenErr() *connect.Error {
	return connect.NewWireError(connect.CodeFailedPrecondition, errors.New("lease: not holder: token 7 of reports/tenant-a holds no slot"))
}

var (
	leaseExpires = timestamppb.New(time.Date(2026, 1, 2, 3, 6, 5, 0, time.UTC))
	leaseDecided = timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
)

// TestLeaseAcquireRetriesWithTheSameRequest: a request ID is generated once
// and every attempt, after a dropped connection and an unknown outcome, sends
// the same request; the recorded lease comes back as a duplicate.
func TestLeaseAcquireRetriesWithTheSameRequest(t *testing.T) {
	f := &fakeLease{acquire: func(n int, _ *quoratev1.AcquireLeaseRequest) (*quoratev1.AcquireLeaseResponse, error) {
		if n == 1 {
			return nil, outcomeUnknownErr() // acquired, but the answer was lost
		}
		return &quoratev1.AcquireLeaseResponse{Allowed: true, LeaseId: "L7", FencingToken: 7, ExpiresAt: leaseExpires,
			Limit: 2, Held: 1, PolicyVersion: 3, DecidedAt: leaseDecided, Duplicate: true}, nil
	}}
	srv := serveFakeLease(t, f, true) // and the very first connection drops
	out, errOut, err := runCLI(t, "lease", "acquire", "-v", "--server", srv.URL, "--policy", "p", "--key", "k", "--ttl", "90s", "--caller", "svc")
	if err != nil {
		t.Fatalf("lease acquire: %v\nstderr: %s", err, errOut)
	}
	reqs := received(f, &f.acquires)
	if len(reqs) != 2 {
		t.Fatalf("server saw %d acquires, want 2 (after one dropped connection)", len(reqs))
	}
	want := &quoratev1.AcquireLeaseRequest{Policy: "p", Key: "k", Caller: "svc", Ttl: durationpb.New(90 * time.Second),
		RequestId: reqs[0].GetRequestId()}
	if len(want.RequestId) != 32 {
		t.Errorf("request ID %q, want a generated 128-bit hex ID", want.RequestId)
	}
	for i, r := range reqs {
		if !proto.Equal(r, want) {
			t.Errorf("attempt %d sent %v, want %v", i+1, r, want)
		}
	}
	wantOut := "allowed (duplicate)  lease_id=L7  fencing_token=7  expires_at=2026-01-02T03:06:05Z  held=1/2  policy_version=3  " +
		"decided_at=2026-01-02T03:04:05Z  request_id=" + want.RequestId + "  attempts=3\n"
	if out != wantOut {
		t.Errorf("output\n%q, want\n%q", out, wantOut)
	}
	if strings.Count(errOut, "retrying in") != 2 || !strings.Contains(errOut, "attempt 2 failed: AcquireLease on "+srv.URL) {
		t.Errorf("stderr should report 2 retries:\n%s", errOut)
	}
}

func TestLeaseAcquireDenied(t *testing.T) {
	f := &fakeLease{acquire: func(int, *quoratev1.AcquireLeaseRequest) (*quoratev1.AcquireLeaseResponse, error) {
		return &quoratev1.AcquireLeaseResponse{Allowed: false, Limit: 2, Held: 2, RetryAfter: durationpb.New(1500*time.Millisecond + 1),
			PolicyVersion: 1, DecidedAt: leaseDecided}, nil
	}}
	srv := serveFakeLease(t, f, false)
	out, _, err := runCLI(t, "lease", "acquire", "--server", srv.URL, "--policy", "p", "--key", "k", "--request-id", "R-1")
	if err != nil {
		t.Fatalf("a denial is not an error: %v", err)
	}
	// retry_after is rounded up: waiting the printed time is never early.
	want := "denied   held=2/2  retry_after=1.501s  policy_version=1  decided_at=2026-01-02T03:04:05Z  request_id=R-1\n"
	if out != want {
		t.Errorf("output\n%q, want\n%q", out, want)
	}
	var resp quoratev1.AcquireLeaseResponse
	mustRunJSON(t, &resp, "lease", "acquire", "--server", srv.URL, "--policy", "p", "--key", "k", "-o", "json")
	if resp.GetAllowed() || resp.GetHeld() != 2 || resp.GetRetryAfter().AsDuration() != 1500*time.Millisecond+1 {
		t.Errorf("JSON denial: %v", &resp)
	}
	if reqs := received(f, &f.acquires); len(reqs) != 2 || reqs[0].GetRequestId() != "R-1" || reqs[0].GetTtl() != nil {
		t.Errorf("acquires sent: %v; want R-1 first, without a ttl", reqs)
	}
}

func TestLeaseAcquireUnknownOutcomeAtTheDeadline(t *testing.T) {
	f := &fakeLease{acquire: func(int, *quoratev1.AcquireLeaseRequest) (*quoratev1.AcquireLeaseResponse, error) {
		return nil, outcomeUnknownErr()
	}}
	srv := serveFakeLease(t, f, false)
	_, _, err := runCLI(t, "lease", "acquire", "--server", srv.URL, "--policy", "p", "--key", "tenant a", "--ttl", "90s",
		"--caller", "svc", "--request-id", "R-1", "--timeout", "100ms")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v (code %v), want the deadline", err, connect.CodeOf(err))
	}
	wantErrNaming(t, err, "outcome is unknown",
		"quorate lease acquire --server "+srv.URL+" --policy p --key 'tenant a' --ttl 1m30s --caller svc --request-id R-1")
}

func TestLeaseRenewRetriesWithTheSameRequestID(t *testing.T) {
	f := &fakeLease{renew: func(n int, req *quoratev1.RenewLeaseRequest) (*quoratev1.RenewLeaseResponse, error) {
		switch n {
		case 1:
			return nil, notLeaderErr()
		case 2:
			return nil, outcomeUnknownErr()
		}
		return &quoratev1.RenewLeaseResponse{LeaseId: req.GetLeaseId(), FencingToken: req.GetFencingToken(),
			ExpiresAt: leaseExpires, DecidedAt: leaseDecided, Duplicate: true}, nil
	}}
	srv := serveFakeLease(t, f, false)
	out, _, err := runCLI(t, "lease", "renew", "--server", srv.URL+","+srv.URL, "--lease-id", "L7", "--fencing-token", "7", "--ttl", "10m")
	if err != nil {
		t.Fatal(err)
	}
	reqs := received(f, &f.renews)
	if len(reqs) != 3 {
		t.Fatalf("server saw %d renews, want 3", len(reqs))
	}
	want := &quoratev1.RenewLeaseRequest{LeaseId: "L7", FencingToken: 7, Ttl: durationpb.New(10 * time.Minute), RequestId: reqs[0].GetRequestId()}
	if want.RequestId == "" {
		t.Error("renew sent no request ID")
	}
	for i, r := range reqs {
		if !proto.Equal(r, want) {
			t.Errorf("attempt %d sent %v, want %v", i+1, r, want)
		}
	}
	wantOut := "renewed (duplicate)  lease_id=L7  fencing_token=7  expires_at=2026-01-02T03:06:05Z  decided_at=2026-01-02T03:04:05Z  " +
		"request_id=" + want.RequestId + "  attempts=3\n"
	if out != wantOut {
		t.Errorf("output\n%q, want\n%q", out, wantOut)
	}

	// Out of time with the outcome unknown: the error says how to retry.
	f = &fakeLease{renew: func(int, *quoratev1.RenewLeaseRequest) (*quoratev1.RenewLeaseResponse, error) {
		return nil, outcomeUnknownErr()
	}}
	srv = serveFakeLease(t, f, false)
	_, _, err = runCLI(t, "lease", "renew", "--server", srv.URL, "--lease-id", "L7", "--fencing-token", "7", "--request-id", "N-1", "--timeout", "100ms")
	wantErrNaming(t, err, "outcome is unknown", "quorate lease renew --server "+srv.URL+" --lease-id L7 --fencing-token 7 --request-id N-1")
}

func TestLeaseReleaseRetriesWithTheSameRequestID(t *testing.T) {
	f := &fakeLease{release: func(n int, _ *quoratev1.ReleaseLeaseRequest) (*quoratev1.ReleaseLeaseResponse, error) {
		if n == 1 {
			return nil, outcomeUnknownErr() // released, but the answer was lost
		}
		return &quoratev1.ReleaseLeaseResponse{DecidedAt: leaseDecided, Duplicate: true}, nil
	}}
	srv := serveFakeLease(t, f, true) // and the first connection drops
	out, _, err := runCLI(t, "lease", "release", "--server", srv.URL, "--lease-id", "L7", "--fencing-token", "7", "--caller", "jobs", "--request-id", "done-7")
	if err != nil {
		t.Fatal(err)
	}
	want := &quoratev1.ReleaseLeaseRequest{LeaseId: "L7", FencingToken: 7, Caller: "jobs", RequestId: "done-7"}
	reqs := received(f, &f.releases)
	if len(reqs) != 2 {
		t.Fatalf("server saw %d releases, want 2", len(reqs))
	}
	for i, r := range reqs {
		if !proto.Equal(r, want) {
			t.Errorf("attempt %d sent %v, want %v", i+1, r, want)
		}
	}
	wantOut := "released (duplicate)  lease_id=L7  fencing_token=7  decided_at=2026-01-02T03:04:05Z  request_id=done-7  attempts=3" +
		" (an earlier attempt of this command may have released it)\n"
	if out != wantOut {
		t.Errorf("output\n%q, want\n%q", out, wantOut)
	}

	// Without --request-id one is generated, so that retries are safe.
	f = &fakeLease{release: func(n int, _ *quoratev1.ReleaseLeaseRequest) (*quoratev1.ReleaseLeaseResponse, error) {
		if n == 1 {
			return nil, notLeaderErr()
		}
		return &quoratev1.ReleaseLeaseResponse{DecidedAt: leaseDecided}, nil
	}}
	srv = serveFakeLease(t, f, false)
	var resp quoratev1.ReleaseLeaseResponse
	mustRunJSON(t, &resp, "lease", "release", "--server", srv.URL, "--lease-id", "L7", "--fencing-token", "7", "-o", "json")
	reqs = received(f, &f.releases)
	if len(reqs) != 2 || reqs[0].GetRequestId() == "" || !proto.Equal(reqs[0], reqs[1]) || resp.GetDuplicate() {
		t.Errorf("releases sent %v, answer %v; want the same generated request ID twice", reqs, &resp)
	}
}

// TestLeaseStaleTokenIsAnError: failed_precondition is an answer about the
// lease, not retried, printed with its code and message.
func TestLeaseStaleTokenIsAnError(t *testing.T) {
	f := &fakeLease{
		renew: func(int, *quoratev1.RenewLeaseRequest) (*quoratev1.RenewLeaseResponse, error) {
			return nil, staleTokenErr()
		},
		release: func(int, *quoratev1.ReleaseLeaseRequest) (*quoratev1.ReleaseLeaseResponse, error) {
			return nil, staleTokenErr()
		},
	}
	srv := serveFakeLease(t, f, false)
	for _, cmd := range []string{"renew", "release"} {
		out, _, err := runCLI(t, "lease", cmd, "--server", srv.URL+","+srv.URL, "--lease-id", "L7", "--fencing-token", "7")
		var rpcErr *rpcError
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !errors.As(err, &rpcErr) || out != "" {
			t.Fatalf("lease %s of a stale token: %v (output %q), want a failed_precondition *rpcError", cmd, err, out)
		}
		wantErrNaming(t, err, "failed_precondition", "lease: not holder: token 7 of reports/tenant-a holds no slot")
	}
	if n, m := len(received(f, &f.renews)), len(received(f, &f.releases)); n != 1 || m != 1 {
		t.Errorf("%d renews and %d releases sent, want one each: not retried", n, m)
	}
}

func TestLeaseCheck(t *testing.T) {
	f := &fakeLease{check: func(n int, req *quoratev1.CheckFenceRequest) (*quoratev1.CheckFenceResponse, error) {
		switch {
		case n == 1:
			return nil, notLeaderErr()
		case req.GetFencingToken() == 7:
			return &quoratev1.CheckFenceResponse{Held: true, ExpiresAt: leaseExpires, DecidedAt: leaseDecided}, nil
		default:
			return &quoratev1.CheckFenceResponse{Held: false, DecidedAt: leaseDecided}, nil
		}
	}}
	srv := serveFakeLease(t, f, false)
	out, _, err := runCLI(t, "lease", "check", "--server", srv.URL, "--lease-id", "L1", "--fencing-token", "7")
	if err != nil {
		t.Fatal(err)
	}
	if want := "held=true   fencing_token=7  expires_at=2026-01-02T03:06:05Z  decided_at=2026-01-02T03:04:05Z  attempts=2\n"; out != want {
		t.Errorf("output\n%q, want\n%q", out, want)
	}
	// Not held is an answer too, not an error, with exit status 2 as a
	// denial; held is 0.
	out, _, err = runCLI(t, "lease", "check", "--server", srv.URL, "--lease-id", "L1", "--fencing-token", "6")
	if want := "held=false  fencing_token=6  expires_at=-  decided_at=2026-01-02T03:04:05Z\n"; err != nil || out != want {
		t.Errorf("got %q, %v; want\n%q", out, err, want)
	}
	for token, want := range map[string]int{"6": exitDenied, "7": exitOK} {
		var stdout, stderr strings.Builder
		if status := execute(context.Background(), []string{"lease", "check", "--server", srv.URL, "--lease-id", "L1", "--fencing-token", token},
			&stdout, &stderr); status != want {
			t.Errorf("lease check of token %s: exit status %d, want %d\n%s%s", token, status, want, stdout.String(), stderr.String())
		}
	}
	var resp quoratev1.CheckFenceResponse
	mustRunJSON(t, &resp, "lease", "check", "--server", srv.URL, "--lease-id", "L1", "--fencing-token", "6", "-o", "json")
	if resp.GetHeld() || resp.GetExpiresAt() != nil {
		t.Errorf("JSON check: %v, want held false", &resp)
	}
	for _, r := range received(f, &f.checks) {
		if r.GetLeaseId() != "L1" {
			t.Errorf("check sent %v", r)
		}
	}

	// At the deadline a check's error does not talk about an unknown outcome:
	// it changes nothing.
	f = &fakeLease{check: func(int, *quoratev1.CheckFenceRequest) (*quoratev1.CheckFenceResponse, error) {
		return nil, outcomeUnknownErr()
	}}
	srv = serveFakeLease(t, f, false)
	_, _, err = runCLI(t, "lease", "check", "--server", srv.URL, "--lease-id", "L1", "--fencing-token", "7", "--timeout", "100ms")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the deadline", err)
	}
	if strings.Contains(err.Error(), "outcome is unknown") || strings.Contains(err.Error(), "applied") {
		t.Errorf("check error %q talks about applying", err)
	}
}

func TestFencingTokenFlag(t *testing.T) {
	var f fencingTokenFlag
	if f.String() != "" {
		t.Errorf("unset token flag String() = %q, want empty (so requireFlags reports it)", f.String())
	}
	for in, want := range map[string]int64{"1": 1, "42": 42, "+7": 7, "9223372036854775807": 1<<63 - 1} {
		var f fencingTokenFlag
		if err := f.Set(in); err != nil || f.v != want || f.String() == "" {
			t.Errorf("Set(%q) = %v, value %d; want %d", in, err, f.v, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "x", "1.5", "9223372036854775808"} {
		var f fencingTokenFlag
		if err := f.Set(in); err == nil {
			t.Errorf("Set(%q) accepted %d", in, f.v)
		}
	}
}

// deadlineLease is a LeaseService whose AcquireLease records its request
// and the time its deadline left, and answers allowed.
type deadlineLease struct {
	quoratev1connect.UnimplementedLeaseServiceHandler
	mu   sync.Mutex
	req  *quoratev1.AcquireLeaseRequest
	left time.Duration
}

func (d *deadlineLease) AcquireLease(ctx context.Context, req *connect.Request[quoratev1.AcquireLeaseRequest]) (*connect.Response[quoratev1.AcquireLeaseResponse], error) {
	dl, _ := ctx.Deadline()
	d.mu.Lock()
	d.req, d.left = proto.CloneOf(req.Msg), time.Until(dl)
	d.mu.Unlock()
	return connect.NewResponse(&quoratev1.AcquireLeaseResponse{Allowed: true, LeaseId: "L1", FencingToken: 1, Limit: 1, Held: 1}), nil
}

// lease acquire --max-wait asks the cluster to wait for a slot, and the
// command waits as long: its deadline grows by the wait unless --timeout is
// given.
func TestLeaseAcquireMaxWait(t *testing.T) {
	d := &deadlineLease{}
	_, h := quoratev1connect.NewLeaseServiceHandler(d)
	srv := serveHandler(t, h, false)
	for _, tc := range []struct {
		args     []string
		min, max time.Duration // of the deadline the server saw
	}{
		{[]string{"--max-wait", "30s"}, 30 * time.Second, 35 * time.Second}, // --timeout's default 5s + 30s
		{[]string{"--max-wait", "30s", "--timeout", "40s"}, 35 * time.Second, 40 * time.Second},
	} {
		var out, errOut strings.Builder // run, not runCLI: its context's deadline would be the one seen
		err := run(context.Background(), append([]string{"lease", "acquire", "--server", srv.URL, "--policy", "p", "--key", "k"}, tc.args...), &out, &errOut)
		if err != nil || !strings.HasPrefix(out.String(), "allowed") {
			t.Fatalf("lease acquire %s: %v\n%s%s", strings.Join(tc.args, " "), err, out.String(), errOut.String())
		}
		d.mu.Lock()
		req, left := d.req, d.left
		d.mu.Unlock()
		if req.GetMaxWait().AsDuration() != 30*time.Second {
			t.Errorf("lease acquire %s sent max_wait %v, want 30s", strings.Join(tc.args, " "), req.GetMaxWait())
		}
		if left <= tc.min || left > tc.max {
			t.Errorf("lease acquire %s: the server saw a deadline %v away, want within (%v, %v]", strings.Join(tc.args, " "), left, tc.min, tc.max)
		}
		if line := leaseAcquireCommandLine(srv.URL, req); !strings.Contains(line, " --max-wait 30s ") {
			t.Errorf("the retry command %q drops --max-wait", line)
		}
	}
}
