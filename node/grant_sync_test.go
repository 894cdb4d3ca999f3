package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// syncPolicy is a token bucket of 100 units a second whose clients admit
// locally and report every 200ms: over-admission of at most 20 units.
func syncPolicy() *quoratev1.Policy {
	return &quoratev1.Policy{Name: "feed", Algorithm: "token_bucket", Limit: 100, Period: durationpb.New(time.Second),
		Local: &quoratev1.LocalDecisions{Mode: "sync", SyncInterval: durationpb.New(200 * time.Millisecond)}}
}

func TestGrantSyncPolicyAPI(t *testing.T) {
	p := node.PolicyFromAPI(syncPolicy())
	if p.Local != (admission.Local{Mode: admission.LocalSync, SyncInterval: 200 * time.Millisecond}) {
		t.Fatalf("PolicyFromAPI local = %+v", p.Local)
	}
	if got := node.PolicyToAPI(p, 3).GetLocal(); got.GetMode() != "sync" || got.GetSyncInterval().AsDuration() != 200*time.Millisecond ||
		got.MaxGrant != nil || got.Ttl != nil {
		t.Errorf("PolicyToAPI local = %v", got)
	}
	if err := p.WithDefaults().Validate(); err != nil || p.WithDefaults().SyncBound() != 20 {
		t.Errorf("Validate = %v, bound %d; want valid, 20", err, p.WithDefaults().SyncBound())
	}
	zero := syncPolicy()
	zero.Local.SyncInterval = durationpb.New(0)
	var fe *admission.FieldError
	if err := node.CheckExplicitZeros(zero); !errors.As(err, &fe) || fe.Field != "local.sync_interval" {
		t.Errorf("CheckExplicitZeros(sync_interval 0) = %v", err)
	}
	if err := node.CheckExplicitZeros(syncPolicy()); err != nil {
		t.Errorf("CheckExplicitZeros(sync policy) = %v", err)
	}
}

// A sync policy on a cluster: holders get allowances within the bound and
// what they report is charged.
func TestGrantSyncOnACluster(t *testing.T) {
	c := nodetest.NewCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	applied, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{syncPolicy()}}))
	if err != nil {
		t.Fatal(err)
	}
	if l := applied.Msg.GetPolicies()[0].GetLocal(); l.GetMode() != "sync" || l.GetSyncInterval().AsDuration() != 200*time.Millisecond {
		t.Fatalf("stored local: %v", l)
	}
	grant := func(r *quoratev1.GrantRequest) *quoratev1.GrantResponse {
		t.Helper()
		r.Policy, r.Key, r.Caller = "feed", "k", "gw"
		resp, err := c.Admission(0).Grant(ctx, connect.NewRequest(r))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg
	}
	a := grant(&quoratev1.GrantRequest{Holder: "a", Want: 1000, Demand: 7})
	if a.GetTotal() != 20 || a.GetRemaining() != 100 || a.GetStartedAt() == nil {
		t.Fatalf("a's allowance: %v", a)
	}
	a = grant(&quoratev1.GrantRequest{Holder: "a", Seq: 1, Want: 1000, Used: 15, Demand: 7})
	if a.GetRemaining() > 85 || a.GetTotal() < 1 || a.GetTotal() > 20 {
		t.Fatalf("a's report of 15: %v", a)
	}
	r := grant(&quoratev1.GrantRequest{Holder: "a", Seq: 2, Used: 15, Release: true})
	if r.GetReturned() != 0 {
		t.Errorf("release of a sync allowance returned %d", r.GetReturned())
	}
}
