package middleware

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/quorate/quorate/client/ratelimitheader/ratelimitheadertest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// peekService is a stand-in protected service: Peek answers, the rest is
// unimplemented.
type peekService struct {
	quoratev1connect.UnimplementedAdmissionServiceHandler
}

func (peekService) Peek(context.Context, *connect.Request[quoratev1.PeekRequest]) (*connect.Response[quoratev1.PeekResponse], error) {
	return connect.NewResponse(&quoratev1.PeekResponse{}), nil
}

const streamProcedure = "/quorate.test.Stream/Watch"

// connectServer serves peekService and a server stream behind the limiter,
// over HTTP/2 with TLS so that gRPC works too.
func connectServer(t *testing.T, l *Limiter) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle(quoratev1connect.NewAdmissionServiceHandler(peekService{}, connect.WithInterceptors(l.Interceptor())))
	mux.Handle(streamProcedure, connect.NewServerStreamHandler(streamProcedure,
		func(_ context.Context, _ *connect.Request[quoratev1.PeekRequest], s *connect.ServerStream[quoratev1.PeekResponse]) error {
			for range 3 {
				if err := s.Send(&quoratev1.PeekResponse{}); err != nil {
					return err
				}
			}
			return nil
		}, connect.WithInterceptors(l.Interceptor())))
	s := httptest.NewUnstartedServer(mux)
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func TestInterceptorResourceExhausted(t *testing.T) {
	f := newFake(map[string]fakePolicy{
		"api":   {limit: 100, window: time.Minute, reset: time.Second},
		"route": {limit: 1, window: time.Second, reset: 400 * time.Millisecond, retry: 1200 * time.Millisecond},
	})
	l := mustNew(t, f, WithIdentity(Proxies{}.ClientIP()), WithLimits(
		Limit{Name: "per-identity", Policy: "api"},
		Limit{Name: "per-procedure", Policy: "route", Key: []KeyFunc{Route(nil)}},
	))
	s := connectServer(t, l)
	for _, proto := range []struct {
		name string
		opt  connect.ClientOption
	}{{"connect", connect.WithProtoJSON()}, {"grpc", connect.WithGRPC()}} {
		t.Run(proto.name, func(t *testing.T) {
			f.mu.Lock()
			clear(f.spent)
			f.mu.Unlock()
			c := quoratev1connect.NewAdmissionServiceClient(s.Client(), s.URL, proto.opt)
			resp, err := c.Peek(t.Context(), connect.NewRequest(&quoratev1.PeekRequest{}))
			if err != nil {
				t.Fatalf("first call: %v", err)
			}
			if _, err := ratelimitheadertest.ParseList(resp.Header().Get(HeaderRateLimit)); err != nil {
				t.Errorf("first call: %s %q: %v", HeaderRateLimit, resp.Header().Get(HeaderRateLimit), err)
			}
			if got := f.last().Also[0].Key; got != "{ip:127.0.0.1}:route:"+quoratev1connect.AdmissionServicePeekProcedure {
				t.Errorf("procedure key %q", got)
			}

			_, err = c.Peek(t.Context(), connect.NewRequest(&quoratev1.PeekRequest{}))
			var cerr *connect.Error
			if !errors.As(err, &cerr) || cerr.Code() != connect.CodeResourceExhausted {
				t.Fatalf("second call: %v, want resource_exhausted", err)
			}
			var retry *errdetails.RetryInfo
			var quota *errdetails.QuotaFailure
			for _, d := range cerr.Details() {
				switch m, _ := d.Value(); m := m.(type) {
				case *errdetails.RetryInfo:
					retry = m
				case *errdetails.QuotaFailure:
					quota = m
				}
			}
			if retry == nil || retry.GetRetryDelay().AsDuration() != 1200*time.Millisecond {
				t.Errorf("RetryInfo %v, want a retry delay of 1.2s", retry)
			}
			if quota == nil || len(quota.GetViolations()) != 1 || quota.GetViolations()[0].GetSubject() != "per-procedure" {
				t.Errorf("QuotaFailure %v, want subject per-procedure", quota)
			}
			meta := cerr.Meta()
			if meta.Get(HeaderRetryAfter) != "2" || meta.Get(HeaderDeniedBy) != `"per-procedure"` {
				t.Errorf("metadata Retry-After %q %s %q", meta.Get(HeaderRetryAfter), HeaderDeniedBy, meta.Get(HeaderDeniedBy))
			}
			cur, err := ratelimitheadertest.ParseList(meta.Get(HeaderRateLimit))
			if err != nil || len(cur) != 2 || cur[1].Name != "per-procedure" || cur[1].Params["r"] != 0 {
				t.Errorf("metadata %s %q: %+v %v", HeaderRateLimit, meta.Get(HeaderRateLimit), cur, err)
			}
		})
	}
}

func TestInterceptorLimitsStreamsAtStart(t *testing.T) {
	f := newFake(map[string]fakePolicy{"route": {limit: 1, window: time.Second, retry: time.Second}})
	l := mustNew(t, f, WithIdentity(Proxies{}.ClientIP()),
		WithLimits(Limit{Policy: "route", Key: []KeyFunc{Route(nil)}}))
	s := connectServer(t, l)
	c := connect.NewClient[quoratev1.PeekRequest, quoratev1.PeekResponse](s.Client(), s.URL+streamProcedure, connect.WithGRPC())

	stream, err := c.CallServerStream(t.Context(), connect.NewRequest(&quoratev1.PeekRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for stream.Receive() {
		n++
	}
	if err := stream.Err(); err != nil || n != 3 {
		t.Fatalf("first stream: %d messages, %v; want 3, nil (one admission per stream)", n, err)
	}
	if got := stream.ResponseHeader().Get(HeaderRateLimit); got != `"route";r=0;t=0` {
		t.Errorf("first stream: %s %q", HeaderRateLimit, got)
	}
	stream.Close()
	if len(f.requests) != 1 || f.requests[0].Key != "{ip:127.0.0.1}:route:"+streamProcedure {
		t.Errorf("requests %+v: want one, keyed by the procedure", f.requests)
	}

	stream, err = c.CallServerStream(t.Context(), connect.NewRequest(&quoratev1.PeekRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
		t.Error("second stream: a message despite the denial")
	}
	if connect.CodeOf(stream.Err()) != connect.CodeResourceExhausted {
		t.Errorf("second stream: %v, want resource_exhausted", stream.Err())
	}
	stream.Close()
}

func TestInterceptorRefusalCodes(t *testing.T) {
	f := newFake(map[string]fakePolicy{"api": {limit: 10}})
	f.err = errors.New("deadline exceeded")
	for _, c := range []struct {
		name     string
		identity KeyFunc
		want     connect.Code
	}{
		{"admit error fails closed", Proxies{}.ClientIP(), connect.CodeUnavailable},
		{"missing identity", Principal(principalOf), connect.CodeInvalidArgument},
	} {
		l := mustNew(t, f, WithIdentity(c.identity), WithLimits(Limit{Policy: "api"}))
		s := connectServer(t, l)
		cl := quoratev1connect.NewAdmissionServiceClient(s.Client(), s.URL)
		_, err := cl.Peek(t.Context(), connect.NewRequest(&quoratev1.PeekRequest{}))
		if connect.CodeOf(err) != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}
