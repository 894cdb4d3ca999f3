package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

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
	if len(applied.GetPolicies()) != 11 {
		t.Fatalf("applied %d policies, want 11: %v", len(applied.GetPolicies()), &applied)
	}
	for _, p := range applied.GetPolicies() {
		if p.GetVersion() != 1 {
			t.Errorf("policy %s has version %d, want 1", p.GetName(), p.GetVersion())
		}
	}
	// Applying the same file again keeps the versions; text output lists them.
	out, _, err := runCLI(t, "policy", "apply", "-f", "../../examples/policies.yaml", "--server", strings.TrimPrefix(c.APIURL(1), "http://"))
	if err != nil || !strings.Contains(out, "applied 11 policies") || !strings.Contains(out, "api-free") {
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
	// The members' table ends at the first blank line (the hot keys and
	// other sections follow).
	table, _, _ := strings.Cut(strings.TrimSpace(out), "\n\n")
	lines := strings.Split(table, "\n")
	if len(lines) != 5 || !strings.Contains(out, "leader "+status.GetLeaderId()) ||
		status.GetClusterId() == "" || !strings.Contains(lines[0], "cluster ID "+status.GetClusterId()) {
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

// TestEndToEndExactlyOnce drives admits with request IDs against a real
// 3-node cluster: a repeat gets the recorded answer and spends nothing, a
// reused request ID with another cost is refused, the caller namespaces the
// request ID, and a dead node in the --server list is rotated past.
func TestEndToEndExactlyOnce(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	file := filepath.Join(t.TempDir(), "policies.yaml")
	// 10 per hour: nothing refills during the test.
	const policies = "policies:\n" +
		"  - name: e2e-once\n" +
		"    algorithm: token_bucket\n" +
		"    limit: 10\n" +
		"    period: 1h\n" +
		"    dedupe_retention: 5m\n"
	if err := os.WriteFile(file, []byte(policies), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "policy", "apply", "-f", file, "--server", c.APIURL(0))
	if err != nil || !strings.Contains(out, "DEDUPE_RETENTION") || !strings.Contains(out, "e2e-once") {
		t.Fatalf("policy apply: %v\n%s", err, out)
	}

	admit := func(server int, extra ...string) *quoratev1.AdmitResponse {
		t.Helper()
		var d quoratev1.AdmitResponse
		mustRunJSON(t, &d, append([]string{"admit", "--server", c.APIURL(server), "--policy", "e2e-once", "--key", "k", "-o", "json"}, extra...)...)
		return &d
	}
	first := admit(0, "--request-id", "R")
	if !first.GetAllowed() || first.GetRemaining() != 9 || first.GetDuplicate() {
		t.Fatalf("first admit: %v, want allowed with 9 remaining, not a duplicate", first)
	}
	// The same request ID through another node: the recorded answer.
	again := admit(1, "--request-id", "R")
	if !again.GetDuplicate() {
		t.Errorf("repeat: %v, want duplicate=true", again)
	}
	same := proto.CloneOf(again)
	same.Duplicate = false
	if !proto.Equal(same, first) {
		t.Errorf("repeat answered %v, want the first answer %v with duplicate=true", again, first)
	}
	// The bucket was spent once: a new request finds exactly one unit less.
	if third := admit(2); !third.GetAllowed() || third.GetRemaining() != first.GetRemaining()-1 || third.GetDuplicate() {
		t.Errorf("new request: %v, want allowed with %d remaining", third, first.GetRemaining()-1)
	}
	// Text output marks the duplicate.
	out, _, err = runCLI(t, "admit", "--server", c.APIURL(2), "--policy", "e2e-once", "--key", "k", "--request-id", "R")
	if err != nil || !strings.HasPrefix(out, "allowed (duplicate)  remaining=9/10") {
		t.Errorf("text repeat: %v, output %q; want \"allowed (duplicate)  remaining=9/10 ...\"", err, out)
	}
	// The caller namespaces request IDs: R of another caller is a new request.
	if d := admit(0, "--request-id", "R", "--caller", "other"); d.GetDuplicate() || d.GetRemaining() != 7 {
		t.Errorf("R of caller other: %v, want a new decision with 7 remaining", d)
	}
	if d := admit(1, "--request-id", "R", "--caller", "other"); !d.GetDuplicate() || d.GetRemaining() != 7 {
		t.Errorf("R of caller other again: %v, want its recorded answer", d)
	}

	// Reusing a request ID for another request is refused, not retried.
	_, _, err = runCLI(t, "admit", "--server", c.APIURL(0), "--policy", "e2e-once", "--key", "k", "--request-id", "R", "--cost", "2")
	var rpcErr *rpcError
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !errors.As(err, &rpcErr) {
		t.Errorf("request ID reused with another cost: got %v (code %v), want invalid_argument", err, connect.CodeOf(err))
	}
	wantErrNaming(t, err, "request_id")

	// A dead node first in the list: the attempt after it goes to a live one.
	leader := c.Leader(t)
	dead, live := (leader+1)%3, (leader+2)%3
	c.Kill(dead)
	out, errOut, err := runCLI(t, "admit", "-v", "--server", c.APIURL(dead)+","+c.APIURL(live), "--policy", "e2e-once", "--key", "k", "--timeout", "20s")
	if err != nil {
		t.Fatalf("admit with a dead node first: %v\nstderr: %s", err, errOut)
	}
	if !strings.HasPrefix(out, "allowed  remaining=6/10") {
		t.Errorf("admit with a dead node first: %q, want allowed with 6 remaining", out)
	}
	if n := attemptsOf(t, out); n < 2 {
		t.Errorf("output %q shows %d attempts, want at least 2", out, n)
	}
	if !strings.Contains(errOut, "attempt 1 failed: Admit on "+c.APIURL(dead)) {
		t.Errorf("stderr should report the failed attempt on %s:\n%s", c.APIURL(dead), errOut)
	}
}

// attemptsOf reads attempts=N from a text decision; 1 when absent.
func attemptsOf(t *testing.T, out string) int {
	t.Helper()
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "attempts="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("bad %q in %q", f, out)
			}
			return n
		}
	}
	return 1
}
