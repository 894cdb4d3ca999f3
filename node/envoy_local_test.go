package node_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quorate/quorate/envoyrls"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
)

// A domain with a local block: the node Envoy calls decides its hot
// descriptors from the grants it holds, in memory; a descriptor of a
// domain without one is decided through the log.
func TestEnvoyLocalDomain(t *testing.T) {
	file := filepath.Join(t.TempDir(), "envoy.yaml")
	config := `
domain: hot
local: {mode: grant, max_grant: 500, ttl: 1m}
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000}
---
domain: cold
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000}
`
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(_ int, cfg *node.Config) {
		cfg.EnvoyConfig = []string{file}
	}})
	c.WaitReady(t)
	conn, err := grpc.NewClient(strings.TrimPrefix(c.APIURL(0), "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cl := rlsv3.NewRateLimitServiceClient(conn)

	call := func(domain string, n int) {
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < n; i += 4 {
					before := time.Now()
					resp := shouldRateLimit(t, cl, rlRequest(domain, desc("user", "u1")))
					if resp.GetOverallCode() != rlOK {
						t.Errorf("%s call %d: %v", domain, i, resp)
						return
					}
					// The log time of the decision, or of the grant
					// it was decided from: never after the answer.
					at, err := time.Parse(time.RFC3339Nano, resp.GetDynamicMetadata().GetFields()[envoyrls.MetadataDecidedAt].GetStringValue())
					if err != nil || at.After(time.Now()) || at.Before(before.Add(-time.Minute)) {
						t.Errorf("%s call %d: decided at %v (%v), want a log time of the last minute", domain, i, at, err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	const n = 1000
	call("cold", n)
	if local := nodeMetric(t, c, 0, "quorate_node_local_decisions_total"); local != 0 {
		t.Fatalf("%v calls of a domain without a local block decided from grants", local)
	}
	call("hot", n)
	if local := nodeMetric(t, c, 0, "quorate_node_local_decisions_total"); local < 0.9*n {
		t.Fatalf("%v of %d calls of a hot descriptor of a local domain decided from the node's grant; want at least 90%%", local, n)
	}
}
