package jepsen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// answers is an admission service whose Admit answers the error named by
// the request's key.
type answers struct {
	quoratev1connect.UnimplementedAdmissionServiceHandler
}

func (answers) Admit(ctx context.Context, req *connect.Request[quoratev1.AdmitRequest]) (*connect.Response[quoratev1.AdmitResponse], error) {
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
	}
	return connect.NewResponse(&quoratev1.AdmitResponse{Allowed: true}), nil
}

// classify sorts errors by where they come from and their Connect code, not
// by their text: a refused dial of the client's own connection and an
// InvalidArgument answer are failures; any other answer or a timeout leaves
// the outcome unknown, whatever its message says.
func TestClassifyByCode(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(quoratev1connect.NewAdmissionServiceHandler(answers{}))
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
