package clitest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"
)

func TestRun(t *testing.T) {
	echo := func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline")
		}
		fmt.Fprint(stdout, args[0])
		fmt.Fprint(stderr, args[1])
		return errors.New(args[2])
	}
	out, errOut, err := Run(t, echo, "out", "err", "failed")
	if out != "out" || errOut != "err" || err == nil || err.Error() != "failed" {
		t.Errorf("Run: %q %q %v, want out, err, failed", out, errOut, err)
	}
}

func TestWantErrNaming(t *testing.T) {
	for _, c := range []struct {
		err   error
		names []string
		fail  bool
	}{
		{errors.New("--rate: must be positive"), []string{"--rate"}, false},
		{errors.New("--rate: must be positive"), []string{"--rate", "--duration"}, true},
		{nil, []string{"--rate"}, true},
	} {
		// On a goroutine of its own, which a Fatalf ends.
		rec := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			WantErrNaming(rec, c.err, c.names...)
		}()
		<-done
		if rec.failed != c.fail {
			t.Errorf("WantErrNaming(%v, %q) failed %v, want %v", c.err, c.names, rec.failed, c.fail)
		}
	}
}

// recorder notes a failure instead of failing its test; Fatalf ends the
// goroutine it is called on, as testing's does.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(string, ...any) { r.failed = true }

func (r *recorder) Fatalf(string, ...any) {
	r.failed = true
	runtime.Goexit()
}
