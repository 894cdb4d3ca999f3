package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestGrantHostileHolders: on a 3-node cluster, a holder's claimed demand
// counts only as far as the cluster saw it spend, and one caller cannot
// take a key's holders. An honest holder spending its 1,000 units keeps
// getting 1,000 beside a holder claiming 1e12 units a second (before, it
// was cut to 1 unit); a caller creating holders on one key is refused past
// fsm.MaxGrantsPerCaller with resource_exhausted naming the caller and the
// bound (before, 1,024 of them blocked the key for everyone), while
// another caller still gets grants of the key.
func TestGrantHostileHolders(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	policy := &quoratev1.Policy{Name: "feed", Algorithm: "fixed_window", Limit: 1_000_000, Period: durationpb.New(time.Hour),
		Local: &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(1000), Ttl: durationpb.New(time.Minute)}}
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{policy}})); err != nil {
		t.Fatal(err)
	}
	grant := func(i int, caller string, r *quoratev1.GrantRequest) (*quoratev1.GrantResponse, error) {
		r.Policy, r.Caller = "feed", caller
		if r.Key == "" {
			r.Key = "{t}:k"
		}
		resp, err := c.Admission(i%c.Len()).Grant(ctx, connect.NewRequest(r))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	must := func(i int, caller string, r *quoratev1.GrantRequest) *quoratev1.GrantResponse {
		t.Helper()
		resp, err := grant(i, caller, r)
		if err != nil {
			t.Fatalf("%s's Grant(%v): %v", caller, r, err)
		}
		return resp
	}

	h := must(0, "gw", &quoratev1.GrantRequest{Holder: "honest", Want: 1000, Demand: 1000})
	if h.GetAdded() != 1000 || h.GetCountedDemand() != 1 {
		t.Fatalf("the honest holder's first grant: %v, want 1000 units, its demand counted at 1/s", h)
	}
	h = must(1, "gw", &quoratev1.GrantRequest{Holder: "honest", Seq: 1, Want: 1000, Used: 1000, Demand: 1000})
	if h.GetAdded() != 1000 || h.GetCountedDemand() != 1000 {
		t.Fatalf("the honest holder's renewal after spending 1000: %v, want 1000 more, its demand counted whole", h)
	}
	d := must(2, "mallory", &quoratev1.GrantRequest{Holder: "liar", Want: 1000, Demand: node.MaxGrantDemand})
	if d.GetCountedDemand() != 1 || d.GetShare() > 0.001 {
		t.Fatalf("a claim of 1e12/s never seen spending: %v, want it counted at 1/s", d)
	}
	h = must(0, "gw", &quoratev1.GrantRequest{Holder: "honest", Seq: 2, Want: 1000, Used: 2000, Demand: 1000})
	if h.GetAdded() != 1000 || h.GetShare() < 0.999 {
		t.Fatalf("the honest holder beside a claim of 1e12/s: %v, want its 1000 units", h)
	}

	for i := range fsm.MaxGrantsPerCaller {
		if r := must(i, "greedy", &quoratev1.GrantRequest{Key: "{t}:one", Holder: fmt.Sprint("h", i), Want: 1}); r.GetAdded() != 1 {
			t.Fatalf("greedy's holder %d: %v", i, r)
		}
	}
	_, err := grant(1, "greedy", &quoratev1.GrantRequest{Key: "{t}:one", Holder: "one-more", Want: 1})
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), `caller "greedy"`) ||
		!strings.Contains(err.Error(), fmt.Sprintf("under %d holders, the most one caller may", fsm.MaxGrantsPerCaller)) ||
		strings.Contains(err.Error(), "bucket") {
		t.Fatalf("greedy's holder %d: %v, want resource_exhausted naming the caller and the bound", fsm.MaxGrantsPerCaller+1, err)
	}
	if r := must(2, "gw", &quoratev1.GrantRequest{Key: "{t}:one", Holder: "honest", Want: 10}); r.GetAdded() != 10 {
		t.Fatalf("another caller's grant of the key: %v", r)
	}
}
