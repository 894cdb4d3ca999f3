package jepsen

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// grantSelfTestArgs are the args of a short run of the self-test on
// workload w: the leasing clients are killed and paused, the servers are
// not.
func grantSelfTestArgs(w string) []string {
	return []string{"--workload", w, "--faults", "none", "--duration", "5s", "--seed", "7"}
}

// The grant workloads in the normal build: budget-leasing clients, killed
// and paused, beside strict ones, never admit more than the limit per key
// and window (grant-sync's local-plus-global clients: the limit and the
// policy's bound); most admits are local, the windows fill up.
func TestGrantWorkload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real 3-node cluster for ~15s")
	}
	r := runPassing(t, WorkloadGrant, WorkloadGrantSync)
	checkGrantRun(t, r, policyGrant, r.Grant)
	checkGrantRun(t, r, policyGrantSync, r.GrantSync)
	// The plain callers of the grant workload: Admit in binary protobuf
	// (p1) and in JSON (p2), and Envoy's ShouldRateLimit (p3), each
	// answered and allowed, on keys the window check counts.
	for _, pc := range []struct{ caller, policy string }{
		{"-p1.", policyGrant}, {"-p2.", policyGrant}, {"-p3.", policyGrantEnvoy},
	} {
		allowed := 0
		for _, op := range opsOf(r.Ops, pc.policy) {
			if !strings.Contains(op.Caller, pc.caller) {
				continue
			}
			if op.Outcome == OutcomeAllowed {
				allowed++
				if op.DecidedAt == 0 {
					t.Errorf("%s: an admit without its decision's log time: %+v", pc.caller, op)
				}
			}
		}
		if allowed == 0 {
			t.Errorf("plain caller %s on %s: nothing allowed", pc.caller, pc.policy)
		}
	}
}

// The grant-bucket workload in the normal build, alone (beside the other
// two it would starve them on two cores): budget-leasing clients, killed
// and paused, beside strict ones, never admit more than a never-refilling
// bucket's capacity per key; admits are local, buckets drain.
func TestGrantBucketWorkload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real 3-node cluster for ~15s")
	}
	r := runPassing(t, WorkloadGrantBucket)
	checkGrantBucketRun(t, r)
}

// runPassing runs workloads for 5 s (seed 7) and wants every checker to
// pass.
func runPassing(t *testing.T, workloads ...string) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	r, err := Run(ctx, Options{ReportDir: dir, Duration: 5 * time.Second, Seed: 7, Workloads: workloads})
	if r != nil {
		t.Logf("report %s:\n%s", dir, r.Summary(err))
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !r.OK() {
		t.Fatalf("a checker failed")
	}
	return r
}

// checkGrantBucketRun wants local and strict decisions, keys drained to
// the capacity and client faults in the grant-bucket part of r.
func checkGrantBucketRun(t *testing.T, r *Report) {
	t.Helper()
	var local, strict, denied int
	perKey := map[string]int64{}
	for _, op := range opsOf(r.Ops, policyGrantBucket) {
		switch {
		case op.Outcome == OutcomeAllowed && op.Local:
			local++
		case op.Outcome == OutcomeAllowed:
			strict++
		case op.Outcome == OutcomeDenied:
			denied++
		}
		if op.Outcome == OutcomeAllowed {
			perKey[op.Key]++
		}
	}
	drained := 0
	for _, n := range perKey {
		if n >= r.Options.GrantLimit {
			drained++
		}
	}
	if local == 0 || denied == 0 || drained == 0 {
		t.Errorf("grant-bucket: local %d, strict allowed %d, denied %d, keys drained %d: want local admits, denials and a drained key",
			local, strict, denied, drained)
	}
	if st := r.GrantBucket; st == nil || st.Kills+st.Pauses == 0 {
		t.Errorf("grant-bucket: no client was killed or paused: %+v", st)
	}
	t.Logf("grant-bucket: local %d, strict allowed %d, denied %d, keys drained %d of %d", local, strict, denied, drained, len(perKey))
}

// checkGrantRun wants local and strict decisions, windows at the limit and
// client faults in r.
func checkGrantRun(t *testing.T, r *Report, policy string, stats *GrantStats) {
	t.Helper()
	var local, strict, denied int
	full := map[string]int{}
	for _, op := range opsOf(r.Ops, policy) {
		switch {
		case op.Outcome == OutcomeAllowed && op.Local:
			local++
			if op.DecidedAt == 0 {
				t.Errorf("a local admit without the log time of its grant: %+v", op)
			}
		case op.Outcome == OutcomeAllowed:
			strict++
		case op.Outcome == OutcomeDenied:
			denied++
		}
		if op.Outcome == OutcomeAllowed {
			full[op.Key+"@"+fmtNanos(windowOf(op.DecidedAt, int64(grantWindow)))]++
		}
	}
	atLimit := 0
	for _, n := range full {
		if int64(n) >= r.Options.GrantLimit {
			atLimit++
		}
	}
	if local == 0 || strict+denied == 0 || denied == 0 {
		t.Errorf("local %d, strict allowed %d, denied %d: want local and strict decisions and denials", local, strict, denied)
	}
	if atLimit == 0 {
		t.Errorf("no key-window reached the limit %d: the windows never filled", r.Options.GrantLimit)
	}
	fams := map[string]int{}
	for _, c := range FaultFamilies(r.Faults) {
		fams[c.Family] = c.Count
	}
	if fams[FamilyClientKill]+fams[FamilyClientPause] == 0 || stats == nil || stats.Kills+stats.Pauses == 0 {
		t.Errorf("%s: no client was killed or paused: %v", policy, fams)
	}
	t.Logf("%s: local %d, strict allowed %d, denied %d, key-windows at the limit %d of %d", policy, local, strict, denied, atLimit, len(full))
}

// The planted client bug: a harness built with -tags
// quorate_planted_overspend, whose clients spend up to 5 units past their
// grants, must fail a short run on no-over-admission: on windows (grant)
// and on buckets (grant-bucket).
func TestPlantedOverspendIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the harness and starts a real 3-node cluster for ~15s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	root, err := FindModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "quorate-jepsen-planted")
	build := exec.CommandContext(ctx, "go", "build", "-tags", PlantedClientOverspend, "-o", bin, "./cmd/quorate-jepsen")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %s: %v\n%s", PlantedClientOverspend, err, out)
	}
	for w, checker := range map[string]string{WorkloadGrant: "/no-over-admission-per-window", WorkloadGrantBucket: "/no-over-admission"} {
		t.Run(w, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.CommandContext(ctx, bin, append([]string{"--report", dir}, grantSelfTestArgs(w)...)...)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			t.Logf("planted harness:\n%s", out)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("the planted harness exited with %v, want exit status 1", err)
			}
			sum, err := os.ReadFile(filepath.Join(dir, "summary.txt"))
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(sum), "\n")
			if !strings.HasPrefix(first, "FAIL") || !strings.Contains(first, w+checker) {
				t.Fatalf("summary's first line %q, want FAIL naming %s%s", first, w, checker)
			}
		})
	}
}
