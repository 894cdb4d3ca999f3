package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	err := run(ctx, args, &lockedBuffer{}, &lockedBuffer{})
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
	var stderr lockedBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, &lockedBuffer{}, &stderr) }()
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
