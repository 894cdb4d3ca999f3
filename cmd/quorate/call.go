package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/cmd/internal/apiflags"
)

// The data commands (admit, peek, refund, reserve, commit and the lease
// commands) send their request through package client: its deadline
// (--timeout) and its retries with the same request ID, backoff and jitter
// (DESIGN.md §3). The client does not learn the routes for them
// (client.Config.DisableRouting): a command makes one call, which the node
// that gets it forwards to the key's group leader as cheaply as a Routes call
// would have told where to send it; the attempts go through the --server list
// in turn, the first server first, so one dead node does not stop a retry. The
// command builds the request once; client.Invoke sends that same message in
// every attempt, so a retry of a request that was applied gets the recorded
// answer (duplicate=true) instead of spending again. The answer is printed
// as the server gave it. A command never applies a policy's on_unavailable:
// it reports the error.

// dataCall is one request of a data command.
type dataCall struct {
	procedure string // e.g. "Admit"
	key       string // the request's key, if it has one
	requestID string // "" for a request that changes nothing
	readOnly  bool
	// hint is appended to an error whose outcome is unknown: the command
	// line that retries with the same request ID.
	hint string
}

// invoke sends one request of cmd through a client of o's flags, and returns
// the answer and the number of attempts it took. send makes one attempt; it
// must send the same request every time.
func invoke[R any](cmd *cobra.Command, o *clientOptions, dc dataCall, send func(context.Context, client.Services) (*connect.Response[R], error)) (_ *R, attempts int, _ error) {
	servers, ctx, cancel, err := o.beginServers(cmd.Context())
	if err != nil {
		return nil, 0, err
	}
	defer cancel()
	var retries atomic.Int64
	verbose, _ := cmd.Flags().GetBool("verbose")
	token := apiflags.Token(cmd.Context())
	c, err := client.New(client.Config{Servers: servers, HTTPClient: o.http(), Token: token, Timeout: o.timeout, DisableRouting: true, NoPolicyFetch: true,
		OnRetry: func(ri client.RetryInfo) {
			retries.Add(1)
			if verbose {
				fmt.Fprintf(cmd.ErrOrStderr(), "quorate: attempt %d failed: %v; retrying in %v\n", ri.Attempt, ri.Err, ri.Wait.Round(time.Millisecond))
			}
		}})
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	started := time.Now()
	probed := false
	resp, err := client.Invoke(ctx, c, client.Call{Procedure: dc.procedure, Key: dc.key, RequestID: dc.requestID, ReadOnly: dc.readOnly},
		func(ctx context.Context, s client.Services) (*connect.Response[R], error) {
			if !probed { // the first attempt: nothing was sent yet (probe.go)
				probed = true
				if err := probeAPI(ctx, o.http(), dc.procedure, s.Server); err != nil {
					return nil, err
				}
			}
			res, err := send(ctx, s)
			if err != nil && client.AsMismatch(dc.procedure, s.Server, err) == nil {
				return nil, &rpcError{procedure: dc.procedure, server: s.Server, requestID: dc.requestID, err: err}
			}
			return res, err
		})
	attempts = int(retries.Load()) + 1
	if err != nil {
		return nil, attempts, dc.failure(err, attempts, time.Since(started), ctx.Err())
	}
	return resp, attempts, nil
}

// failure is the error of a call that failed after attempts in took: a
// *mismatchError for a protocol mismatch, the attempt's error as it is when
// one attempt was made and it was final, else a *retryError.
func (dc dataCall) failure(err error, attempts int, took time.Duration, ctxErr error) error {
	var m *client.MismatchError
	if errors.As(err, &m) {
		return &mismatchError{m: m}
	}
	re := &retryError{Attempts: attempts, Elapsed: took, Last: err, hint: dc.hint, readOnly: dc.readOnly}
	var ou *client.OutcomeUnknownError
	if errors.As(err, &ou) {
		re.Unknown, re.Last, re.unknown = !dc.readOnly, ou.Last, ou
	}
	switch {
	case ctxErr != nil:
		re.Stopped = ctxErr
	case errors.Is(err, context.Canceled):
		re.Stopped = context.Canceled
	case errors.Is(err, context.DeadlineExceeded), ou != nil && client.Retryable(ou.Last):
		// Too near the deadline for another attempt (an unknown outcome
		// after an error worth retrying: the client gave up for lack of
		// time, not for a final answer).
		re.Stopped = context.DeadlineExceeded
	}
	if attempts == 1 && re.Stopped == nil && !re.Unknown {
		return err
	}
	return re
}

// retryError is the failure of a request that was attempted more than once,
// or whose retries the deadline cut short, or whose outcome is unknown. It
// unwraps to the last attempt's error (so connect.CodeOf gives its code), to
// the context's error when that stopped the retries, and to the client's
// *client.OutcomeUnknownError, if any.
type retryError struct {
	Attempts int
	Elapsed  time.Duration
	// Unknown is set when some attempt may have been applied: retrying with
	// the same request ID is then the only way to learn the outcome without
	// spending twice.
	Unknown bool
	Last    error // the last attempt's error
	Stopped error // context.DeadlineExceeded or context.Canceled; nil when Last was final
	hint    string
	// readOnly: the request changes nothing, so the message does not say
	// whether it was applied.
	readOnly bool
	unknown  *client.OutcomeUnknownError
}

func (e *retryError) Unwrap() []error {
	errs := []error{e.Last}
	if e.Stopped != nil {
		errs = append(errs, e.Stopped)
	}
	if e.unknown != nil {
		errs = append(errs, e.unknown)
	}
	return errs
}

func (e *retryError) Error() string {
	var b strings.Builder
	attempts := fmt.Sprintf("%d %s in %v", e.Attempts, plural(e.Attempts, "attempt", "attempts"), e.Elapsed.Round(time.Millisecond))
	switch {
	case e.Stopped == nil:
		fmt.Fprintf(&b, "after %s: %v", attempts, e.Last)
	case errors.Is(e.Stopped, context.DeadlineExceeded):
		fmt.Fprintf(&b, "deadline exceeded after %s; last error: %v", attempts, e.Last)
	default:
		fmt.Fprintf(&b, "%v after %s; last error: %v", e.Stopped, attempts, e.Last)
	}
	switch {
	case e.Unknown:
		b.WriteString("; the outcome is unknown: the request may or may not have been applied")
		if e.hint != "" {
			b.WriteString("; " + e.hint)
		}
	case e.Stopped != nil && !e.readOnly:
		b.WriteString("; the request was not applied")
	}
	return b.String()
}

// runCall runs one call of a data command as each of them does (invoke),
// then prints the answer as JSON or by format, which gets the answer and the
// number of attempts.
func runCall[R any](cmd *cobra.Command, o *clientOptions, output outputFormat, dc dataCall,
	send func(context.Context, client.Services) (*connect.Response[R], error),
	format func(resp *R, attempts int) string,
) error {
	resp, attempts, err := invoke(cmd, o, dc, send)
	if err != nil {
		return err
	}
	if output == outputJSON {
		return writeJSON(cmd.OutOrStdout(), any(resp).(proto.Message))
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), format(resp, attempts))
	return err
}
