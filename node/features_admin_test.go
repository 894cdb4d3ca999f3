package node_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// admitCost asks node i for cost units of policy/key under (caller, id).
func admitCost(tb testing.TB, ctx context.Context, c *nodetest.Cluster, i int, policy, key, caller, id string, cost int64) *quoratev1.AdmitResponse {
	tb.Helper()
	resp, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: policy, Key: key, Cost: &cost, Caller: caller, RequestId: id}))
	if err != nil {
		tb.Fatalf("admit %s/%s (%q, %q) on node%d: %v", policy, key, caller, id, i+1, err)
	}
	return resp.Msg
}

func refundOn(ctx context.Context, c *nodetest.Cluster, i int, caller, id string) (*quoratev1.RefundResponse, error) {
	resp, err := c.Admission(i).Refund(ctx, connect.NewRequest(&quoratev1.RefundRequest{Caller: caller, RequestId: id, Key: "k"}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// wantCode checks err's Connect code and FieldViolation field.
func wantCode(tb testing.TB, what string, err error, code connect.Code, field string) {
	tb.Helper()
	if connect.CodeOf(err) != code || fieldOf(err) != field {
		tb.Fatalf("%s: %v (field %q), want %v on %q", what, err, fieldOf(err), code, field)
	}
}

// GetPolicy and Peek answer on every node with the documented errors.
func TestGetPolicyAndPeekOnEveryNode(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	sh := tbPolicy("sh", 1, longPeriod, 1)
	sh.Shadow = true
	applyPolicies(t, c, tbPolicy("pk", 10, longPeriod, 10), sh)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.Leader(t)
	for i := range c.Len() {
		what := fmt.Sprintf("node%d (leader=%v)", i+1, i == leader)
		var got *quoratev1.Policy
		nodetest.Eventually(t, 10*time.Second, what+" to have the policies", func() error {
			resp, err := c.Admin(i).GetPolicy(ctx, connect.NewRequest(&quoratev1.GetPolicyRequest{Name: "sh"}))
			if err != nil {
				return err
			}
			got = resp.Msg.GetPolicy()
			return nil
		})
		if got.GetName() != "sh" || got.GetAlgorithm() != "token_bucket" || got.GetLimit() != 1 || got.GetBurst() != 1 ||
			got.GetPeriod().AsDuration() != longPeriod || !got.GetShadow() || got.GetVersion() != 1 {
			t.Fatalf("%s: GetPolicy(sh) = %v", what, got)
		}
		_, err := c.Admin(i).GetPolicy(ctx, connect.NewRequest(&quoratev1.GetPolicyRequest{Name: "nope"}))
		wantCode(t, what+": GetPolicy(nope)", err, connect.CodeNotFound, "")

		p := peekOn(t, ctx, c, i, "pk", "fresh")
		if !p.GetWouldAllow() || p.GetRemaining() != 10 || p.GetLimit() != 10 || p.GetPolicyVersion() != 1 ||
			p.GetRetryAfter().AsDuration() != 0 || p.GetResetAfter().AsDuration() != 0 || p.GetDecidedAt() == nil {
			t.Fatalf("%s: peek of a fresh key: %v", what, p)
		}
		for _, bad := range []struct {
			policy, key string
			code        connect.Code
			field       string
		}{{"nope", "k", connect.CodeNotFound, ""}, {"pk", "", connect.CodeInvalidArgument, "key"}, {"", "k", connect.CodeInvalidArgument, "policy"}} {
			_, err := c.Admission(i).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: bad.policy, Key: bad.key}))
			wantCode(t, fmt.Sprintf("%s: Peek(%q, %q)", what, bad.policy, bad.key), err, bad.code, bad.field)
		}
	}
	// Peek and Admit agree, and peeking spends nothing.
	admitCost(t, ctx, c, 1, "pk", "k", "", "", 4)
	for i := range c.Len() {
		if p := peekOn(t, ctx, c, i, "pk", "k"); !p.GetWouldAllow() || p.GetRemaining() != 6 {
			t.Fatalf("node%d: peek after spending 4: %v", i+1, p)
		}
	}
	if r := admitCost(t, ctx, c, 2, "pk", "k", "", "", 6); !r.GetAllowed() || r.GetRemaining() != 0 {
		t.Fatalf("the 6 units the peeks saw: %v", r)
	}
	p := peekOn(t, ctx, c, 0, "pk", "k")
	r := admitCost(t, ctx, c, 0, "pk", "k", "", "", 1)
	if p.GetWouldAllow() || r.GetAllowed() || p.GetRemaining() != 0 || p.GetRetryAfter().AsDuration() <= 0 ||
		r.GetRetryAfter().AsDuration() > p.GetRetryAfter().AsDuration() {
		t.Fatalf("empty bucket: peek %v, admit %v", p, r)
	}
	// A shadow policy: over its limit the answer is allowed, shadow_denied.
	admitCost(t, ctx, c, 0, "sh", "k", "", "", 1)
	if r := admitCost(t, ctx, c, 1, "sh", "k", "", "", 1); !r.GetAllowed() || !r.GetShadowDenied() || r.GetRemaining() != 0 {
		t.Fatalf("shadow over the limit: %v", r)
	}
}

// Refund over the API on every node: the documented errors, at most once,
// and exactly once under concurrency across nodes.
func TestRefundOnEveryNode(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c, tbPolicy("rf", 10, longPeriod, 10))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if r := admitCost(t, ctx, c, 0, "rf", "k", "svc", "r1", 3); !r.GetAllowed() || r.GetRemaining() != 7 {
		t.Fatalf("admit r1: %v", r)
	}
	admitCost(t, ctx, c, 1, "rf", "k", "svc", "fill", 7)
	if r := admitCost(t, ctx, c, 2, "rf", "k", "svc", "denied", 1); r.GetAllowed() {
		t.Fatalf("want a denial: %v", r)
	}
	leader := c.Leader(t)
	for i := range c.Len() {
		what := fmt.Sprintf("node%d (leader=%v)", i+1, i == leader)
		_, err := refundOn(ctx, c, i, "svc", "")
		wantCode(t, what+": empty request_id", err, connect.CodeInvalidArgument, "request_id")
		_, err = refundOn(ctx, c, i, "svc", string(make([]byte, 129)))
		wantCode(t, what+": oversize request_id", err, connect.CodeInvalidArgument, "request_id")
		_, err = refundOn(ctx, c, i, "svc", "never")
		wantCode(t, what+": unknown request_id", err, connect.CodeNotFound, "")
		_, err = refundOn(ctx, c, i, "other", "r1")
		wantCode(t, what+": another caller's request_id", err, connect.CodeNotFound, "")
		_, err = refundOn(ctx, c, i, "svc", "denied")
		wantCode(t, what+": denied request", err, connect.CodeFailedPrecondition, "")
	}
	first, err := refundOn(ctx, c, (leader+1)%3, "svc", "r1")
	if err != nil || !first.GetRefunded() || first.GetCost() != 3 || first.GetRefundedAt() == nil {
		t.Fatalf("refund r1 on a follower: %v, %v", first, err)
	}
	for i := range c.Len() {
		again, err := refundOn(ctx, c, i, "svc", "r1")
		if err != nil || again.GetRefunded() || again.GetCost() != 3 || !again.GetRefundedAt().AsTime().Equal(first.GetRefundedAt().AsTime()) {
			t.Fatalf("node%d: repeated refund: %v, %v; want refunded=false as of the first", i+1, again, err)
		}
		if p := peekOn(t, ctx, c, i, "rf", "k"); p.GetRemaining() != 3 {
			t.Fatalf("node%d: %d remaining after one refund of 3, want 3", i+1, p.GetRemaining())
		}
	}

	// Exactly once across nodes: every request refunded from all three
	// nodes at once.
	const n = 10
	applyPolicies(t, c, tbPolicy("conc", n, longPeriod, n))
	for j := range n {
		admitCost(t, ctx, c, j%3, "conc", "k", "svc", fmt.Sprint("c", j), 1)
	}
	var refunded [n]atomic.Int32
	var wg sync.WaitGroup
	for j := range n {
		for i := range c.Len() {
			wg.Go(func() {
				r, err := refundOn(ctx, c, i, "svc", fmt.Sprint("c", j))
				if err != nil || r.GetCost() != 1 {
					t.Errorf("refund c%d on node%d: %v, %v", j, i+1, r, err)
					return
				}
				if r.GetRefunded() {
					refunded[j].Add(1)
				}
			})
		}
	}
	wg.Wait()
	for j := range n {
		if got := refunded[j].Load(); got != 1 {
			t.Errorf("c%d: refunded=true %d times over 3 concurrent refunds, want exactly once", j, got)
		}
	}
	if p := peekOn(t, ctx, c, 2, "conc", "k"); p.GetRemaining() != n {
		t.Fatalf("after refunding all %d: %d remaining", n, p.GetRemaining())
	}
}

// DeletePolicies over the API: all or none, NotFound naming what is missing,
// and decisions under a deleted policy answer NotFound on every node.
func TestDeletePoliciesOnEveryNode(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c, tbPolicy("gone", 10, longPeriod, 10), tbPolicy("keep", 10, longPeriod, 10))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := admitCost(t, ctx, c, 0, "gone", "k", "svc", "before", 2)
	leader := c.Leader(t)
	follower := (leader + 1) % 3
	del := func(i int, names ...string) (*quoratev1.DeletePoliciesResponse, error) {
		resp, err := c.Admin(i).DeletePolicies(ctx, connect.NewRequest(&quoratev1.DeletePoliciesRequest{Names: names}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	for i := range c.Len() {
		_, err := del(i)
		wantCode(t, fmt.Sprintf("node%d: no names", i+1), err, connect.CodeInvalidArgument, "names")
		_, err = del(i, "gone", "missing")
		wantCode(t, fmt.Sprintf("node%d: a missing name", i+1), err, connect.CodeNotFound, "")
	}
	if _, err := c.Admin(leader).GetPolicy(ctx, connect.NewRequest(&quoratev1.GetPolicyRequest{Name: "gone"})); err != nil {
		t.Fatalf("gone was deleted by a refused delete: %v", err)
	}

	resp, err := del(follower, "gone")
	if err != nil || len(resp.GetPolicies()) != 1 || resp.GetPolicies()[0].GetName() != "gone" || resp.GetPolicies()[0].GetVersion() != 1 {
		t.Fatalf("delete on a follower: %v, %v", resp, err)
	}
	_, err = del(leader, "gone")
	wantCode(t, "deleting again", err, connect.CodeNotFound, "")
	for i := range c.Len() {
		what := fmt.Sprintf("node%d (leader=%v)", i+1, i == leader)
		_, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "gone", Key: "k"}))
		wantCode(t, what+": admit", err, connect.CodeNotFound, "")
		_, err = c.Admission(i).Admit(ctx, connect.NewRequest(multiReq(check("keep", "{k}", 1), check("gone", "{k}", 1))))
		wantCode(t, what+": multi-check", err, connect.CodeNotFound, "")
		_, err = c.Admission(i).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: "gone", Key: "k"}))
		wantCode(t, what+": peek", err, connect.CodeNotFound, "")
		nodetest.Eventually(t, 10*time.Second, what+" to forget the policy", func() error {
			_, err := c.Admin(i).GetPolicy(ctx, connect.NewRequest(&quoratev1.GetPolicyRequest{Name: "gone"}))
			if connect.CodeOf(err) != connect.CodeNotFound {
				return fmt.Errorf("GetPolicy(gone): %v", err)
			}
			return nil
		})
		// A request recorded before the delete still gets its answer.
		again := admitCost(t, ctx, c, i, "gone", "k", "svc", "before", 2)
		if !again.GetDuplicate() || !sameDecision(first, again) {
			t.Fatalf("%s: retry after the delete: %v, want %v with duplicate", what, again, first)
		}
	}
	if p := peekOn(t, ctx, c, 0, "keep", "{k}"); p.GetRemaining() != 10 {
		t.Fatalf("keep was charged by refused multi-checks: %v", p)
	}
}
