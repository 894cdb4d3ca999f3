package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestEndToEndChecksPeekRefundPolicies drives a real 3-node cluster through
// run: a multi-check admit that one check denies charges nothing (peek shows
// it), refund gives back once, shadow and pacing show in the text output,
// and policy get/delete work (a deleted policy's admits are not_found).
func TestEndToEndChecksPeekRefundPolicies(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	file := filepath.Join(t.TempDir(), "policies.yaml")
	// Nothing refills noticeably during the test.
	const policies = "policies:\n" +
		"  - name: mc-api\n" +
		"    algorithm: token_bucket\n" +
		"    limit: 10\n" +
		"    period: 1h\n" +
		"  - name: mc-login\n" +
		"    algorithm: token_bucket\n" +
		"    limit: 1\n" +
		"    period: 1h\n" +
		"  - name: mc-trial\n" + // shadow: never denies
		"    algorithm: token_bucket\n" +
		"    limit: 1\n" +
		"    period: 1h\n" +
		"    shadow: true\n" +
		"  - name: mc-paced\n" + // one a minute, no burst
		"    algorithm: token_bucket\n" +
		"    limit: 60\n" +
		"    period: 1h\n" +
		"    burst: 1\n" +
		"  - name: mc-monthly\n" +
		"    algorithm: quota\n" +
		"    limit: 1000\n" +
		"    calendar: month\n"
	if err := os.WriteFile(file, []byte(policies), 0o644); err != nil {
		t.Fatal(err)
	}
	// Policy reads answer from the asked node's replica; the leader has
	// applied every change it answered.
	leader := c.APIURL(c.Leader(t))
	out, _, err := runCLI(t, "policy", "apply", "-f", file, "--server", leader)
	if err != nil || !strings.Contains(out, "applied 5 policies") || !strings.Contains(out, "SHADOW") || !strings.Contains(out, "CALENDAR") {
		t.Fatalf("policy apply: %v\n%s", err, out)
	}

	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("quorate %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	peek := func(server int, policy, key string) *quoratev1.PeekResponse {
		t.Helper()
		var p quoratev1.PeekResponse
		mustRunJSON(t, &p, "peek", "--server", c.APIURL(server), "--policy", policy, "--key", key, "-o", "json")
		return &p
	}

	// Spend mc-login's only unit for {t}:ip.
	var pre quoratev1.AdmitResponse
	mustRunJSON(t, &pre, "admit", "--server", c.APIURL(0), "--policy", "mc-login", "--key", "{t}:ip", "--request-id", "pre", "-o", "json")
	if !pre.GetAllowed() || pre.GetRemaining() != 0 {
		t.Fatalf("first mc-login admit: %v, want allowed with 0 remaining", &pre)
	}

	// A multi-check request that mc-login denies: exit 0, the output names
	// the denying check, and nothing is charged.
	out = run("admit", "--server", c.APIURL(1), "--policy", "mc-api", "--key", "{t}:api", "--also", "mc-login:{t}:ip", "--request-id", "multi-1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "denied   remaining=0/1") ||
		!strings.Contains(lines[1], "checks[0]") || !strings.Contains(lines[1], "allowed") || !strings.Contains(lines[1], "mc-api") ||
		!strings.Contains(lines[2], "checks[1]") || !strings.Contains(lines[2], "denied") || !strings.Contains(lines[2], "mc-login") ||
		lines[3] != "denied by checks[1]: policy mc-login, key {t}:ip; no check was charged" {
		t.Errorf("multi-check denial: want the decision, a line per check and the denying check:\n%s", out)
	}
	var denied quoratev1.AdmitResponse
	mustRunJSON(t, &denied, "admit", "--server", c.APIURL(2), "--policy", "mc-api", "--key", "{t}:api", "--also", "mc-login:{t}:ip", "-o", "json")
	if denied.GetAllowed() || denied.DeniedCheck == nil || denied.GetDeniedCheck() != 1 || len(denied.GetChecks()) != 2 ||
		!denied.GetChecks()[0].GetAllowed() || denied.GetChecks()[1].GetAllowed() {
		t.Errorf("multi-check denial as JSON: %v, want denied_check 1 with checks[0] allowed", &denied)
	}
	if p := peek(0, "mc-api", "{t}:api"); !p.GetWouldAllow() || p.GetRemaining() != 10 || p.GetLimit() != 10 || p.GetPolicyVersion() != 1 {
		t.Errorf("peek after the denied multi-check: %v, want 10/10 left: nothing charged", p)
	}
	out = run("peek", "--server", c.APIURL(1), "--policy", "mc-login", "--key", "{t}:ip")
	if !strings.HasPrefix(out, "would deny   remaining=0/1") {
		t.Errorf("peek text: %q, want \"would deny   remaining=0/1 ...\"", out)
	}

	// Refund the first admit: once.
	out = run("refund", "--server", c.APIURL(2), "--key", "{t}:ip", "--request-id", "pre")
	if !strings.HasPrefix(out, "refunded  cost=1") || !strings.Contains(out, "request_id=pre") {
		t.Errorf("refund: %q, want \"refunded  cost=1 ...\"", out)
	}
	out = run("refund", "--server", c.APIURL(0), "--key", "{t}:ip", "--request-id", "pre")
	if !strings.HasPrefix(out, "already refunded") {
		t.Errorf("second refund: %q, want \"already refunded ...\"", out)
	}
	var again quoratev1.RefundResponse
	mustRunJSON(t, &again, "refund", "--server", c.APIURL(1), "--key", "{t}:ip", "--request-id", "pre", "-o", "json")
	if again.GetRefunded() || again.GetCost() != 1 {
		t.Errorf("third refund: %v, want refunded=false, cost 1", &again)
	}
	if p := peek(2, "mc-login", "{t}:ip"); !p.GetWouldAllow() || p.GetRemaining() != 1 {
		t.Errorf("peek after the refund: %v, want 1/1 left", p)
	}
	_, _, err = runCLI(t, "refund", "--server", c.APIURL(0), "--key", "{t}:ip", "--request-id", "no-such-request")
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("refund of an unknown request: %v, want not_found", err)
	}

	// Now both checks pass and both are charged.
	out = run("admit", "--server", c.APIURL(0), "--policy", "mc-api", "--key", "{t}:api", "--also", "mc-login:{t}:ip")
	if !strings.HasPrefix(out, "allowed  remaining=9/10") || !strings.Contains(out, "all 2 checks allowed and charged") {
		t.Errorf("multi-check allowed:\n%s", out)
	}
	if p := peek(1, "mc-login", "{t}:ip"); p.GetWouldAllow() || p.GetRemaining() != 0 {
		t.Errorf("peek after the allowed multi-check: %v, want 0/1 left", p)
	}
	// Keys without a common hash tag: the server explains.
	_, _, err = runCLI(t, "admit", "--server", c.APIURL(1), "--policy", "mc-api", "--key", "{t}:api", "--also", "mc-login:{u}:ip")
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("keys without a common hash tag: %v, want invalid_argument", err)
	}
	wantErrNaming(t, err, "also[0].key", "hash tag")

	// Shadow: the second request is over the limit, allowed anyway.
	run("admit", "--server", c.APIURL(0), "--policy", "mc-trial", "--key", "k")
	out = run("admit", "--server", c.APIURL(1), "--policy", "mc-trial", "--key", "k")
	if !strings.HasPrefix(out, "allowed") || !strings.Contains(out, "  shadow_denied  ") {
		t.Errorf("shadow policy over the limit: %q, want allowed with shadow_denied", out)
	}

	// Pacing: one a minute; the second request is admitted with a wait.
	run("admit", "--server", c.APIURL(2), "--policy", "mc-paced", "--key", "k")
	var paced quoratev1.AdmitResponse
	mustRunJSON(t, &paced, "admit", "--server", c.APIURL(0), "--policy", "mc-paced", "--key", "k", "--max-wait", "1m", "-o", "json")
	if w := paced.GetWait().AsDuration(); !paced.GetAllowed() || w <= 0 || w > time.Minute {
		t.Errorf("paced admit: %v, want allowed with a wait in (0, 1m]", &paced)
	}
	run("admit", "--server", c.APIURL(2), "--policy", "mc-paced", "--key", "k2")
	out = run("admit", "--server", c.APIURL(1), "--policy", "mc-paced", "--key", "k2", "--max-wait", "1m")
	if !strings.HasPrefix(out, "allowed") || !strings.Contains(out, "  wait=") {
		t.Errorf("paced admit as text: %q, want allowed with wait=...", out)
	}

	// policy get: text shows calendar and shadow; JSON has the version.
	for name, want := range map[string][]string{
		"mc-monthly": {"quota", "month", "no"},
		"mc-trial":   {"token_bucket", "yes"},
	} {
		out = run("policy", "get", name, "--server", leader)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], "CALENDAR") || !strings.Contains(lines[0], "SHADOW") {
			t.Fatalf("policy get %s: want a header and one row:\n%s", name, out)
		}
		fields := strings.Fields(lines[1])
		for _, w := range want {
			if !strings.Contains(" "+strings.Join(fields, " ")+" ", " "+w+" ") {
				t.Errorf("policy get %s: row %q lacks %q", name, lines[1], w)
			}
		}
	}
	var got quoratev1.GetPolicyResponse
	mustRunJSON(t, &got, "policy", "get", "mc-monthly", "--server", leader, "-o", "json")
	if p := got.GetPolicy(); p.GetVersion() != 1 || p.GetCalendar() != "month" || p.GetAlgorithm() != "quota" || p.GetLimit() != 1000 {
		t.Errorf("policy get -o json: %v", p)
	}
	_, _, err = runCLI(t, "policy", "get", "no-such-policy", "--server", leader)
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("policy get of a missing policy: %v, want not_found", err)
	}

	// policy delete is all or none.
	_, _, err = runCLI(t, "policy", "delete", "mc-login", "no-such-policy", "--server", leader)
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("delete with a missing policy: %v, want not_found", err)
	}
	wantErrNaming(t, err, "no-such-policy")
	run("policy", "get", "mc-login", "--server", leader) // still there
	out = run("policy", "delete", "mc-login", "--server", c.APIURL(1))
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != "deleted 1 policy" || !strings.HasPrefix(lines[2], "mc-login ") || strings.Fields(lines[2])[1] != "1" {
		t.Errorf("policy delete: want \"deleted 1 policy\" and its row with version 1:\n%s", out)
	}
	_, _, err = runCLI(t, "admit", "--server", c.APIURL(2), "--policy", "mc-login", "--key", "{t}:ip")
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "not_found") {
		t.Errorf("admit under a deleted policy: %v, want not_found", err)
	}
	_, _, err = runCLI(t, "admit", "--server", c.APIURL(0), "--policy", "mc-api", "--key", "{t}:api", "--also", "mc-login:{t}:ip")
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("multi-check admit naming a deleted policy: %v, want not_found", err)
	}
	_, _, err = runCLI(t, "peek", "--server", c.APIURL(1), "--policy", "mc-login", "--key", "{t}:ip")
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("peek under a deleted policy: %v, want not_found", err)
	}
	_, _, err = runCLI(t, "policy", "get", "mc-login", "--server", leader)
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("policy get of a deleted policy: %v, want not_found", err)
	}
}
