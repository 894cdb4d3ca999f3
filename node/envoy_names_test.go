package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/quorate/quorate/envoyrls"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestEnvoyNamesVersionsAndReflection, on a 3-node cluster with data
// groups serving Envoy's rate-limit service:
//   - server reflection lists envoy.service.ratelimit.v3.RateLimitService
//     and describes it (what grpcurl list and describe ask);
//   - a descriptor without a name is named from its path in the policy
//     list, the RateLimit headers and the metrics;
//   - after the file changes a limit from 10 to 1000, every answer's limit
//     and remaining are of one policy version (limit − remaining = units
//     spent), including those decided before the data group copied the new
//     policy table, until the new limit is in use.
func TestEnvoyNamesVersionsAndReflection(t *testing.T) {
	c, file, cls := envoyCluster(t, func(cfg *node.Config) { cfg.DataGroups, cfg.ExpectNodes = 2, 3 })

	// Reflection, over gRPC as grpcurl speaks it.
	services, err := listServices(h2cClient(t, ""), c.APIURL(0))
	if err != nil || !slices.Contains(services, envoyrls.ServiceName) {
		t.Fatalf("reflection lists %v (%v), want %s among them", services, err, envoyrls.ServiceName)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream := grpcreflect.NewClient(h2cClient(t, ""), c.APIURL(1), connect.WithGRPC()).NewStream(ctx)
	files, err := stream.FileContainingSymbol(protoreflect.FullName(envoyrls.ServiceName))
	if _, cerr := stream.Close(); err == nil {
		err = cerr
	}
	if err != nil || len(files) == 0 || !strings.Contains(files[0].GetName(), "ratelimit/v3/rls.proto") {
		t.Fatalf("reflection describes %s as %v (%v), want rls.proto", envoyrls.ServiceName, len(files), err)
	}

	// Names from the path: headers, the policy list, the metrics.
	spent := 0
	resp := shouldRateLimit(t, cls[0], rlRequest("edge", desc("bulk", "race")))
	spent++
	hdr := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		hdr[h.GetKey()] = h.GetValue()
	}
	if !strings.HasPrefix(hdr["RateLimit-Policy"], `"envoy.edge.bulk";`) || resp.GetStatuses()[0].GetCurrentLimit().GetName() != "envoy.edge.bulk" {
		t.Fatalf("answer %v, want it named envoy.edge.bulk", resp)
	}
	pols, err := c.Admin(0).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pols.Msg.GetPolicies() {
		names = append(names, p.GetName())
	}
	for _, want := range []string{"envoy.edge.tenant", "envoy.edge.tenant.path.upload", "envoy.edge.shadow", "envoy.edge.bulk", "envoy.edge.many", "envoy.edge.conc"} {
		if !slices.Contains(names, want) {
			t.Errorf("policies %v, want %s among them", names, want)
		}
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.APIURL(0)+"/metrics", nil)
	mresp, err := c.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(metrics), `policy="envoy.edge.bulk"`) {
		t.Errorf("/metrics has no series of policy envoy.edge.bulk")
	}

	// One version per answer across a reload.
	resp = shouldRateLimit(t, cls[1], rlRequest("edge", desc("bulk", "race")))
	spent++
	if st := resp.GetStatuses()[0]; st.GetCurrentLimit().GetRequestsPerUnit() != 10 || st.GetLimitRemaining() != 8 {
		t.Fatalf("before the change: %v", st)
	}
	writeAtomic(t, file, strings.Replace(envoyConfig, "requests_per_unit: 10", "requests_per_unit: 1000", 1))
	answers := 0
	nodetest.Eventually(t, 30*time.Second, "the new limit in use", func() error {
		resp := shouldRateLimit(t, cls[answers%len(cls)], rlRequest("edge", desc("bulk", "race")))
		answers++
		st := resp.GetStatuses()[0]
		if st.GetCode() == rlOK {
			spent++
		}
		limit := int(st.GetCurrentLimit().GetRequestsPerUnit())
		if limit-int(st.GetLimitRemaining()) != spent {
			t.Fatalf("answer %d after the change: limit %d with %d remaining, but %d units are spent: the limit of one version, the remaining of another",
				answers, limit, st.GetLimitRemaining(), spent)
		}
		if limit != 1000 {
			return fmt.Errorf("limit %d", limit)
		}
		return nil
	})
	t.Logf("the new limit answered after %d calls", answers)
}
