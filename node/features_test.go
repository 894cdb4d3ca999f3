package node_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// longPeriod makes refill negligible: capacity c refills one unit per
// 366 days / c.
const longPeriod = 366 * 24 * time.Hour

// tbPolicy is a token-bucket policy in the API's form.
func tbPolicy(name string, limit int64, period time.Duration, burst int64) *quoratev1.Policy {
	return &quoratev1.Policy{Name: name, Algorithm: "token_bucket", Limit: limit, Period: durationpb.New(period), Burst: nonZero(burst)}
}

// applyPolicies stores policies through node 0.
func applyPolicies(tb testing.TB, c *nodetest.Cluster, ps ...*quoratev1.Policy) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: ps})); err != nil {
		tb.Fatalf("apply policies: %v", err)
	}
}

func check(policy, key string, cost int64) *quoratev1.Check {
	return &quoratev1.Check{Policy: policy, Key: key, Cost: &cost}
}

// multiReq is an Admit whose own check is checks[0] and whose also holds the
// rest.
func multiReq(checks ...*quoratev1.Check) *quoratev1.AdmitRequest {
	return &quoratev1.AdmitRequest{Policy: checks[0].GetPolicy(), Key: checks[0].GetKey(), Cost: checks[0].Cost, Also: checks[1:]}
}

// peekOn peeks through node i.
func peekOn(tb testing.TB, ctx context.Context, c *nodetest.Cluster, i int, policy, key string) *quoratev1.PeekResponse {
	tb.Helper()
	resp, err := c.Admission(i).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: policy, Key: key}))
	if err != nil {
		tb.Fatalf("peek %s/%s on node%d: %v", policy, key, i+1, err)
	}
	return resp.Msg
}

// The must-have: concurrent multi-check Admits over every node are
// all or nothing. Each state ends up charged exactly what the allowed
// requests that include it spent, no limit is exceeded, and every denial
// names the check that denied.
func TestMultiCheckAllOrNothingUnderConcurrency(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	caps := map[string]int64{"tenant": 30, "endpoint": 50, "ip": 20}
	applyPolicies(t, c, tbPolicy("tenant", 30, longPeriod, 30), tbPolicy("endpoint", 50, longPeriod, 50), tbPolicy("ip", 20, longPeriod, 20))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	ips := []string{"{t1}:ip:10.0.0.1", "{t1}:ip:10.0.0.2", "{t1}:ip:10.0.0.3"}
	spent := map[string]int64{ips[0]: 15} // ip 1 starts with 5 units left
	if resp, err := c.Admission(1).Admit(ctx, connect.NewRequest(multiReq(check("ip", ips[0], 15)))); err != nil || !resp.Msg.GetAllowed() {
		t.Fatalf("pre-spend: %v, %v", resp, err)
	}
	// tenant costs 1, endpoint 2 (so at most 25 requests pass), ip 1; ip 1
	// gets 60% of the requests, so both ip and endpoint deny some.
	const n = 200
	ipOf := func(i int) string { return ips[max(0, i%5-2)] }
	resps := make([]*quoratev1.AdmitResponse, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := multiReq(check("tenant", "{t1}:tenant", 1), check("endpoint", "{t1}:endpoint", 2), check("ip", ipOf(i), 1))
			// With a request ID, as the Go client sends it: a node retries a
			// request whose outcome a lost leadership left unknown.
			req.Caller, req.RequestId = "gw", fmt.Sprint("m", i)
			resp, err := c.Admission(i%3).Admit(ctx, connect.NewRequest(req))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			resps[i] = resp.Msg
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	allowed, deniedBy := 0, map[int32]int{}
	for i, r := range resps {
		if len(r.GetChecks()) != 3 {
			t.Fatalf("request %d: %v, want 3 checks", i, r)
		}
		if r.GetAllowed() {
			if r.DeniedCheck != nil {
				t.Fatalf("request %d allowed but names denied_check %d", i, r.GetDeniedCheck())
			}
			for j, ch := range r.GetChecks() {
				if !ch.GetAllowed() {
					t.Fatalf("request %d allowed although check %d denied: %v", i, j, r)
				}
			}
			allowed++
			spent["{t1}:tenant"]++
			spent["{t1}:endpoint"] += 2
			spent[ipOf(i)]++
			continue
		}
		if r.DeniedCheck == nil {
			t.Fatalf("request %d denied without a denied_check: %v", i, r)
		}
		dc := r.GetDeniedCheck()
		d := r.GetChecks()[dc]
		if d.GetAllowed() || d.GetRemaining() != r.GetRemaining() || d.GetLimit() != r.GetLimit() ||
			d.GetRetryAfter().AsDuration() != r.GetRetryAfter().AsDuration() || r.GetRetryAfter().AsDuration() <= 0 {
			t.Fatalf("request %d: top-level %v is not denied check %d's %v", i, r, dc, d)
		}
		if j := slices.IndexFunc(r.GetChecks()[:dc], func(ch *quoratev1.CheckResult) bool { return !ch.GetAllowed() }); j >= 0 {
			t.Fatalf("request %d: denied_check %d but check %d denied first", i, dc, j)
		}
		deniedBy[dc]++
	}
	t.Logf("allowed %d, denied by check: %v", allowed, deniedBy)
	// The endpoint admits exactly 25 (its ip or tenant never stops it first:
	// 5+20+20 ip units and 30 tenant units are more).
	if allowed != 25 || deniedBy[1] == 0 || deniedBy[2] == 0 {
		t.Fatalf("allowed %d, denied by check %v; want 25 allowed and denials by endpoint and ip", allowed, deniedBy)
	}
	for i := range c.Len() {
		for key, policy := range map[string]string{"{t1}:tenant": "tenant", "{t1}:endpoint": "endpoint", ips[0]: "ip", ips[1]: "ip", ips[2]: "ip"} {
			p := peekOn(t, ctx, c, i, policy, key)
			if spent[key] > caps[policy] {
				t.Fatalf("%s/%s: %d spent, over the limit %d", policy, key, spent[key], caps[policy])
			}
			if got := p.GetLimit() - p.GetRemaining(); got != spent[key] {
				t.Fatalf("node%d: %s/%s holds %d spent units, the allowed answers account for %d", i+1, policy, key, got, spent[key])
			}
		}
	}
}

// The keys of one request must share a hash tag; bad checks are refused
// before anything is decided, naming the field, on the leader and followers.
func TestMultiCheckRequestValidation(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c, tbPolicy("a", 10, longPeriod, 10), tbPolicy("b", 10, longPeriod, 10))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tooMany := []*quoratev1.Check{check("a", "{t}:0", 1)}
	for i := range admission.MaxChecks {
		tooMany = append(tooMany, check("b", fmt.Sprintf("{t}:%d", i), 1))
	}
	withWait := func(d time.Duration) *quoratev1.AdmitRequest {
		r := multiReq(check("a", "{t}:x", 1))
		r.MaxWait = durationpb.New(d)
		return r
	}
	cases := []struct {
		name  string
		req   *quoratev1.AdmitRequest
		code  connect.Code
		field string
	}{
		{"tags differ", multiReq(check("a", "{t1}:x", 1), check("b", "{t2}:x", 1)), connect.CodeInvalidArgument, "also[0].key"},
		{"second also differs", multiReq(check("a", "{t}:x", 1), check("b", "{t}:y", 1), check("b", "{u}:y", 1)), connect.CodeInvalidArgument, "also[1].key"},
		{"no tags", multiReq(check("a", "x", 1), check("b", "y", 1)), connect.CodeInvalidArgument, "also[0].key"},
		{"tag vs untagged", multiReq(check("a", "{t}:x", 1), check("b", "x", 1)), connect.CodeInvalidArgument, "also[0].key"},
		{"one check more than admission.MaxChecks", multiReq(tooMany...), connect.CodeInvalidArgument, "also"},
		{"cost 0 in also", multiReq(check("a", "{t}:x", 1), check("b", "{t}:y", 0)), connect.CodeInvalidArgument, "also[0].cost"},
		{"cost above max_cost in also", multiReq(check("a", "{t}:x", 1), check("b", "{t}:y", 11)), connect.CodeInvalidArgument, "also[0].cost"},
		{"empty policy in also", multiReq(check("a", "{t}:x", 1), check("", "{t}:y", 1)), connect.CodeInvalidArgument, "also[0].policy"},
		{"empty key in also", multiReq(check("a", "{t}:x", 1), check("b", "", 1)), connect.CodeInvalidArgument, "also[0].key"},
		{"unknown policy in also", multiReq(check("a", "{t}:x", 1), check("b", "{t}:y", 1), check("nope", "{t}:z", 1)), connect.CodeNotFound, ""},
		{"max_wait too long", withWait(2 * time.Minute), connect.CodeInvalidArgument, "max_wait"},
		{"max_wait negative", withWait(-time.Second), connect.CodeInvalidArgument, "max_wait"},
	}
	leader := c.Leader(t)
	for _, tc := range cases {
		for i := range c.Len() {
			t.Run(fmt.Sprintf("%s/node%d(leader=%v)", tc.name, i+1, i == leader), func(t *testing.T) {
				_, err := c.Admission(i).Admit(ctx, connect.NewRequest(tc.req))
				if connect.CodeOf(err) != tc.code || fieldOf(err) != tc.field {
					t.Fatalf("got %v (field %q), want %v on %q", err, fieldOf(err), tc.code, tc.field)
				}
			})
		}
	}
	for _, key := range []string{"{t}:x", "{t}:y", "{t}:z", "{t1}:x", "{t2}:x", "x", "y"} {
		for _, policy := range []string{"a", "b"} {
			if p := peekOn(t, ctx, c, 0, policy, key); p.GetRemaining() != 10 {
				t.Fatalf("%s/%s: %d remaining after refused requests, want 10", policy, key, p.GetRemaining())
			}
		}
	}
	// An untagged key is its own tag: "{t}:x" and "t" share tag "t".
	resp, err := c.Admission(1).Admit(ctx, connect.NewRequest(multiReq(check("a", "{t}:x", 1), check("b", "t", 2))))
	if err != nil || !resp.Msg.GetAllowed() || len(resp.Msg.GetChecks()) != 2 || resp.Msg.GetChecks()[1].GetRemaining() != 8 {
		t.Fatalf("keys sharing tag t: %v, %v", resp, err)
	}
}

// Concurrent paced requests over every node are given distinct slots, one
// emission interval apart: each answer's decided_at + wait is a slot, and a
// request whose slot is beyond max_wait is denied.
func TestPacingOverTheAPI(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	const T = 10 * time.Second // 6 per minute, burst 1
	applyPolicies(t, c, tbPolicy("paced", 6, time.Minute, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Slots +0s … +60s fit a max_wait of 60s (the 7th waits 60s minus the
	// time since the first); the 8th needs about 70s.
	const n = 8
	resps := make([]*quoratev1.AdmitResponse, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := multiReq(check("paced", "{p}", 1))
			req.MaxWait = durationpb.New(time.Minute)
			req.Caller, req.RequestId = "gw", fmt.Sprint("p", i)
			resp, err := c.Admission(i%3).Admit(ctx, connect.NewRequest(req))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			resps[i] = resp.Msg
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var slots []time.Time
	for i, r := range resps {
		wait := r.GetWait().AsDuration()
		if !r.GetAllowed() {
			if wait != 0 || r.GetRetryAfter().AsDuration() <= time.Minute {
				t.Fatalf("request %d denied: %v, want no wait and retry_after beyond max_wait", i, r)
			}
			continue
		}
		if wait < 0 || wait > time.Minute {
			t.Fatalf("request %d: wait %v outside [0, max_wait]", i, wait)
		}
		slots = append(slots, r.GetDecidedAt().AsTime().Add(wait))
	}
	if len(slots) != n-1 {
		t.Fatalf("%d allowed, want %d (slots +0s … +60s)", len(slots), n-1)
	}
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	for k, s := range slots {
		if off := s.Sub(slots[0]); off != time.Duration(k)*T {
			t.Fatalf("slot %d is %v after the first, want %v: slots %v", k, off, time.Duration(k)*T, slots)
		}
	}
	// The first slot was free: its answer waited nothing.
	first := slices.IndexFunc(resps, func(r *quoratev1.AdmitResponse) bool {
		return r.GetAllowed() && r.GetDecidedAt().AsTime().Add(r.GetWait().AsDuration()).Equal(slots[0])
	})
	if resps[first].GetWait().AsDuration() != 0 {
		t.Fatalf("the first slot's answer waited %v", resps[first].GetWait().AsDuration())
	}
}
