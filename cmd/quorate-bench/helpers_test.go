package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// runCLI runs the command line args through run and returns what it wrote.
func runCLI(tb testing.TB, args ...string) (stdout, stderr string, err error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err = run(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// wantErrNaming fails unless err is non-nil and its text names every one of
// names (naming the flag at fault is what the command promises).
func wantErrNaming(tb testing.TB, err error, names ...string) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("got no error, want one naming %q", names)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			tb.Errorf("error %q does not name %q", err, n)
		}
	}
}
