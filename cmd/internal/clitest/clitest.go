package clitest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// RunFunc is a command's run: it executes the command line args (without
// the program name), writing to stdout and stderr.
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Run runs the command line args through run, with 30 seconds to finish,
// and returns what it wrote.
func Run(tb testing.TB, run RunFunc, args ...string) (stdout, stderr string, err error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err = run(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// WantErrNaming fails tb unless err is non-nil and its text names every one
// of names.
func WantErrNaming(tb testing.TB, err error, names ...string) {
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
