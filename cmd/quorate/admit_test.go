package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func cost(n int64) *int64 { return &n }

func TestParseCheck(t *testing.T) {
	for in, want := range map[string]*quoratev1.Check{
		"api:tenant-a":                     {Policy: "api", Key: "tenant-a"},
		"api@5:tenant-a":                   {Policy: "api", Key: "tenant-a", Cost: cost(5)},
		"api@+5:tenant-a":                  {Policy: "api", Key: "tenant-a", Cost: cost(5)},
		"login:{tenant:acme}:ip:1.2.3.4":   {Policy: "login", Key: "{tenant:acme}:ip:1.2.3.4"},
		"login@2:{tenant:acme}:ip:1.2.3.4": {Policy: "login", Key: "{tenant:acme}:ip:1.2.3.4", Cost: cost(2)},
		"api:{t}:user:42":                  {Policy: "api", Key: "{t}:user:42"}, // the key is all after the first ':'
		"api:key with spaces":              {Policy: "api", Key: "key with spaces"},
		"api:k:":                           {Policy: "api", Key: "k:"},
		"api::k":                           {Policy: "api", Key: ":k"},
		"api:k@3":                          {Policy: "api", Key: "k@3"},
	} {
		got, err := parseCheck(in)
		if err != nil || !proto.Equal(got, want) {
			t.Errorf("parseCheck(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, wantErr := range map[string]string{
		"api":                        "missing key",
		"api:":                       "missing key",
		"api@3:":                     "missing key",
		":tenant-a":                  "missing policy",
		"@3:tenant-a":                "missing policy",
		"":                           "missing key",
		"api@0:k":                    "bad cost 0",
		"api@-2:k":                   "bad cost -2",
		"api@:k":                     "bad cost",
		"api@x:k":                    "bad cost",
		"api@99999999999999999999:k": "bad cost",
	} {
		if got, err := parseCheck(in); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("parseCheck(%q) = %v, %v; want an error with %q", in, got, err, wantErr)
		}
	}
}

func TestFormatCheckRoundTrip(t *testing.T) {
	for _, c := range []*quoratev1.Check{
		{Policy: "api", Key: "tenant-a"},
		{Policy: "api", Key: "tenant-a", Cost: cost(3)},
		{Policy: "api", Key: "{t}:user:42"},
		{Policy: "api", Key: "k:"},
		{Policy: "api", Key: "{t}:ip:1.2.3.4"},
		{Policy: "api", Key: "{t}:n:7", Cost: cost(2)},
	} {
		s := formatCheck(c)
		back, err := parseCheck(s)
		if err != nil || !proto.Equal(back, c) {
			t.Errorf("formatCheck(%v) = %q, which parses as %v, %v", c, s, back, err)
		}
	}
}

func TestAlsoFlagIsRepeatable(t *testing.T) {
	cmd := newAdmitCmd()
	if err := cmd.ParseFlags([]string{"--also", "a:{t}:x", "--also=b@2:{t}:y"}); err != nil {
		t.Fatal(err)
	}
	f := cmd.Flags().Lookup("also").Value.(*checksFlag)
	want := []*quoratev1.Check{{Policy: "a", Key: "{t}:x"}, {Policy: "b", Key: "{t}:y", Cost: cost(2)}}
	if len(f.checks) != len(want) || !proto.Equal(f.checks[0], want[0]) || !proto.Equal(f.checks[1], want[1]) {
		t.Errorf("--also twice gave %v, want %v", f.checks, want)
	}
	if f.String() != "a:{t}:x b@2:{t}:y" {
		t.Errorf("String() = %q", f.String())
	}
}

// TestAdmitMultiCheckRetriesWithTheSameRequest: --also and --max-wait are
// part of the request built once; every retry sends them unchanged with the
// same request ID.
func TestAdmitMultiCheckRetriesWithTheSameRequest(t *testing.T) {
	denied := int32(1)
	f := &fakeAdmission{answer: func(n int, req *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, error) {
		if n == 1 {
			return nil, outcomeUnknownErr()
		}
		return &quoratev1.AdmitResponse{Allowed: false, Limit: 1, Duplicate: true, DeniedCheck: &denied, Checks: []*quoratev1.CheckResult{
			{Policy: "p", Key: "{t}:a", Allowed: true, Limit: 10, Remaining: 9},
			{Policy: "q", Key: "{t}:b", Allowed: false, Limit: 1},
		}}, nil
	}}
	srv := serveFake(t, f, false)
	out, errOut, err := runCLI(t, "admit", "--server", srv.URL, "--policy", "p", "--key", "{t}:a",
		"--also", "q:{t}:b", "--also", "r@3:{t}:c", "--max-wait", "250ms", "--request-id", "R-7")
	if err != nil {
		t.Fatalf("admit: %v\nstderr: %s", err, errOut)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(reqs))
	}
	want := &quoratev1.AdmitRequest{Policy: "p", Key: "{t}:a", RequestId: "R-7", MaxWait: durationpb.New(250 * time.Millisecond),
		Also: []*quoratev1.Check{{Policy: "q", Key: "{t}:b"}, {Policy: "r", Key: "{t}:c", Cost: cost(3)}}, Strict: true}
	for i, r := range reqs {
		if !proto.Equal(r, want) {
			t.Errorf("attempt %d sent %v, want %v", i+1, r, want)
		}
	}
	if !strings.HasPrefix(out, "denied (duplicate)") || !strings.Contains(out, "denied by checks[1]: policy q, key {t}:b") ||
		!strings.Contains(out, "attempts=2") {
		t.Errorf("output:\n%s", out)
	}
}

func TestAdmitMultiCheckRetryHint(t *testing.T) {
	f := &fakeAdmission{answer: func(int, *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, error) {
		return nil, outcomeUnknownErr()
	}}
	srv := serveFake(t, f, false)
	_, _, err := runCLI(t, "admit", "--server", srv.URL, "--policy", "p", "--key", "{t}:a", "--also", "q:{t}:user:42",
		"--also", "r@3:{t}:c", "--max-wait", "1s", "--request-id", "R-8", "--timeout", "100ms")
	wantErrNaming(t, err, "outcome is unknown",
		"quorate admit --server "+srv.URL+" --policy p --key '{t}:a' --also 'q:{t}:user:42' --also 'r@3:{t}:c' --max-wait 1s --request-id R-8")
}

func TestPeekRetriesAndPrints(t *testing.T) {
	f := &fakeAdmission{peek: func(n int, _ *quoratev1.PeekRequest) (*quoratev1.PeekResponse, error) {
		if n == 1 {
			return nil, notLeaderErr()
		}
		return &quoratev1.PeekResponse{WouldAllow: false, Limit: 5, Remaining: 0, RetryAfter: durationpb.New(2 * time.Second), PolicyVersion: 4}, nil
	}}
	srv := serveFake(t, f, false)
	out, _, err := runCLI(t, "peek", "--server", srv.URL, "--policy", "p", "--key", "k")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "would deny   remaining=0/5") || !strings.Contains(out, "retry_after=2s") ||
		!strings.Contains(out, "policy_version=4") || !strings.Contains(out, "attempts=2") {
		t.Errorf("output %q", out)
	}
	for _, r := range f.peekRequests() {
		if r.GetPolicy() != "p" || r.GetKey() != "k" {
			t.Errorf("peek sent %v", r)
		}
	}

	// At the deadline a peek's error does not talk about an unknown outcome:
	// it changes nothing.
	f = &fakeAdmission{peek: func(int, *quoratev1.PeekRequest) (*quoratev1.PeekResponse, error) { return nil, outcomeUnknownErr() }}
	srv = serveFake(t, f, false)
	_, _, err = runCLI(t, "peek", "--server", srv.URL, "--policy", "p", "--key", "k", "--timeout", "100ms")
	// The code is the last attempt's: unavailable, or deadline_exceeded when
	// the deadline cut an attempt in flight (timing decides which).
	if code := connect.CodeOf(err); code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want unavailable at the deadline", err)
	}
	if strings.Contains(err.Error(), "outcome is unknown") || strings.Contains(err.Error(), "applied") {
		t.Errorf("peek error %q talks about applying", err)
	}
	if n := len(f.peekRequests()); n < 2 {
		t.Errorf("%d peek attempts, want several", n)
	}
}

func TestRefundRetriesWithTheSameRequestID(t *testing.T) {
	f := &fakeAdmission{refund: func(n int, _ *quoratev1.RefundRequest) (*quoratev1.RefundResponse, error) {
		if n == 1 {
			return nil, outcomeUnknownErr() // it refunded, but the answer was lost
		}
		return &quoratev1.RefundResponse{Refunded: false, Cost: 3}, nil
	}}
	srv := serveFake(t, f, true) // and the first connection drops
	out, _, err := runCLI(t, "refund", "--server", srv.URL, "--caller", "billing", "--key", "tenant-a", "--request-id", "inv-1")
	if err != nil {
		t.Fatal(err)
	}
	reqs := f.refundRequests()
	if len(reqs) != 2 {
		t.Fatalf("server saw %d refunds, want 2", len(reqs))
	}
	for i, r := range reqs {
		if r.GetCaller() != "billing" || r.GetRequestId() != "inv-1" || r.GetKey() != "tenant-a" {
			t.Errorf("attempt %d sent %v", i+1, r)
		}
	}
	if !strings.HasPrefix(out, "already refunded") || !strings.Contains(out, "cost=3") || !strings.Contains(out, "attempts=3") ||
		!strings.Contains(out, "an earlier attempt of this command may have refunded it") {
		t.Errorf("output %q", out)
	}

	// Out of time with the outcome unknown: the error says how to retry.
	f = &fakeAdmission{refund: func(int, *quoratev1.RefundRequest) (*quoratev1.RefundResponse, error) {
		return nil, outcomeUnknownErr()
	}}
	srv = serveFake(t, f, false)
	_, _, err = runCLI(t, "refund", "--server", srv.URL, "--key", "k", "--request-id", "inv 2", "--timeout", "100ms")
	wantErrNaming(t, err, "outcome is unknown", "quorate refund --server "+srv.URL+" --key k --request-id 'inv 2'")

	// NotFound is an answer: not retried.
	f = &fakeAdmission{refund: func(int, *quoratev1.RefundRequest) (*quoratev1.RefundResponse, error) {
		return nil, connect.NewWireError(connect.CodeNotFound, errors.New("nothing to refund"))
	}}
	srv = serveFake(t, f, false)
	_, _, err = runCLI(t, "refund", "--server", srv.URL, "--key", "k", "--request-id", "x")
	if connect.CodeOf(err) != connect.CodeNotFound || len(f.refundRequests()) != 1 {
		t.Errorf("got %v after %d attempts, want not_found after 1", err, len(f.refundRequests()))
	}
}

// admit -o json and -o yaml print the request ID with the answer: refund
// names the admitted request by it, and without --request-id only the
// command knows the one it made.
func TestAdmitStructuredOutputHasTheRequestID(t *testing.T) {
	f := &fakeAdmission{answer: func(int, *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, error) {
		return &quoratev1.AdmitResponse{Allowed: true, Limit: 10, Remaining: 9, PolicyVersion: 3}, nil
	}}
	srv := serveFake(t, f, false)
	admit := []string{"admit", "--server", srv.URL, "--policy", "p", "--key", "k"}

	out, _, err := runCLI(t, append(admit, "--request-id", "invoice-42", "-o", "json")...)
	var got struct {
		Allowed   bool   `json:"allowed"`
		Remaining string `json:"remaining"`
		RequestID string `json:"requestId"`
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || !got.Allowed || got.Remaining != "9" || got.RequestID != "invoice-42" {
		t.Errorf("admit --request-id invoice-42 -o json: %v\n%s", err, out)
	}

	out, _, err = runCLI(t, append(admit, "-o", "json")...)
	got.RequestID = ""
	if err != nil || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("admit -o json: %v\n%s", err, out)
	}
	f.mu.Lock()
	sent := f.received[len(f.received)-1].GetRequestId()
	f.mu.Unlock()
	if len(sent) != 32 || got.RequestID != sent {
		t.Errorf("admit -o json: requestId %q, want the generated ID it sent, %q\n%s", got.RequestID, sent, out)
	}

	out, _, err = runCLI(t, append(admit, "--request-id", "invoice-43", "-o", "yaml")...)
	if err != nil || !strings.Contains(out, "\nrequestId: invoice-43\n") || !strings.HasPrefix(out, "allowed: true\n") {
		t.Errorf("admit -o yaml: %v\n%s", err, out)
	}
}
