package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// fieldOf returns the FieldViolation's field of a Connect error, or "".
func fieldOf(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if fv, ok := v.(*quoratev1.FieldViolation); ok {
				return fv.GetField()
			}
		}
	}
	return ""
}

func ptr[T any](v T) *T { return &v }

// Bad input gets the error codes of DESIGN.md §6 on the leader and on
// followers, names the field, and leaves the bucket untouched.
func TestBadAdmitRequestsAreRefusedAndSpendNothing(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicy(t, c, "strict", 5, time.Hour, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cases := []struct {
		name  string
		req   *quoratev1.AdmitRequest
		code  connect.Code
		field string
	}{
		{"empty key", &quoratev1.AdmitRequest{Policy: "strict", Key: ""}, connect.CodeInvalidArgument, "key"},
		{"oversize key", &quoratev1.AdmitRequest{Policy: "strict", Key: strings.Repeat("k", 513)}, connect.CodeInvalidArgument, "key"},
		{"empty policy", &quoratev1.AdmitRequest{Policy: "", Key: "k"}, connect.CodeInvalidArgument, "policy"},
		{"unknown policy", &quoratev1.AdmitRequest{Policy: "nope", Key: "k"}, connect.CodeNotFound, ""},
		{"cost zero", &quoratev1.AdmitRequest{Policy: "strict", Key: "k", Cost: ptr(int64(0))}, connect.CodeInvalidArgument, "cost"},
		{"cost negative", &quoratev1.AdmitRequest{Policy: "strict", Key: "k", Cost: ptr(int64(-3))}, connect.CodeInvalidArgument, "cost"},
		{"cost above burst", &quoratev1.AdmitRequest{Policy: "strict", Key: "k", Cost: ptr(int64(6))}, connect.CodeInvalidArgument, "cost"},
	}
	leader := c.Leader(t)
	for _, tc := range cases {
		for i := range c.Len() {
			role := "follower"
			if i == leader {
				role = "leader"
			}
			t.Run(tc.name+"/"+role, func(t *testing.T) {
				_, err := c.Admission(i).Admit(ctx, connect.NewRequest(tc.req))
				if connect.CodeOf(err) != tc.code {
					t.Fatalf("got %v, want code %v", err, tc.code)
				}
				if got := fieldOf(err); got != tc.field {
					t.Fatalf("field %q, want %q (%v)", got, tc.field, err)
				}
			})
		}
	}
	resp, err := admit(ctx, c, 0, "strict", "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() || resp.GetRemaining() != 4 {
		t.Fatalf("after refused requests: %v; want allowed with 4 remaining", resp)
	}
}

// A decision carries the policy's version; changing the policy bumps it and
// re-applying the same definition does not.
func TestPolicyVersionsInDecisions(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, step := range []struct {
		burst int64
		want  uint64
	}{{5, 1}, {5, 1}, {7, 2}} {
		applyPolicy(t, c, "v", 5, time.Minute, step.burst)
		resp, err := admit(ctx, c, 2, "v", "k", 0)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetPolicyVersion() != step.want || resp.GetLimit() != step.burst {
			t.Fatalf("burst %d: version %d limit %d, want version %d", step.burst, resp.GetPolicyVersion(), resp.GetLimit(), step.want)
		}
	}
	// An invalid policy in a batch stores none of them and names the field.
	_, err := c.Admin(1).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{
		{Name: "fine", Algorithm: "token_bucket", Limit: 1, Period: durationpb.New(time.Second)},
		{Name: "broken", Algorithm: "token_bucket", Limit: 0, Period: durationpb.New(time.Second)},
	}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || fieldOf(err) != "policies[1].limit" {
		t.Fatalf("got %v (field %q), want InvalidArgument on policies[1].limit", err, fieldOf(err))
	}
	list, err := c.Admin(1).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Msg.GetPolicies() {
		if p.GetName() == "fine" {
			t.Fatal(`policy "fine" was stored although its batch was refused`)
		}
	}
}

// ClusterStatus answers on every node: every member, its role, the leader
// and applied indexes.
func TestClusterStatusOnEveryNode(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	leader := c.Leader(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range c.Len() {
		resp, err := c.Admin(i).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		st := resp.Msg
		if st.GetAnsweredBy() != c.Node(i).ID() || st.GetLeaderId() != c.Node(leader).ID() {
			t.Fatalf("node%d: answered_by %q leader %q", i+1, st.GetAnsweredBy(), st.GetLeaderId())
		}
		if len(st.GetMembers()) != 3 {
			t.Fatalf("node%d: %d members, want 3", i+1, len(st.GetMembers()))
		}
		leaders := 0
		for _, m := range st.GetMembers() {
			if m.GetStatus() == nil {
				t.Fatalf("node%d: member %s unreachable: %s", i+1, m.GetId(), m.GetError())
			}
			if m.GetSuffrage() != "voter" || m.GetApiAddr() == "" || m.GetStatus().GetLastAppliedIndex() == 0 {
				t.Fatalf("node%d: member %v", i+1, m)
			}
			if m.GetStatus().GetRole() == "leader" {
				leaders++
			}
		}
		if leaders != 1 {
			t.Fatalf("node%d: %d leaders among members", i+1, leaders)
		}
	}
}

// Every field of a policy survives ApplyPolicies and comes back from
// ListPolicies on every node as it was sent.
func TestPolicyFieldsRoundTrip(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent := []*quoratev1.Policy{{
		Name: "full", Algorithm: "token_bucket", Limit: 60, Period: durationpb.New(time.Minute),
		Burst: proto.Int64(20), MaxCost: proto.Int64(10), OnUnavailable: "allow", DedupeRetention: durationpb.New(30 * time.Minute),
	}, {
		Name: "monthly", Algorithm: "quota", Limit: 1000, Period: durationpb.New(0), Burst: proto.Int64(1000), MaxCost: proto.Int64(50),
		Calendar: "month", Shadow: true, OnUnavailable: "deny", DedupeRetention: durationpb.New(time.Hour),
	}}
	applied, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: sent}))
	if err != nil {
		t.Fatal(err)
	}
	var want []*quoratev1.Policy
	for i, p := range sent {
		w := proto.Clone(p).(*quoratev1.Policy)
		w.Version = 1
		want = append(want, w)
		if got := applied.Msg.GetPolicies()[i]; !proto.Equal(got, w) {
			t.Fatalf("ApplyPolicies answered %v, want %v", got, w)
		}
	}
	c.Eventually(t, 10*time.Second, "the policies on every node", func() error {
		for i := range c.Len() {
			list, err := c.Admin(i).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
			if err != nil {
				return err
			}
			got := list.Msg.GetPolicies() // sorted by name: full, monthly
			if len(got) != 2 || !proto.Equal(got[0], want[0]) || !proto.Equal(got[1], want[1]) {
				return fmt.Errorf("node%d lists %v", i+1, got)
			}
			one, err := c.Admin(i).GetPolicy(ctx, connect.NewRequest(&quoratev1.GetPolicyRequest{Name: "monthly"}))
			if err != nil || !proto.Equal(one.Msg.GetPolicy(), want[1]) {
				return fmt.Errorf("node%d GetPolicy: %v, %v", i+1, one, err)
			}
		}
		return nil
	})
}
