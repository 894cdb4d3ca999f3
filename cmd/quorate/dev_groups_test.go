package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/devcluster"
)

// A restarted dev cluster keeps the data groups it was created with: another
// --groups is refused before any node starts (silently keeping the old
// groups misled users), and a restart without --groups uses the cluster's.
func TestDevRefusesOtherGroupsOnRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	apiPort := freePortRange(t, 1)
	raftPort := freePortRange(t, 1, apiPort)
	args := func(extra ...string) []string {
		return append([]string{"dev", "--dir", dir, "--nodes", "1", "--policies", "",
			"--api-port", fmt.Sprint(apiPort), "--raft-port", fmt.Sprint(raftPort)}, extra...)
	}
	dev := startDev(t, args("--groups", "2"))
	if out := dev.stdout.String(); !strings.Contains(out, "data groups: 2 ") {
		t.Errorf("first start: the summary does not say 2 data groups:\n%s", out)
	}
	dev.stop(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr devcluster.Output
	err := run(ctx, args("--groups", "4"), &stdout, &stderr)
	wantErrNaming(t, err, "--groups 4", "created with --groups 2", "another --dir")
	if strings.Contains(stdout.String(), "ready in") {
		t.Errorf("dev --groups 4 started the cluster before refusing:\n%s", stdout.String())
	}

	dev = startDev(t, args())
	if out := dev.stdout.String(); !strings.Contains(out, "restarted from existing state") || !strings.Contains(out, "data groups: 2 ") {
		t.Errorf("restart without --groups: the summary does not say 2 data groups:\n%s", out)
	}
	dev.stop(t)
}
