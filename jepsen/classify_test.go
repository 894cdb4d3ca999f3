package jepsen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/client"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// answers is an admission service whose Admit answers the error named by
// the request's key.
type answers struct {
	quoratev1connect.UnimplementedAdmissionServiceHandler
	unknownThenBad atomic.Int64
}

func (a *answers) Admit(ctx context.Context, req *connect.Request[quoratev1.AdmitRequest]) (*connect.Response[quoratev1.AdmitResponse], error) {
	switch req.Msg.GetKey() {
	case "bad":
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("admission: key: must not be empty"))
	case "not-proposed":
		return nil, connect.NewError(connect.CodeUnavailable,
			errors.New("node: not proposed: leader unreachable: dial tcp 127.0.0.1:1: connect: connection refused"))
	case "outcome-unknown":
		return nil, connect.NewError(connect.CodeUnavailable,
			errors.New("node: outcome unknown: forwarding to the leader: read tcp: connection reset by peer"))
	case "slow":
		<-ctx.Done()
		return nil, ctx.Err()
	case "unknown-then-bad":
		if a.unknownThenBad.Add(1) == 1 {
			ce := connect.NewError(connect.CodeUnavailable, errors.New("node: outcome unknown: leadership lost"))
			d, err := connect.NewErrorDetail(&quoratev1.OutcomeUnknown{})
			if err != nil {
				return nil, err
			}
			ce.AddDetail(d)
			return nil, ce
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("admission: request_id: reused"))
	}
	return connect.NewResponse(&quoratev1.AdmitResponse{Allowed: true}), nil
}

// classify sorts errors by where they come from and their Connect code, not
// by their text: a refused dial of the client's own connection and an
// InvalidArgument answer are failures; any other answer or a timeout leaves
// the outcome unknown, whatever its message says.
func TestClassifyByCode(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(quoratev1connect.NewAdmissionServiceHandler(&answers{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// An address nothing listens on: a listener's, closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()

	admit := func(base, key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := quoratev1connect.NewAdmissionServiceClient(http.DefaultClient, base).Admit(ctx,
			connect.NewRequest(&quoratev1.AdmitRequest{Policy: "p", Key: key, RequestId: "r"}))
		return err
	}
	if err := admit(srv.URL, "ok"); err != nil {
		t.Fatalf("the service does not answer: %v", err)
	}
	refused := admit(closed, "ok")
	for _, tc := range []struct {
		name string
		err  error
		want Outcome
	}{
		{"own dial refused", refused, OutcomeFail},
		{"own dial refused, wrapped", fmt.Errorf("jepsen: %w", refused), OutcomeFail},
		{"InvalidArgument answer", admit(srv.URL, "bad"), OutcomeFail},
		{"not proposed answer naming a refused dial", admit(srv.URL, "not-proposed"), OutcomeUnknown},
		{"outcome unknown answer", admit(srv.URL, "outcome-unknown"), OutcomeUnknown},
		{"deadline", admit(srv.URL, "slow"), OutcomeUnknown},
		{"a plain error saying connection refused", errors.New("dial tcp: connect: connection refused"), OutcomeUnknown},
		{"outcome unknown, the last attempt's dial refused", &client.OutcomeUnknownError{RequestID: "r", Attempts: 2, Last: refused}, OutcomeUnknown},
		{"client closed", client.ErrClosed, OutcomeFail},
		{"client: every dial refused", clientAdmit(t, closed, "ok"), OutcomeFail},
		{"client: InvalidArgument answer", clientAdmit(t, srv.URL, "bad"), OutcomeFail},
		{"client: deadline", clientAdmit(t, srv.URL, "slow"), OutcomeUnknown},
		// An unknown outcome, then a final answer: still unknown.
		{"client: outcome unknown, then InvalidArgument", clientAdmit(t, srv.URL, "unknown-then-bad"), OutcomeUnknown},
		{"outcome unknown, the last attempt InvalidArgument", &client.OutcomeUnknownError{RequestID: "r", Attempts: 2, Last: admit(srv.URL, "bad")}, OutcomeUnknown},
		// Out of time, every attempt certainly not applied: the error
		// matches DeadlineExceeded and carries the last answer. (The wait
		// before a second attempt passes the deadline: the client stops
		// at once, with no attempt in flight, whose cut would make the
		// outcome unknown.)
		{"client: out of time, every attempt answered not proposed", clientAdmitOnce(t, srv.URL, "not-proposed"), OutcomeFail},
		{"never sent", errors.Join(client.ErrNotSent, context.DeadlineExceeded), OutcomeFail},
		{"never sent, wrapped", fmt.Errorf("jepsen: %w", errors.Join(client.ErrNotSent, context.Canceled)), OutcomeFail},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if got := classify(tc.err); got != tc.want {
			t.Errorf("%s: classify(%v) = %s, want %s", tc.name, tc.err, got, tc.want)
		}
	}
}

// clientAdmit is the error of an Admit through package client, as the
// workloads send it (NoFallback), to base with a 300ms deadline.
func clientAdmit(t *testing.T, base, key string) error {
	return clientAdmitWith(t, client.Config{Servers: []string{base}, Caller: "test"}, key, 300*time.Millisecond)
}

// clientAdmitOnce is clientAdmit with a first wait between attempts (a
// minute) far past its deadline (5 s): one attempt, then the client stops.
func clientAdmitOnce(t *testing.T, base, key string) error {
	return clientAdmitWith(t, client.Config{Servers: []string{base}, Caller: "test", InitialBackoff: time.Minute, MaxBackoff: time.Minute},
		key, 5*time.Second)
}

func clientAdmitWith(t *testing.T, cfg client.Config, key string, deadline time.Duration) error {
	t.Helper()
	cc, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	_, err = cc.Admit(ctx, clientRequest("p", key, "r"))
	return err
}

// A decision the client made without the cluster is never recorded as an
// answer (the workloads ask for none: Request.NoFallback).
func TestRecordDecision(t *testing.T) {
	if r := clientRequest("p", "k", "r1"); !r.NoFallback || r.RequestID != "r1" {
		t.Fatalf("clientRequest = %+v, want NoFallback and the request ID", r)
	}
	decided := time.Unix(100, 5)
	for _, tc := range []struct {
		name string
		d    *client.Decision
		err  error
		want Outcome
	}{
		{"allowed", &client.Decision{Allowed: true, Outcome: client.Verified, Remaining: 3, DecidedAt: decided}, nil, OutcomeAllowed},
		{"denied", &client.Decision{Outcome: client.Verified, DecidedAt: decided}, nil, OutcomeDenied},
		{"bypassed", &client.Decision{Allowed: true, Outcome: client.Bypassed}, nil, OutcomeUnknown},
		{"local", &client.Decision{Allowed: true, Outcome: client.LocalDecision}, nil, OutcomeUnknown},
		{"outcome unknown", nil, &client.OutcomeUnknownError{RequestID: "r1", Attempts: 3, Last: errors.New("EOF")}, OutcomeUnknown},
	} {
		var op Op
		recordDecision(&op, tc.d, tc.err)
		if op.Outcome != tc.want {
			t.Errorf("%s: outcome %s, want %s", tc.name, op.Outcome, tc.want)
		}
		if op.Outcome.OK() && (op.DecidedAt != decided.UnixNano() || op.Remaining != tc.d.Remaining) {
			t.Errorf("%s: decided_at %d remaining %d, want %d and %d", tc.name, op.DecidedAt, op.Remaining, decided.UnixNano(), tc.d.Remaining)
		}
		if !op.Outcome.OK() && op.Error == "" {
			t.Errorf("%s: no error recorded", tc.name)
		}
	}
}
