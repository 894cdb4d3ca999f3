package node_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// AdmissionService.Policies answers a caller with the client role the
// policies its access entry lets it use, and only those: every policy for
// one not limited, its list for one limited; naming another is refused.
// An admin-only caller reads them with ListPolicies, not here.
func TestPoliciesForTheClientRole(t *testing.T) {
	e := newAccessEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := func(resp *connect.Response[quoratev1.PoliciesResponse]) []string {
		var out []string
		for _, p := range resp.Msg.GetPolicies() {
			out = append(out, p.GetName())
		}
		return out
	}
	// Each node answers from its replica: wait until every one has applied
	// both policies.
	for i := range e.c.Len() {
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := e.admin(t, "ops", i).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
			if err == nil && len(resp.Msg.GetPolicies()) == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d has not applied the policies after 20s: %v", i, err)
			}
			time.Sleep(10 * time.Millisecond) // polling interval, not synchronization
		}
	}
	for _, tc := range []struct {
		caller string
		names  []string
		want   []string
	}{
		{"app-a", nil, []string{"acc-p", "acc-q"}},
		{"ops", nil, []string{"acc-p", "acc-q"}},
		{"only-p", nil, []string{"acc-p"}},
		{"only-p", []string{"acc-p"}, []string{"acc-p"}},
		{"app-a", []string{"acc-q", "no-such"}, []string{"acc-q"}},
	} {
		for i := range e.c.Len() {
			resp, err := e.admission(t, tc.caller, i).Policies(ctx, connect.NewRequest(&quoratev1.PoliciesRequest{Names: tc.names}))
			if err != nil {
				t.Fatalf("%s asks node %d for %v: %v", tc.caller, i, tc.names, err)
			}
			if got := names(resp); !slices.Equal(got, tc.want) {
				t.Errorf("%s asks node %d for %v: %v, want %v", tc.caller, i, tc.names, got, tc.want)
			}
		}
	}
	_, err := e.admission(t, "only-p", 0).Policies(ctx, connect.NewRequest(&quoratev1.PoliciesRequest{Names: []string{"acc-q"}}))
	wantAccessCode(t, "only-p names acc-q", err, connect.CodePermissionDenied, `"only-p"`, `"acc-q"`)
	_, err = e.admission(t, "admin-b", 0).Policies(ctx, connect.NewRequest(&quoratev1.PoliciesRequest{}))
	wantAccessCode(t, "admin-b (admin only)", err, connect.CodePermissionDenied, `"admin-b"`, "client")
	_, err = e.admission(t, "nobody", 0).Policies(ctx, connect.NewRequest(&quoratev1.PoliciesRequest{}))
	wantAccessCode(t, "anonymous", err, connect.CodeUnauthenticated)
	_, err = e.admin(t, "only-p", 0).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
	wantAccessCode(t, "only-p lists with the admin call", err, connect.CodePermissionDenied)
	resp, err := e.admin(t, "admin-b", 0).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
	if err != nil || len(resp.Msg.GetPolicies()) != 2 {
		t.Fatalf("admin-b lists every policy: %v, %v", resp, err)
	}
}
