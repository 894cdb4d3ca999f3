package clienttest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/client/middleware"
	"github.com/quorate/quorate/client/ratelimitheader/ratelimitheadertest"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// A gateway whose caller has only the client role (limited to its two
// policies) on a 3-node cluster with an access file reads the policies it
// uses, and decides at least 90% of a hot key's admits from budget leases:
// single-limit requests through the client, and two-limit requests through
// the middleware, each decided from the grants of both its limits.
func TestClientRoleGatewayDecidesLocally(t *testing.T) {
	dir := t.TempDir()
	ops, gateway := access.NewToken(), access.NewToken()
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	accessFile := write("access.yaml", `callers:
  - caller: ops
    roles: [admin, client]
  - caller: gateway
    roles: [client]
    policies: [gw-client, gw-route]
`)
	tokenFile := write("tokens.yaml", fmt.Sprintf("tokens:\n  - caller: ops\n    sha256: %s\n  - caller: gateway\n    sha256: %s\n",
		access.HashToken(ops), access.HashToken(gateway)))
	c := nodetest.NewClusterWith(t, nodetest.Options{Token: ops, Configure: func(_ int, cfg *node.Config) {
		cfg.AccessFile, cfg.TokenFile, cfg.NodeToken = accessFile, tokenFile, ops
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	local := &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(2000), Ttl: durationpb.New(10 * time.Second)}
	var policies []*quoratev1.Policy
	for _, name := range []string{"gw-client", "gw-route", "gw-other"} {
		policies = append(policies, &quoratev1.Policy{Name: name, Algorithm: "fixed_window", Limit: 10_000_000,
			Period: durationpb.New(24 * time.Hour), Local: local})
	}
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: policies})); err != nil {
		t.Fatalf("apply policies: %v", err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	cl, err := client.New(client.Config{Servers: []string{c.APIURL(0), c.APIURL(1), c.APIURL(2)},
		HTTPClient: &http.Client{Transport: tr}, Token: gateway, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })

	// localShare runs n decisions from 8 goroutines and returns the share
	// of them the client decided from grants.
	localShare := func(t *testing.T, n int, decide func() error) float64 {
		t.Helper()
		before := cl.Stats()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := g; i < n; i += 8 {
					if err := decide(); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		s := cl.Stats()
		grant, verified := s.LocalGrant-before.LocalGrant, s.Verified-before.Verified
		t.Logf("%d decisions: %d from grants, %d verified; policies unknown %d", n, grant, verified, s.PoliciesUnknown)
		return float64(grant) / float64(max(grant+verified, 1))
	}

	t.Run("one limit", func(t *testing.T) {
		share := localShare(t, 20_000, func() error {
			d, err := cl.Admit(ctx, client.Request{Policy: "gw-client", Key: "{hot}"})
			if err == nil && !d.Allowed {
				err = fmt.Errorf("denied: %+v", d)
			}
			return err
		})
		if share < 0.9 {
			t.Errorf("%.1f%% of the hot key's admits decided locally, want at least 90%%", 100*share)
		}
	})

	t.Run("two limits", func(t *testing.T) {
		lim, err := middleware.New(cl, middleware.WithIdentity(middleware.Static("tenant")),
			middleware.WithLimits(middleware.Limit{Name: "per-client", Policy: "gw-client"}, middleware.Limit{Name: "per-route", Policy: "gw-route", Key: []middleware.KeyFunc{middleware.Static("search")}}))
		if err != nil {
			t.Fatal(err)
		}
		h := lim.Handler(ok200)
		share := localShare(t, 20_000, func() error {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/search", nil))
			if rec.Code != http.StatusOK {
				return fmt.Errorf("status %d: %s", rec.Code, rec.Body)
			}
			return nil
		})
		if share < 0.9 {
			t.Errorf("%.1f%% of the two-limit requests decided locally, want at least 90%%", 100*share)
		}
		// A request decided from both grants answers with both limits' fields.
		for i := 0; ; i++ {
			before := cl.Stats().LocalGrant
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/search", nil))
			if cl.Stats().LocalGrant == before {
				if i == 1000 {
					t.Fatal("1000 two-limit requests, none decided from grants")
				}
				continue
			}
			items, err := ratelimitheadertest.ParseList(rec.Header().Get(middleware.HeaderRateLimit))
			if err != nil || len(items) != 2 || items[0].Name != "per-client" || items[1].Name != "per-route" ||
				items[0].Params["r"] <= 0 || items[1].Params["r"] <= 0 || rec.Header().Get(middleware.HeaderPolicy) == "" {
				t.Errorf("a local two-limit answer: %s %q, %s %q (%v); want both limits' fields",
					middleware.HeaderRateLimit, rec.Header().Get(middleware.HeaderRateLimit), middleware.HeaderPolicy, rec.Header().Get(middleware.HeaderPolicy), err)
			}
			break
		}
	})

	// The gateway read the policies it may use, and only those.
	var names []string
	for _, p := range cl.Policies() {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"gw-client", "gw-route"}) {
		t.Errorf("the gateway knows policies %v, want its two", names)
	}
	if s := cl.Stats(); s.PoliciesUnknown != 0 {
		t.Errorf("Stats.PoliciesUnknown %d, want 0", s.PoliciesUnknown)
	}
}
