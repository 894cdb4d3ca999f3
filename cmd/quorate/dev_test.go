package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/devcluster"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestDevRestartKeepsState runs `quorate dev` with 3 nodes, spends from a
// bucket and takes a lease, stops it with a context cancel (Ctrl-C), starts
// it again on the same directory and checks the bucket kept going down and
// the lease is still held, with later tokens above its own.
func TestDevRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	// A bucket that does not refill during the test: 5 at once, 1 a day.
	policies := filepath.Join(dir, "policies.yaml")
	// And a concurrency policy first: the summary's admit example skips it.
	const policyFile = "policies:\n" +
		"  - name: jobs\n" +
		"    algorithm: concurrency\n" +
		"    limit: 2\n" +
		"    lease_ttl: 1h\n" +
		"  - name: slow\n" +
		"    algorithm: token_bucket\n" +
		"    limit: 1\n" +
		"    period: 24h\n" +
		"    burst: 5\n"
	if err := os.WriteFile(policies, []byte(policyFile), 0o600); err != nil {
		t.Fatal(err)
	}
	apiPort := freePortRange(t, 3)
	raftPort := freePortRange(t, 3, apiPort, apiPort+1, apiPort+2)
	args := []string{"dev", "--dir", filepath.Join(dir, "state"), "--nodes", "3", "--policies", policies,
		"--api-port", fmt.Sprint(apiPort), "--raft-port", fmt.Sprint(raftPort)}

	admit := func(node int) *quoratev1.AdmitResponse {
		t.Helper()
		var d quoratev1.AdmitResponse
		mustRunJSON(t, &d, "admit", "--server", fmt.Sprintf("127.0.0.1:%d", apiPort+node), "--policy", "slow", "--key", "dev-test", "-o", "json")
		return &d
	}

	acquire := func(node int) *quoratev1.AcquireLeaseResponse {
		t.Helper()
		var r quoratev1.AcquireLeaseResponse
		mustRunJSON(t, &r, "lease", "acquire", "--server", fmt.Sprintf("127.0.0.1:%d", apiPort+node), "--policy", "jobs", "--key", "dev-test", "-o", "json")
		return &r
	}

	dev := startDev(t, args)
	server := fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	if out := dev.stdout.String(); !strings.Contains(out, "(new cluster)") || !strings.Contains(out, "curl -s") ||
		!strings.Contains(out, "quorate admit --server "+server+" --policy slow --key tenant-a\n") ||
		!strings.Contains(out, "quorate lease acquire --server "+server+" --policy jobs --key tenant-a\n") {
		t.Errorf("first start: unexpected summary:\n%s", out)
	}
	lease := acquire(1)
	if !lease.GetAllowed() || lease.GetHeld() != 1 {
		t.Fatalf("first run, acquire: %v, want allowed with held 1/2", lease)
	}
	for i, want := range []int64{4, 3} {
		if d := admit(i); !d.GetAllowed() || d.GetRemaining() != want || d.GetPolicyVersion() != 1 {
			t.Fatalf("first run, admit %d: %v, want allowed with remaining %d under version 1", i+1, d, want)
		}
	}
	dev.stop(t)

	dev = startDev(t, args)
	if out := dev.stdout.String(); !strings.Contains(out, "restarted from existing state") {
		t.Errorf("second start: summary does not say it restarted:\n%s", out)
	}
	if d := admit(2); !d.GetAllowed() || d.GetRemaining() != 2 || d.GetPolicyVersion() != 1 {
		t.Fatalf("after restart: %v, want allowed with remaining 2 (state kept) under version 1 (re-apply is idempotent)", d)
	}
	var held quoratev1.CheckFenceResponse
	mustRunJSON(t, &held, "lease", "check", "--server", fmt.Sprintf("127.0.0.1:%d", apiPort), "--lease-id", lease.GetLeaseId(),
		"--fencing-token", fmt.Sprint(lease.GetFencingToken()), "-o", "json")
	if !held.GetHeld() {
		t.Errorf("after restart, the lease taken before is not held: %v", &held)
	}
	if r := acquire(0); !r.GetAllowed() || r.GetHeld() != 2 || r.GetFencingToken() <= lease.GetFencingToken() {
		t.Errorf("after restart, acquire: %v, want allowed with held 2/2 and a token above %d", r, lease.GetFencingToken())
	}
	dev.stop(t)
}

// TestDevWithoutPolicies runs a one-node dev cluster where the default
// policy file is absent (tests run in cmd/quorate): it warns and goes on.
func TestDevWithoutPolicies(t *testing.T) {
	apiPort := freePortRange(t, 1)
	raftPort := freePortRange(t, 1, apiPort)
	dev := startDev(t, []string{"dev", "--dir", t.TempDir(), "--nodes", "1",
		"--api-port", fmt.Sprint(apiPort), "--raft-port", fmt.Sprint(raftPort)})
	if !strings.Contains(dev.stderr.String(), defaultPoliciesFile+" not found") {
		t.Errorf("no warning about the missing default policy file; stderr:\n%s", dev.stderr.String())
	}
	if out := dev.stdout.String(); !strings.Contains(out, "policies: none") || !strings.Contains(out, "leader: node1") {
		t.Errorf("unexpected summary:\n%s", out)
	}
	var status quoratev1.ClusterStatusResponse
	mustRunJSON(t, &status, "admin", "status", "--server", fmt.Sprintf("127.0.0.1:%d", apiPort), "-o", "json")
	if len(status.GetMembers()) != 1 || status.GetLeaderId() != "node1" {
		t.Errorf("status: %v, want node1 alone and leading", &status)
	}
	dev.stop(t)
}

// devRun is a `quorate dev` running in the background of a test.
type devRun struct {
	cancel context.CancelFunc
	done   chan error // run's result
	stdout *devcluster.Output
	stderr *devcluster.Output
}

// startDev runs `quorate <args>` in the background and waits until it prints
// that it is ready (polling its output, with a deadline).
func startDev(t *testing.T, args []string) *devRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &devRun{cancel: cancel, done: make(chan error, 1), stdout: new(devcluster.Output), stderr: new(devcluster.Output)}
	go func() { d.done <- run(ctx, args, d.stdout, d.stderr) }()
	t.Cleanup(func() { cancel(); <-d.done })

	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(d.stdout.String(), "ready in ") {
		select {
		case err := <-d.done:
			d.done <- err // for the cleanup
			t.Fatalf("quorate dev stopped before it was ready: %v\nstderr:\n%s", err, d.stderr.String())
		case <-deadline.C:
			t.Fatalf("quorate dev not ready after a minute\nstdout:\n%s\nstderr:\n%s", d.stdout.String(), d.stderr.String())
		case <-tick.C:
		}
	}
	return d
}

// stop cancels the context, as Ctrl-C does, and checks that run returns nil.
func (d *devRun) stop(t *testing.T) {
	t.Helper()
	d.cancel()
	select {
	case err := <-d.done:
		d.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("quorate dev returned %v after a cancel, want nil\nstderr:\n%s", err, d.stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("quorate dev did not stop within a minute of the cancel\nstderr:\n%s", d.stderr.String())
	}
}
