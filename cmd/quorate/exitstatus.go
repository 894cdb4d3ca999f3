package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/client"
)

// The exit statuses of quorate, for scripts (the conventions of etcdctl and
// kubectl: 0 is success, 1 any error, other small numbers a result that is
// not an error but not a yes either):
const (
	// exitOK: the command succeeded; an admit, reserve or lease acquire
	// was allowed.
	exitOK = 0
	// exitError: an error, e.g. a bad flag, an RPC error, a protocol or
	// TLS mismatch.
	exitError = 1
	// exitDenied: an admit, reserve or lease acquire was denied, or lease
	// check found the lease not held. The answer is printed as for an
	// allowed one; nothing was spent.
	exitDenied = 2
	// exitUnknown: the deadline ended while the outcome of a request that
	// changes state was unknown: it may or may not have been applied. The
	// error says how to retry with the same request ID.
	exitUnknown = 3
)

// exitStatusHelp documents the exit statuses in `quorate --help`.
const exitStatusHelp = "Exit status: 0 success (admit, reserve or lease acquire allowed), 1 an error,\n" +
	"2 denied (admit, reserve or lease acquire; lease check: not held; the answer is\n" +
	"printed as usual),\n" +
	"3 outcome unknown (the request may or may not have been applied: retry it\n" +
	"with the same --request-id, as the error says)."

// commandResult is what a command reports besides its output and error: a
// denial is an answer, not an error, yet scripts must be able to tell it
// from an admission by the exit status.
type commandResult struct {
	denied bool
}

// resultKey is the context key of the *commandResult of a command line.
type resultKey struct{}

// reportDenied records that the command's request was denied, when
// denied is true: execute then exits with exitDenied. A command run through
// run alone (tests) records nowhere.
func reportDenied(cmd *cobra.Command, denied bool) {
	if r, ok := cmd.Context().Value(resultKey{}).(*commandResult); ok && denied {
		r.denied = true
	}
}

// execute runs the command line args like run, prints an error as
// "quorate: <error>" on stderr, and returns the exit status.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var res commandResult
	err := run(context.WithValue(ctx, resultKey{}, &res), args, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "quorate: %v\n", err)
		return exitStatus(err)
	}
	if res.denied {
		return exitDenied
	}
	return exitOK
}

// exitStatus is the exit status of a command that failed with err:
// exitUnknown when a request that changes state may have been applied,
// else exitError.
func exitStatus(err error) int {
	var re *retryError
	var ue *client.OutcomeUnknownError
	switch {
	case errors.As(err, &re) && re.Unknown, errors.As(err, &ue):
		return exitUnknown
	}
	return exitError
}
