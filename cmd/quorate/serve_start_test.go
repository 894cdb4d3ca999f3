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
)

// A node with no state and neither --bootstrap nor --join would wait forever
// to be added by a cluster that does not know it: serve refuses it at once,
// saying what to pass. A node that has state needs neither.
func TestServeNeedsBootstrapOrJoinWithoutState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	port := freePortRange(t, 2)
	args := []string{"serve", "--id", "n1", "--data-dir", dir, "--log-level", "error",
		"--api-addr", fmt.Sprintf("127.0.0.1:%d", port), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", port+1)}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, args, &devcluster.Output{}, &devcluster.Output{})
	if ctx.Err() != nil {
		t.Fatalf("serve without state, --bootstrap or --join ran until the test's deadline (%v), want a refusal at once", err)
	}
	wantErrNaming(t, err, "--bootstrap", "--join", dir)

	// Once the directory holds a cluster's state, the same command line
	// restarts the node.
	serveUntilListening(t, append(args, "--bootstrap"))
	serveUntilListening(t, args)
}

// serveUntilListening runs serve with args until it says it listens, then
// stops it as Ctrl-C does and checks that it returned nil.
func serveUntilListening(t *testing.T, args []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr devcluster.Output
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, &devcluster.Output{}, &stderr) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "API on") {
		select {
		case err := <-done:
			t.Fatalf("serve %s returned before listening: %v\n%s", strings.Join(args, " "), err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve %s: not listening after 30s\n%s", strings.Join(args, " "), stderr.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve %s: %v after a cancel\n%s", strings.Join(args, " "), err, stderr.String())
	}
}

// A data directory an earlier build of Quorate left (here a raft-wal
// replica and its node ID) is refused, with or without --bootstrap: serve
// exits with an error naming the directory and saying to move it away and
// start afresh, or restore a backup, and leaves the directory as it was.
func TestServeRefusesAnEarlierBuildsDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	for name, body := range map[string]string{
		"node-id":              "n1\n",
		"raft/wal/wal-meta.db": "",
		"raft/wal/00000000000000000001-0000000000000000.wal": "\x00",
	} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	port := freePortRange(t, 2)
	args := []string{"serve", "--id", "n1", "--data-dir", dir, "--log-level", "error",
		"--api-addr", fmt.Sprintf("127.0.0.1:%d", port), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", port+1)}
	for _, extra := range [][]string{nil, {"--bootstrap"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := run(ctx, append(args, extra...), &devcluster.Output{}, &devcluster.Output{})
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatalf("serve %v on an earlier build's data directory ran until the test's deadline (%v), want a refusal", extra, err)
		}
		wantErrNaming(t, err, dir, "earlier build", "move it away", "start this node afresh", "restore a backup")
	}
	if _, err := os.Stat(filepath.Join(dir, "data-format")); !os.IsNotExist(err) {
		t.Fatalf("serve marked the refused directory: %v", err)
	}
}
