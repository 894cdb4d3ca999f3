package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// targetEnvoy is compare's Quorate cluster driven through its Envoy
// rate-limit service, as Envoy calls it.
const targetEnvoy = "quorate-envoy"

// The Envoy domains compare serves: the same limit, with and without a
// local block (Quorate's own key: the nodes decide hot descriptors from
// the grants they hold). Nothing is denied in a run: a day of 10^9.
const (
	envoyDomainLocal  = "bench-local"
	envoyDomainStrict = "bench-strict"
	envoyConfig       = `domain: ` + envoyDomainLocal + `
local: {mode: grant}
descriptors:
  - key: k
    rate_limit: {unit: day, requests_per_unit: 1000000000}
---
domain: ` + envoyDomainStrict + `
descriptors:
  - key: k
    rate_limit: {unit: day, requests_per_unit: 1000000000}
`
)

// writeEnvoyConfig writes compare's Envoy domains into dir and returns the
// file's path.
func writeEnvoyConfig(dir string) (string, error) {
	file := filepath.Join(dir, "envoy.yaml")
	return file, os.WriteFile(file, []byte(envoyConfig), 0o600)
}

// envoyTarget drives a cluster's Envoy rate-limit service as Envoy does: one
// ShouldRateLimit call per decision (gRPC over h2c) with one descriptor,
// k=<key>, to the nodes in turn.
type envoyTarget struct {
	hc      *http.Client
	clients []*connect.Client[rlsv3.RateLimitRequest, rlsv3.RateLimitResponse]
	domain  string
	keys    []string
	next    []int // per worker, the node its next call goes to
}

// newEnvoyTarget returns a target for the API base URLs urls under domain.
func newEnvoyTarget(urls []string, domain string, load loadOptions) *envoyTarget {
	t := &envoyTarget{hc: &http.Client{Transport: h2cTransport(load.workers)}, domain: domain,
		keys: benchKeyNames(load.keyPrefix, load.keys), next: make([]int, load.workers)}
	for _, u := range urls {
		t.clients = append(t.clients, connect.NewClient[rlsv3.RateLimitRequest, rlsv3.RateLimitResponse](t.hc,
			strings.TrimSuffix(u, "/")+"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", connect.WithGRPC()))
	}
	for w := range t.next {
		t.next[w] = w % len(urls)
	}
	return t
}

func (t *envoyTarget) name() string { return targetEnvoy }

func (t *envoyTarget) call(ctx context.Context, worker int, keys []int) (benchResult, error) {
	var r benchResult
	if len(keys) != 1 {
		return r, fmt.Errorf("envoy: one descriptor per call (got %d keys)", len(keys))
	}
	c := t.clients[t.next[worker]]
	t.next[worker] = (t.next[worker] + 1) % len(t.clients)
	resp, err := c.CallUnary(ctx, connect.NewRequest(&rlsv3.RateLimitRequest{Domain: t.domain,
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: t.keys[keys[0]]}}}}}))
	if err != nil {
		return r, err
	}
	if resp.Msg.GetOverallCode() == rlsv3.RateLimitResponse_OK {
		r.allowed = 1
	} else {
		r.denied = 1
	}
	return r, nil
}

func (t *envoyTarget) close() error {
	t.hc.CloseIdleConnections()
	return nil
}
