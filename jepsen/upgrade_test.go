package jepsen

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// upgradeFromEnv names the revision TestRollingUpgrade upgrades from
// (default HEAD~1: the previous commit).
const upgradeFromEnv = "QUORATE_UPGRADE_FROM"

// TestRollingUpgrade upgrades a running three-node cluster on 2 data
// groups node by node, under the token-bucket, fixed-window and lease
// workloads, from the previous commit's binary (git archive of HEAD~1, or
// of $QUORATE_UPGRADE_FROM, built with the same go toolchain) to the
// checkout's, as docs/operating.md's "Rolling upgrade" says: each node
// stopped with SIGTERM and started on the new binary with
// --max-feature-level at the old nodes' level, caught up before the next;
// then a second pass restarts each without the flag. Every checker must
// pass — no acknowledged decision lost, no key over its limit — and at the
// end every node reports the new version on /metrics. Without git history
// to build the previous commit from, it is skipped, saying why.
func TestRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries and runs a real cluster for ~40 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := FindModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	from := os.Getenv(upgradeFromEnv)
	if from == "" {
		from = "HEAD~1"
	}
	old, err := ResolveRevision(ctx, root, from)
	if errors.Is(err, ErrNoRevision) {
		t.Skipf("no previous binary to upgrade from (set %s to another revision): %v", upgradeFromEnv, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	head, err := ResolveRevision(ctx, root, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	began := time.Now()
	oldBin, newBin := filepath.Join(dir, "quorate-old"), filepath.Join(dir, "quorate-new")
	if err := BuildRevision(ctx, root, old, filepath.Join(dir, "src"), oldBin); err != nil {
		t.Fatalf("building %s (%s): %v", from, old.Commit, err)
	}
	// The checkout, uncommitted changes included: stamped apart from HEAD's commit.
	newVersion := head.Version + "+checkout"
	if err := BuildStamped(ctx, root, newBin, newVersion, head.Commit); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s (%s) and the checkout (%s) in %v", from, old.Version, newVersion, time.Since(began).Round(time.Second))

	up := &UpgradeOptions{Binary: newBin, Version: newVersion, HoldLevel: true}
	report := filepath.Join(dir, "report")
	r, err := Run(ctx, Options{ReportDir: report, Binary: oldBin, Upgrade: up, Duration: 10 * time.Second, Seed: 7,
		Groups: 2, Workloads: serverWorkloads, Clients: 4})
	if r != nil {
		t.Logf("report %s (%v in all):\n%s", report, time.Since(began).Round(time.Second), r.Summary(err))
	}
	if err != nil {
		t.Fatalf("Run: %v (from %s %s to the checkout: an incompatibility shows in the node logs)", err, from, old.Commit)
	}
	if !r.OK() {
		t.Fatalf("a checker failed upgrading from %s (%s) to the checkout", from, old.Commit)
	}
	steps := map[string]int{}
	var last time.Time
	for _, f := range r.Faults {
		steps[f.Kind]++
		last = later(last, f.End)
		if f.Error != "" {
			t.Errorf("%s %s: %s", f.Kind, f.Node, f.Error)
		}
		if want := " " + old.Version + " → "; f.Kind == "upgrade" && !strings.Contains(f.Node, want) {
			t.Errorf("upgrade step %q: the node did not run %s before", f.Node, old.Version)
		}
	}
	if steps["upgrade"] != 3 || steps["upgrade-finish"] != 3 {
		t.Errorf("steps %v, want 3 upgrade and 3 upgrade-finish", steps)
	}
	after := 0
	for _, op := range r.Ops {
		if op.Outcome.OK() && op.Start.After(last) {
			after++
		}
	}
	if after == 0 {
		t.Error("no call answered after the upgrade")
	}
}
