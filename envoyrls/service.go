package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Procedure is the RPC Envoy calls.
const Procedure = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// ServiceName is the rate-limit service's name.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// RequestIDHeader is the metadata header whose value, Envoy's request ID,
// makes a call exactly-once with Options.DedupeRequestID.
const RequestIDHeader = "X-Request-Id"

// Options are a Service's dependencies.
type Options struct {
	// Config returns the configuration in use (reloaded when its files
	// change).
	Config func() *Config
	// Authorize allows req for the caller of ctx, or returns the error to
	// answer; it may set req's caller. It runs on every call, before
	// anything is applied or decided; req is nil when the call counts
	// nothing (no descriptor with a counted limit).
	Authorize func(ctx context.Context, req *quoratev1.AdmitRequest) error
	// Admit decides one authorized Admit.
	Admit func(ctx context.Context, req *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, error)
	// Apply stores policies in the cluster (idempotent: an unchanged
	// policy keeps its version).
	Apply func(ctx context.Context, policies []*quoratev1.Policy) error
	// Headers adds the RateLimit header fields to every answer with a
	// counted descriptor.
	Headers bool
	// DedupeRequestID makes a call with an x-request-id header
	// exactly-once: a later call with the same ID and descriptors is
	// answered as the first and spends nothing. Off by default, since the
	// header is only as trustworthy as whoever sets it: Envoy keeps a
	// client's own x-request-id when it trusts the client's headers
	// (preserve_external_request_id, or an internal address), and a client
	// that pins the ID is then never counted after its first call. Turn it
	// on only when Envoy always generates the ID itself.
	DedupeRequestID bool
}

// Service answers ShouldRateLimit. Before the first decision under a
// configuration it applies the configuration's policies, once per
// configuration loaded.
type Service struct {
	opts    Options
	sem     chan struct{} // held while applying; guards applied
	applied *Config
}

// New returns a Service.
func New(opts Options) *Service {
	return &Service{opts: opts, sem: make(chan struct{}, 1)}
}

// Handler returns the path and handler of the service, a Connect handler
// (gRPC, gRPC-Web and Connect) with opts.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return "/" + ServiceName + "/", connect.NewUnaryHandler(Procedure, s.ShouldRateLimit, opts...)
}

// ShouldRateLimit decides every descriptor of the request in one Admit.
func (s *Service) ShouldRateLimit(ctx context.Context, req *connect.Request[rlsv3.RateLimitRequest]) (*connect.Response[rlsv3.RateLimitResponse], error) {
	cfg := s.opts.Config()
	var requestID string
	if s.opts.DedupeRequestID {
		requestID = req.Header().Get(RequestIDHeader)
	}
	p, err := newPlan(cfg, req.Msg, requestID)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := s.opts.Authorize(ctx, p.admit); err != nil {
		return nil, err
	}
	var resp *quoratev1.AdmitResponse
	if p.admit != nil {
		if err := s.ensureApplied(ctx, cfg); err != nil {
			return nil, err
		}
		if resp, err = s.opts.Admit(ctx, p.admit); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(p.answer(resp, s.opts.Headers)), nil
}

// ensureApplied applies cfg's policies unless they were.
func (s *Service) ensureApplied(ctx context.Context, cfg *Config) error {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	defer func() { <-s.sem }()
	if s.applied == cfg {
		return nil
	}
	if err := s.opts.Apply(ctx, cfg.Policies()); err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return connect.NewError(ce.Code(), fmt.Errorf("applying the envoy configuration's policies: %s", ce.Message()))
		}
		return fmt.Errorf("applying the envoy configuration's policies: %w", err)
	}
	s.applied = cfg
	return nil
}
