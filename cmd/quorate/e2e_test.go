package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestEndToEnd drives a real 3-node cluster through run: apply the example
// policies, spend api-free's burst of 20 across all nodes and check the 21st
// request is denied, then read the cluster status.
func TestEndToEnd(t *testing.T) {
	c := nodetest.NewCluster(t, 3)

	var applied quoratev1.ApplyPoliciesResponse
	mustRunJSON(t, &applied, "policy", "apply", "-f", "../../examples/policies.yaml", "--server", c.APIURL(0), "-o", "json")
	if len(applied.GetPolicies()) != 4 {
		t.Fatalf("applied %d policies, want 4: %v", len(applied.GetPolicies()), &applied)
	}
	for _, p := range applied.GetPolicies() {
		if p.GetVersion() != 1 {
			t.Errorf("policy %s has version %d, want 1", p.GetName(), p.GetVersion())
		}
	}
	// Applying the same file again keeps the versions; text output lists them.
	out, _, err := runCLI(t, "policy", "apply", "-f", "../../examples/policies.yaml", "--server", strings.TrimPrefix(c.APIURL(1), "http://"))
	if err != nil || !strings.Contains(out, "applied 4 policies") || !strings.Contains(out, "api-free") {
		t.Fatalf("second apply: %v\n%s", err, out)
	}
	var listed quoratev1.ListPoliciesResponse
	mustRunJSON(t, &listed, "policy", "list", "--server", c.APIURL(2), "-o", "json")
	for _, p := range listed.GetPolicies() {
		if p.GetVersion() != 1 {
			t.Errorf("after re-applying, policy %s has version %d, want 1", p.GetName(), p.GetVersion())
		}
	}

	// api-free: burst 20, 60/min sustained, i.e. one unit back per second.
	const burst = 20
	var decisions []*quoratev1.AdmitResponse
	for i := range burst + 1 {
		var d quoratev1.AdmitResponse
		mustRunJSON(t, &d, "admit", "--server", c.APIURL(i%3), "--policy", "api-free", "--key", "e2e-tenant", "-o", "json")
		decisions = append(decisions, &d)
	}
	elapsed := decisions[burst].GetDecidedAt().AsTime().Sub(decisions[0].GetDecidedAt().AsTime())
	for i, d := range decisions[:burst] {
		if !d.GetAllowed() || d.GetLimit() != burst || d.GetPolicyVersion() != 1 {
			t.Errorf("request %d: %v, want allowed with limit %d under version 1", i+1, d, burst)
		}
	}
	last := decisions[burst]
	switch {
	case elapsed < time.Second: // api-free refills one unit per second
		if last.GetAllowed() || last.GetRemaining() != 0 || last.GetRetryAfter().AsDuration() <= 0 {
			t.Errorf("request %d, %v after the first: %v, want denied with remaining 0 and a retry_after", burst+1, elapsed, last)
		}
	default:
		t.Logf("the %d requests took %v, so the bucket refilled; not checking the denial", burst+1, elapsed)
	}

	// A denial prints "denied" and is not an error.
	out, _, err = runCLI(t, "admit", "--server", c.APIURL(0), "--policy", "api-free", "--key", "e2e-tenant", "--cost", "10")
	if err != nil || !strings.HasPrefix(out, "denied") {
		t.Errorf("admit over the limit: %v, output %q; want \"denied ...\" and no error", err, out)
	}
	out, _, err = runCLI(t, "admit", "--server", c.APIURL(1), "--policy", "api-free", "--key", "other-tenant", "--request-id", "r-1")
	if err != nil || !strings.HasPrefix(out, "allowed  remaining=19/20") || !strings.Contains(out, "request_id=r-1") {
		t.Errorf("admit: %v, output %q", err, out)
	}

	// RPC errors carry their Connect code.
	_, _, err = runCLI(t, "admit", "--server", c.APIURL(2), "--policy", "no-such-policy", "--key", "k")
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("unknown policy: got %v (code %v), want not_found", err, connect.CodeOf(err))
	}
	var rpcErr *rpcError
	if !errors.As(err, &rpcErr) || !strings.Contains(err.Error(), "not_found") {
		t.Errorf("unknown policy: error %q should be an *rpcError naming the code", err)
	}
	_, _, err = runCLI(t, "admit", "--server", c.APIURL(2), "--policy", "api-free", "--key", "k", "--cost", "11")
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "cost") {
		t.Errorf("cost over max_cost: got %v, want invalid_argument naming cost", err)
	}

	// Cluster status, as JSON and as a table.
	var status quoratev1.ClusterStatusResponse
	mustRunJSON(t, &status, "admin", "status", "--server", c.APIURL(1), "-o", "json")
	if status.GetLeaderId() == "" || len(status.GetMembers()) != 3 {
		t.Fatalf("status: %v, want a leader and 3 members", &status)
	}
	for _, m := range status.GetMembers() {
		if m.GetStatus() == nil || m.GetApiAddr() == "" || m.GetRaftAddr() == "" {
			t.Errorf("member %v lacks its status or addresses", m)
		}
	}
	out, _, err = runCLI(t, "admin", "status", "--server", c.APIURL(2))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.Contains(out, "leader "+status.GetLeaderId()) {
		t.Fatalf("status table: want a summary, a header and 3 rows:\n%s", out)
	}
	leaderRows := 0
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		if len(f) > 2 && f[0] == status.GetLeaderId() && f[1] == "leader" && f[2] == "*" {
			leaderRows++
		}
	}
	if leaderRows != 1 {
		t.Errorf("status table marks %d leader rows, want 1:\n%s", leaderRows, out)
	}
}
