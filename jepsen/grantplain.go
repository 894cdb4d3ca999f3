package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/envoyrls"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// The grant workloads' plain callers: each admit is one call as a caller
// without the Go client sends it — to the nodes in turn, not marked
// strict, without a request ID — so a node decides a hot key's admits from
// the grant it holds for its callers, and the others through the log. The
// callers speak the three ways such callers do: Admit in Connect's binary
// protobuf (kindPlain), Admit in Connect's JSON (kindJSON), and Envoy's
// ShouldRateLimit over gRPC (kindEnvoy, on a domain of the nodes' Envoy
// configuration with a local block). The caller cannot tell how its call
// was decided: its op is an ordinary allowed or denied one, dated by the
// answer's decided_at (for a decision from a node's grant, the log time
// its units were granted: the window the cluster counted them in; Envoy's
// answer carries it as dynamic_metadata), so the workload's window check
// covers the nodes' grants as it covers the clients'. The nemesis kills
// and pauses the nodes that hold them.

// plainKinds are the kinds the plain callers take in turn.
func (g *grantWorkload) plainKinds() []clientKind {
	if g.opts.EnvoyDomain != "" {
		return []clientKind{kindPlain, kindJSON, kindEnvoy}
	}
	return []clientKind{kindPlain, kindJSON}
}

// EnvoyKey is the key of a descriptor (key, value) of domain in the nodes'
// Envoy service (docs/envoy.md): what the workload's ops and checkers name.
func EnvoyKey(domain, key, value string) string {
	return "{envoy:" + domain + "}" + key + "=" + value
}

// envoyDescriptorKey is the descriptor key of the workload's Envoy domain.
const envoyDescriptorKey = "key"

// plainAnswer is what the checkers read of a plain call's answer.
type plainAnswer struct {
	allowed   bool
	remaining int64
	decidedAt time.Time
}

// plainCaller sends one kind's calls, with a Connect client per server.
type plainCaller struct {
	kind   clientKind
	domain string       // kindEnvoy
	hc     *http.Client // kindJSON and kindEnvoy: HTTP/2, as gRPC needs

	mu        sync.Mutex
	admission map[string]quoratev1connect.AdmissionServiceClient
	envoy     map[string]*connect.Client[rlsv3.RateLimitRequest, rlsv3.RateLimitResponse]
}

func (g *grantWorkload) newPlainCaller(kind clientKind) *plainCaller {
	p := &plainCaller{kind: kind, domain: g.opts.EnvoyDomain,
		admission: map[string]quoratev1connect.AdmissionServiceClient{},
		envoy:     map[string]*connect.Client[rlsv3.RateLimitRequest, rlsv3.RateLimitResponse]{}}
	if kind != kindPlain { // kindPlain's calls go through the Go client's Services
		p.hc = g.c.grpcClient()
	}
	return p
}

// call sends one admit of key through cc, to the nodes in turn.
func (p *plainCaller) call(ctx context.Context, cc *client.Client, policy, key, caller string) (plainAnswer, error) {
	if p.kind == kindEnvoy {
		req := &rlsv3.RateLimitRequest{Domain: p.domain, HitsAddend: 1, Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: envoyDescriptorKey, Value: key}}}}}
		resp, err := client.Invoke(ctx, cc, client.Call{Procedure: "ShouldRateLimit"},
			func(ctx context.Context, s client.Services) (*connect.Response[rlsv3.RateLimitResponse], error) {
				return p.envoyOf(s.Server).CallUnary(ctx, connect.NewRequest(req))
			})
		if err != nil {
			return plainAnswer{}, err
		}
		a := plainAnswer{allowed: resp.GetOverallCode() == rlsv3.RateLimitResponse_OK}
		if st := resp.GetStatuses(); len(st) == 1 {
			a.remaining = int64(st[0].GetLimitRemaining())
		}
		at, err := time.Parse(time.RFC3339Nano, resp.GetDynamicMetadata().GetFields()[envoyrls.MetadataDecidedAt].GetStringValue())
		if err != nil {
			return plainAnswer{}, fmt.Errorf("jepsen: an Envoy answer without its decision's log time (%s): %w", envoyrls.MetadataDecidedAt, err)
		}
		a.decidedAt = at
		return a, nil
	}
	req := &quoratev1.AdmitRequest{Policy: policy, Key: key, Caller: caller}
	resp, err := client.Invoke(ctx, cc, client.Call{Procedure: "Admit"},
		func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.AdmitResponse], error) {
			if p.kind == kindJSON {
				return p.jsonOf(s.Server).Admit(ctx, connect.NewRequest(req))
			}
			return s.Admission.Admit(ctx, connect.NewRequest(req))
		})
	if err != nil {
		return plainAnswer{}, err
	}
	return plainAnswer{allowed: resp.GetAllowed(), remaining: resp.GetRemaining(), decidedAt: resp.GetDecidedAt().AsTime()}, nil
}

// jsonOf is the Connect JSON client of server.
func (p *plainCaller) jsonOf(server string) quoratev1connect.AdmissionServiceClient {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.admission[server]
	if c == nil {
		c = quoratev1connect.NewAdmissionServiceClient(p.hc, server, connect.WithProtoJSON())
		p.admission[server] = c
	}
	return c
}

// envoyOf is the gRPC client of server's ShouldRateLimit.
func (p *plainCaller) envoyOf(server string) *connect.Client[rlsv3.RateLimitRequest, rlsv3.RateLimitResponse] {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.envoy[server]
	if c == nil {
		c = connect.NewClient[rlsv3.RateLimitRequest, rlsv3.RateLimitResponse](p.hc, server+envoyrls.Procedure, connect.WithGRPC())
		p.envoy[server] = c
	}
	return c
}

// workPlain admits on random keys of PlainKeys (picked as work picks
// its) through gc's plain calls until ctx ends.
func (g *grantWorkload) workPlain(ctx context.Context, gc *grantClient, cl int, rng *rand.Rand) {
	p := g.newPlainCaller(gc.kind)
	for seq := 0; ctx.Err() == nil; seq++ {
		value := g.pickKey(rng, g.opts.PlainKeys)
		// The workload's own name for the op (none is sent), so the
		// checkers count every op apart.
		op := Op{Kind: KindAdmit, Policy: g.opts.Policy, Client: cl, RequestID: fmt.Sprintf("c%d-p%d", cl, seq),
			Caller: gc.caller, Key: value}
		if gc.kind == kindEnvoy {
			op.Policy, op.Key = g.opts.EnvoyPolicy, EnvoyKey(g.opts.EnvoyDomain, envoyDescriptorKey, value)
		}
		tr := &trail{}
		cctx, cancel := context.WithTimeout(withTrail(ctx, tr), g.opts.Timeout)
		op.Start = time.Now()
		a, err := p.call(cctx, gc.cc, g.opts.Policy, value, gc.caller)
		op.End = time.Now()
		cancel()
		tr.record(&op)
		switch {
		case err != nil:
			op.Outcome, op.Error = classify(err), err.Error()
		case a.allowed:
			op.Outcome = OutcomeAllowed
		default:
			op.Outcome = OutcomeDenied
		}
		if err == nil {
			op.Remaining, op.DecidedAt = a.remaining, nanos(a.decidedAt)
		}
		g.h.Add(op)
		pause := time.Duration(rng.IntN(3000)) * time.Microsecond
		if op.Outcome != OutcomeAllowed {
			pause = time.Duration(10+rng.IntN(30)) * time.Millisecond
		}
		sleepCtx(ctx, pause)
	}
}
