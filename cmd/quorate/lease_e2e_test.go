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

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestEndToEndLeases drives the lease commands against a real 3-node
// cluster: two acquires of a 2-slot concurrency policy get strictly
// increasing fencing tokens, a third is denied with retry_after, check,
// release, renew of a released lease (failed_precondition), a new acquire
// with a greater token, and a repeated request ID that gets the same lease.
func TestEndToEndLeases(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	file := filepath.Join(t.TempDir(), "policies.yaml")
	// Leases live an hour: none expires during the test.
	const policies = "policies:\n" +
		"  - name: e2e-active\n" +
		"    algorithm: concurrency\n" +
		"    limit: 2\n" +
		"    lease_ttl: 1h\n"
	if err := os.WriteFile(file, []byte(policies), 0o644); err != nil {
		t.Fatal(err)
	}
	// Policy reads answer from the asked node's replica; the leader has
	// applied every change it answered.
	leader := c.APIURL(c.Leader(t))
	out, _, err := runCLI(t, "policy", "apply", "-f", file, "--server", leader)
	if err != nil {
		t.Fatalf("policy apply: %v\n%s", err, out)
	}
	if rows := tableRows(t, strings.TrimPrefix(out, "applied 1 policy from "+file+"\n")); rows["e2e-active"]["LEASE_TTL"] != "1h0m0s" ||
		rows["e2e-active"]["ALGORITHM"] != "concurrency" || rows["e2e-active"]["VERSION"] != "1" {
		t.Errorf("policy apply: want e2e-active as a concurrency policy with LEASE_TTL 1h0m0s:\n%s", out)
	}
	out, _, err = runCLI(t, "policy", "get", "e2e-active", "--server", leader)
	if err != nil || tableRows(t, out)["e2e-active"]["LEASE_TTL"] != "1h0m0s" {
		t.Errorf("policy get: %v, want LEASE_TTL 1h0m0s:\n%s", err, out)
	}
	var got quoratev1.GetPolicyResponse
	mustRunJSON(t, &got, "policy", "get", "e2e-active", "--server", leader, "-o", "json")
	if p := got.GetPolicy(); p.GetAlgorithm() != "concurrency" || p.GetLimit() != 2 || p.GetLeaseTtl().AsDuration() != time.Hour {
		t.Errorf("policy get -o json: %v, want concurrency, limit 2, lease_ttl 1h", p)
	}

	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("quorate %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	acquire := func(server int, key string, extra ...string) *quoratev1.AcquireLeaseResponse {
		t.Helper()
		var r quoratev1.AcquireLeaseResponse
		mustRunJSON(t, &r, append([]string{"lease", "acquire", "--server", c.APIURL(server), "--policy", "e2e-active", "--key", key, "-o", "json"}, extra...)...)
		return &r
	}
	check := func(server int, l *quoratev1.AcquireLeaseResponse) *quoratev1.CheckFenceResponse {
		t.Helper()
		var r quoratev1.CheckFenceResponse
		mustRunJSON(t, &r, "lease", "check", "--server", c.APIURL(server), "--lease-id", l.GetLeaseId(),
			"--fencing-token", strconv.FormatInt(l.GetFencingToken(), 10), "-o", "json")
		return &r
	}
	tok := func(r *quoratev1.AcquireLeaseResponse) string { return strconv.FormatInt(r.GetFencingToken(), 10) }

	// Two slots: two acquires through different nodes, tokens increasing.
	first := acquire(0, "tenant-a")
	second := acquire(1, "tenant-a")
	for i, r := range []*quoratev1.AcquireLeaseResponse{first, second} {
		if !r.GetAllowed() || r.GetLeaseId() == "" || r.GetFencingToken() < 1 || r.GetLimit() != 2 || r.GetHeld() != int64(i+1) ||
			r.GetDuplicate() || r.GetPolicyVersion() != 1 {
			t.Fatalf("acquire %d: %v, want allowed with a lease, held %d/2 under version 1", i+1, r, i+1)
		}
		if ttl := r.GetExpiresAt().AsTime().Sub(r.GetDecidedAt().AsTime()); ttl != time.Hour {
			t.Errorf("acquire %d expires %v after its decision, want the policy's lease_ttl 1h", i+1, ttl)
		}
	}
	if second.GetFencingToken() <= first.GetFencingToken() {
		t.Fatalf("fencing tokens %d then %d, want strictly increasing", first.GetFencingToken(), second.GetFencingToken())
	}
	if first.GetLeaseId() == second.GetLeaseId() {
		t.Errorf("two leases with one ID %q", first.GetLeaseId())
	}

	// The third is denied, with the time until the earliest lease expires; a
	// denial is a result (exit 0), in JSON and in text.
	third := acquire(2, "tenant-a")
	if third.GetAllowed() || third.GetHeld() != 2 || third.GetLimit() != 2 || third.GetLeaseId() != "" || third.GetFencingToken() != 0 {
		t.Fatalf("third acquire: %v, want denied with held 2/2 and no lease", third)
	}
	if ra := third.GetRetryAfter().AsDuration(); ra <= 0 || ra > time.Hour {
		t.Errorf("third acquire: retry_after %v, want in (0, 1h]", ra)
	}
	out = run("lease", "acquire", "--server", c.APIURL(0), "--policy", "e2e-active", "--key", "tenant-a")
	if !strings.HasPrefix(out, "denied   held=2/2  retry_after=") || strings.Contains(out, "lease_id=") {
		t.Errorf("denied acquire as text: %q, want \"denied   held=2/2  retry_after=...\"", out)
	}

	// Check: the first token holds a slot, until its lease's end. (A leader
	// change extends live leases by the time without a leader, so the end
	// may have moved later, never earlier.)
	if r := check(1, first); !r.GetHeld() || r.GetExpiresAt().AsTime().Before(first.GetExpiresAt().AsTime()) {
		t.Errorf("check of the first lease: %v, want held until %v or later", r, first.GetExpiresAt().AsTime())
	}
	out = run("lease", "check", "--server", c.APIURL(2), "--lease-id", second.GetLeaseId(), "--fencing-token", tok(second))
	if want := "held=true   fencing_token=" + tok(second) + "  expires_at=" + second.GetExpiresAt().AsTime().Format("2006-01-02T"); !strings.HasPrefix(out, want) ||
		!strings.Contains(out, "  decided_at=") {
		t.Errorf("check as text: %q, want it to start with %q", out, want)
	}

	// Renew the second lease for 2h: its end moves.
	var renewed quoratev1.RenewLeaseResponse
	mustRunJSON(t, &renewed, "lease", "renew", "--server", c.APIURL(0), "--lease-id", second.GetLeaseId(), "--fencing-token", tok(second), "--ttl", "2h", "-o", "json")
	if renewed.GetFencingToken() != second.GetFencingToken() || renewed.GetLeaseId() != second.GetLeaseId() ||
		renewed.GetExpiresAt().AsTime().Sub(renewed.GetDecidedAt().AsTime()) != 2*time.Hour || renewed.GetDuplicate() {
		t.Errorf("renew: %v, want the same lease expiring 2h after the renewal", &renewed)
	}
	if r := check(1, second); !r.GetHeld() || r.GetExpiresAt().AsTime().Before(renewed.GetExpiresAt().AsTime()) {
		t.Errorf("check after the renewal: %v, want held until %v or later", r, renewed.GetExpiresAt().AsTime())
	}

	// Release the first lease; a repeat with the same request ID answers as
	// the first release did.
	out = run("lease", "release", "--server", c.APIURL(1), "--lease-id", first.GetLeaseId(), "--fencing-token", tok(first), "--request-id", "rel-1")
	if want := "released  lease_id=" + first.GetLeaseId() + "  fencing_token=" + tok(first) + "  decided_at="; !strings.HasPrefix(out, want) ||
		!strings.HasSuffix(out, "  request_id=rel-1\n") {
		t.Errorf("release: %q, want it to start with %q", out, want)
	}
	var released quoratev1.ReleaseLeaseResponse
	mustRunJSON(t, &released, "lease", "release", "--server", c.APIURL(2), "--lease-id", first.GetLeaseId(), "--fencing-token", tok(first),
		"--request-id", "rel-1", "-o", "json")
	if !released.GetDuplicate() {
		t.Errorf("repeated release: %v, want duplicate=true", &released)
	}

	// The released token no longer holds a slot: check says so (exit 0).
	if r := check(2, first); r.GetHeld() || r.GetExpiresAt() != nil {
		t.Errorf("check of the released lease: %v, want held=false", r)
	}
	out = run("lease", "check", "--server", c.APIURL(0), "--lease-id", first.GetLeaseId(), "--fencing-token", tok(first))
	if !strings.HasPrefix(out, "held=false  fencing_token="+tok(first)+"  expires_at=-  decided_at=") {
		t.Errorf("check of the released lease as text: %q, want held=false", out)
	}

	// Renewing or releasing it again is failed_precondition, printed with
	// its code: the command fails (exit 1).
	_, _, err = runCLI(t, "lease", "renew", "--server", c.APIURL(1), "--lease-id", first.GetLeaseId(), "--fencing-token", tok(first))
	var rpcErr *rpcError
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !errors.As(err, &rpcErr) {
		t.Fatalf("renew of a released lease: %v (code %v), want failed_precondition", err, connect.CodeOf(err))
	}
	wantErrNaming(t, err, "RenewLease on "+c.APIURL(1), "failed_precondition")
	_, _, err = runCLI(t, "lease", "release", "--server", c.APIURL(2), "--lease-id", first.GetLeaseId(), "--fencing-token", tok(first))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("release of a released lease with a new request ID: %v, want failed_precondition", err)
	}

	// The freed slot can be taken again, with a token above both earlier ones.
	fourth := acquire(2, "tenant-a")
	if !fourth.GetAllowed() || fourth.GetHeld() != 2 || fourth.GetFencingToken() <= second.GetFencingToken() {
		t.Errorf("acquire after the release: %v, want allowed with held 2/2 and a token above %d and %d",
			fourth, first.GetFencingToken(), second.GetFencingToken())
	}

	// The same request ID twice, through two nodes: the same lease, not a
	// second slot.
	once := acquire(0, "tenant-b", "--request-id", "acq-1", "--caller", "reports")
	again := acquire(1, "tenant-b", "--request-id", "acq-1", "--caller", "reports")
	if !once.GetAllowed() || once.GetDuplicate() || once.GetHeld() != 1 {
		t.Fatalf("first acquire of tenant-b: %v, want allowed with held 1/2", once)
	}
	if !again.GetDuplicate() || again.GetFencingToken() != once.GetFencingToken() || again.GetLeaseId() != once.GetLeaseId() {
		t.Errorf("repeated acquire: %v, want the first lease %v with duplicate=true", again, once)
	}
	out = run("lease", "acquire", "--server", c.APIURL(2), "--policy", "e2e-active", "--key", "tenant-b", "--request-id", "acq-1", "--caller", "reports")
	if want := "allowed (duplicate)  lease_id=" + once.GetLeaseId() + "  fencing_token=" + tok(once) + "  "; !strings.HasPrefix(out, want) {
		t.Errorf("repeated acquire as text: %q, want it to start with %q", out, want)
	}
	// Only one slot of tenant-b is held: a new request takes the second.
	if r := acquire(0, "tenant-b"); !r.GetAllowed() || r.GetHeld() != 2 || r.GetFencingToken() <= once.GetFencingToken() {
		t.Errorf("new acquire of tenant-b: %v, want allowed with held 2/2", r)
	}
}
