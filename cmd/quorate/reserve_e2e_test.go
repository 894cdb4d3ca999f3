package main

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestEndToEndReserveCommit drives reserve and commit, and a lease that
// holds a reservation, against a real 3-node cluster with the example
// policies: the tokens policy the README names exists, reserve prints the
// reservation ID that commit settles, a second commit is not_found, and
// lease acquire --reserve-policy prints the reservation it holds.
func TestEndToEndReserveCommit(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	leader := c.APIURL(c.Leader(t))
	if out, errOut, err := runCLI(t, "policy", "apply", "-f", "../../examples/policies.yaml", "--server", leader); err != nil {
		t.Fatalf("policy apply: %v\n%s%s", err, out, errOut)
	}
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("quorate %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
		}
		return out
	}

	out := run("reserve", "--server", c.APIURL(1), "--policy", "tokens", "--key", "tenant-a", "--estimate", "800", "--request-id", "call-1")
	id := fieldOf(out, "reservation_id")
	if !strings.HasPrefix(out, "allowed  reservation_id=") || id == "" || !strings.Contains(out, "/20000") {
		t.Fatalf("reserve: %q, want allowed with a reservation_id and the tokens policy's burst of 20000", out)
	}
	// The same request ID: the same reservation, nothing held twice.
	var again quoratev1.ReserveResponse
	mustRunJSON(t, &again, "reserve", "--server", c.APIURL(2), "--policy", "tokens", "--key", "tenant-a", "--estimate", "800",
		"--request-id", "call-1", "-o", "json")
	if !again.GetDuplicate() || again.GetReservationId() != id {
		t.Errorf("repeated reserve: %v, want the duplicate of reservation %s", &again, id)
	}

	out = run("commit", "--server", c.APIURL(2), "--reservation-id", id, "--actual", "312")
	if !strings.HasPrefix(out, "committed  charged=312  released=488  over=0") {
		t.Errorf("commit: %q, want charged 312, released 488", out)
	}
	_, _, err := runCLI(t, "commit", "--server", c.APIURL(0), "--reservation-id", id, "--actual", "312")
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("second commit with a new request ID: %v, want not_found", err)
	}

	out = run("lease", "acquire", "--server", c.APIURL(0), "--policy", "reports-active", "--key", "tenant-a",
		"--reserve-policy", "tokens", "--reserve-estimate", "800")
	if !strings.HasPrefix(out, "allowed  lease_id=") || fieldOf(out, "reservation_id") == "" {
		t.Fatalf("lease acquire --reserve-policy: %q, want the lease and its reservation_id", out)
	}
	out = run("lease", "release", "--server", c.APIURL(1), "--lease-id", fieldOf(out, "lease_id"),
		"--fencing-token", fieldOf(out, "fencing_token"), "--actual-cost", "312")
	if !strings.Contains(out, "charged=312  released_units=488  over=0") {
		t.Errorf("lease release --actual-cost 312: %q, want charged 312, 488 released", out)
	}

	for _, args := range [][]string{
		{"reserve", "--policy", "tokens", "--key", "k"},
		{"reserve", "--policy", "tokens", "--key", "k", "--estimate", "0"},
		{"commit", "--reservation-id", "r"},
		{"commit", "--reservation-id", "r", "--actual", "-1"},
	} {
		_, _, err := runCLI(t, append(args, "--server", "127.0.0.1:1")...)
		wantErrNaming(t, err, map[string]string{"reserve": "--estimate", "commit": "--actual"}[args[0]])
	}
}

// fieldOf is the value of name=value in a line of text output; "" when
// absent.
func fieldOf(out, name string) string {
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}
