package middleware

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Interceptor returns a Connect interceptor admitting each unary call, and
// each stream once at its start, handled by the server. Client-side calls
// pass through.
func (l *Limiter) Interceptor() connect.Interceptor {
	return interceptor{l}
}

type interceptor struct{ l *Limiter }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		v := i.l.decide(callRequest(ctx, req.Spec(), req.Peer(), req.Header(), req.HTTPMethod()))
		if v.kind != pass {
			return nil, v.connectError()
		}
		resp, err := next(ctx, req)
		if v.refundID != "" {
			i.l.refund(callRequest(ctx, req.Spec(), req.Peer(), req.Header(), req.HTTPMethod()), v, serverFailure(err))
		}
		if len(v.header) > 0 {
			var cerr *connect.Error
			switch {
			case err == nil && resp != nil:
				merge(resp.Header(), v.header)
			case errors.As(err, &cerr):
				merge(cerr.Meta(), v.header)
			}
		}
		return resp, err
	}
}

func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		v := i.l.decide(callRequest(ctx, conn.Spec(), conn.Peer(), conn.RequestHeader(), http.MethodPost))
		if v.kind != pass {
			return v.connectError()
		}
		merge(conn.ResponseHeader(), v.header)
		err := next(ctx, conn)
		if v.refundID != "" {
			i.l.refund(callRequest(ctx, conn.Spec(), conn.Peer(), conn.RequestHeader(), http.MethodPost), v, serverFailure(err))
		}
		return err
	}
}

// callRequest is the request key extractors and Cost see for a Connect call:
// its context, headers, peer, method and the procedure as Pattern; no body.
func callRequest(ctx context.Context, spec connect.Spec, peer connect.Peer, h http.Header, method string) *http.Request {
	r := &http.Request{
		Method:     method,
		URL:        &url.URL{Path: spec.Procedure},
		Header:     h,
		RemoteAddr: peer.Addr,
		Pattern:    spec.Procedure,
	}
	return r.WithContext(ctx)
}

// connectError is a refusal as a Connect error: InvalidArgument for a
// missing key or an Idempotency-Key used for another request,
// ResourceExhausted with RetryInfo and QuotaFailure for a denial,
// Unavailable with RetryInfo otherwise; the RateLimit fields (and
// Retry-After) in its metadata.
func (v verdict) connectError() *connect.Error {
	var err *connect.Error
	switch v.kind {
	case badKey, reused:
		err = connect.NewError(connect.CodeInvalidArgument, errors.New(v.msg))
	case denied:
		err = connect.NewError(connect.CodeResourceExhausted, errors.New(v.msg))
		delay := v.retryAfter
		if delay <= 0 {
			delay = time.Second // as Retry-After: at least 1 s
		}
		retry := &errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}
		if d, e := connect.NewErrorDetail(retry); e == nil {
			err.AddDetail(d)
		}
		if v.deniedBy != "" {
			q := &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
				Subject: v.deniedBy, Description: v.msg,
			}}}
			if d, e := connect.NewErrorDetail(q); e == nil {
				err.AddDetail(d)
			}
		}
	default:
		err = connect.NewError(connect.CodeUnavailable, errors.New(v.msg))
		retry := &errdetails.RetryInfo{RetryDelay: durationpb.New(max(v.retryAfter, time.Second))}
		if d, e := connect.NewErrorDetail(retry); e == nil {
			err.AddDetail(d)
		}
	}
	merge(err.Meta(), v.header)
	return err
}

func merge(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append(dst[k][:0:0], vs...)
	}
}
