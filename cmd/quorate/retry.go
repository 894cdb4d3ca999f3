package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/cenkalti/backoff/v5"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/node"
)

// Retries with the same request ID (DESIGN.md §3). The request is built once
// by the caller and captured by the attempt function; the loop only sees
// func(ctx, server) error, so it cannot change what is sent: every attempt
// carries the same request ID and payload, and a retry of a request that was
// applied gets the recorded answer (duplicate=true) instead of spending again.

// jitteredBackoff is the wait between attempts: InitialInterval after the
// first failure, doubling up to MaxInterval, each wait drawn uniformly from
// [d/2, d] (equal jitter, so that clients that failed together do not retry
// together, yet never retry at once). A retrier's is a copy, so each
// request's waits start again from the first.
type jitteredBackoff struct{ backoff.ExponentialBackOff }

func newJitteredBackoff(initial, max time.Duration) jitteredBackoff {
	return jitteredBackoff{backoff.ExponentialBackOff{InitialInterval: initial, Multiplier: 2, MaxInterval: max}}
}

// defaultBackoff is the CLI's: 20ms, 40ms, ... capped at 500ms.
var defaultBackoff = newJitteredBackoff(20*time.Millisecond, 500*time.Millisecond)

// NextBackOff returns the jittered wait before the next retry.
func (b *jitteredBackoff) NextBackOff() time.Duration {
	d := b.ExponentialBackOff.NextBackOff()
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// retryable reports whether a failed attempt may be retried with the same
// request ID: Unavailable (no leader or quorum, with or without the
// OutcomeUnknown detail), a server's DeadlineExceeded for one attempt, and
// transport failures (connection refused or reset, EOF). It is false for the
// caller's own deadline or cancellation (context.DeadlineExceeded,
// context.Canceled: the time to retry is over) and for every answer about the
// request itself (InvalidArgument, NotFound, ResourceExhausted,
// FailedPrecondition, ...), which a retry would only repeat.
func retryable(err error) bool {
	if err == nil {
		return false
	}
	// Checked first: context.DeadlineExceeded also satisfies net.Error.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	if isTransportError(err) {
		return true
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
			return true
		}
	}
	return false
}

// isTransportError reports whether err is a failure to reach the server or
// to read its answer, rather than an answer.
func isTransportError(err error) bool {
	var opErr *net.OpError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &opErr), errors.As(err, &dnsErr):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, os.ErrDeadlineExceeded): // a dial or read timeout of the transport
		return true
	}
	return false
}

// outcomeUnknown reports whether a failed attempt may have been applied. It
// is false only when the request certainly was not: the connection was never
// made (a failed dial), or the server answered with an error that says so (an
// Unavailable without the OutcomeUnknown detail, such as NotLeader, or any
// answer about the request itself, such as InvalidArgument). A request that
// was sent and then lost (reset, EOF, the caller's deadline), a server's
// DeadlineExceeded and an OutcomeUnknown detail all leave the outcome unknown.
func outcomeUnknown(err error) bool {
	if err == nil {
		return false
	}
	var ce *connect.Error
	if errors.As(err, &ce) && node.IsOutcomeUnknown(ce) {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" || errors.Is(err, syscall.ECONNREFUSED) {
		return false // nothing was sent
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return false // nothing was sent
	}
	if ce != nil && connect.IsWireError(err) {
		// The server's own answer.
		return ce.Code() == connect.CodeDeadlineExceeded
	}
	return true
}

// retrier makes attempts of one request until one succeeds, one fails with an
// error that is not retryable, or the context ends.
type retrier struct {
	// servers are tried in turn: attempt i goes to servers[i % len(servers)],
	// so a dead node does not stop the retries.
	servers []string
	backoff jitteredBackoff
	// retryHint is appended to the error when the context ends after an
	// attempt whose outcome is unknown, e.g. the command line to retry with
	// the same request ID. It is text only: the request is the attempt
	// function's.
	retryHint string
	// onRetry, if set, is told of each failed attempt that will be retried
	// after wait.
	onRetry func(attempt int, server string, err error, wait time.Duration)
	// readOnly is set for a request that changes nothing (Peek): whether an
	// attempt was applied does not matter, so the error never says the
	// outcome is unknown.
	readOnly bool
}

// callWithRetries sends one request through r until it is answered, and
// returns the answer and the number of attempts. The request is the one call
// captures, built once by the caller: every attempt sends the same payload
// (and request ID). newClient makes the client of one server; each server's
// client is made once and reused for its later attempts.
func callWithRetries[C, Resp any](ctx context.Context, r retrier, newClient func(baseURL string) C,
	call func(ctx context.Context, client C, server string) (*Resp, error),
) (_ *Resp, attempts int, _ error) {
	clients := make(map[string]C, len(r.servers))
	var resp *Resp
	attempts, err := r.do(ctx, func(ctx context.Context, server string) error {
		c, ok := clients[server]
		if !ok {
			c = newClient(server)
			clients[server] = c
		}
		res, err := call(ctx, c, server)
		if err != nil {
			return err
		}
		resp = res
		return nil
	})
	if err != nil {
		return nil, attempts, err
	}
	return resp, attempts, nil
}

// do calls attempt until it succeeds or the retries are over, and returns
// the number of attempts made. Each attempt gets ctx, i.e. all of the time
// that remains until the caller's deadline. When more than one attempt was
// made, or the context ended, a failure is a *retryError wrapping the last
// attempt's error; a single attempt's error is returned as it is.
func (r retrier) do(ctx context.Context, attempt func(ctx context.Context, server string) error) (attempts int, _ error) {
	if len(r.servers) == 0 {
		return 0, errors.New("no server to send the request to")
	}
	started := time.Now()
	unknown := false
	var server string
	var last error // the last attempt's error
	final := false // the answer is decided: no wait was cut short
	fail := func(stopped error) error {
		if attempts == 1 && stopped == nil {
			return last
		}
		return &retryError{Attempts: attempts, Elapsed: time.Since(started), Unknown: unknown,
			Last: last, Stopped: stopped, hint: r.retryHint, readOnly: r.readOnly}
	}
	waits := r.backoff
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		server = r.servers[attempts%len(r.servers)]
		attempts++
		last = attempt(ctx, server)
		if last == nil {
			final = true
			return struct{}{}, nil
		}
		unknown = unknown || !r.readOnly && outcomeUnknown(last)
		if ctxErr := ctx.Err(); ctxErr != nil {
			final = true
			return struct{}{}, backoff.Permanent(fail(ctxErr))
		}
		if !retryable(last) {
			final = true
			return struct{}{}, backoff.Permanent(fail(nil))
		}
		return struct{}{}, last
	}, backoff.WithBackOff(&waits), backoff.WithMaxElapsedTime(0), backoff.WithNotify(func(err error, wait time.Duration) {
		if r.onRetry != nil {
			r.onRetry(attempts, server, err, wait)
		}
	}))
	if !final {
		// ctx ended before the next attempt.
		return attempts, fail(ctx.Err())
	}
	return attempts, err
}

// retryError is the failure of a request that was attempted more than once,
// or whose retries the caller's deadline cut short. It unwraps to the last
// attempt's error (so connect.CodeOf gives its code) and to the context's
// error when that stopped the retries.
type retryError struct {
	Attempts int
	Elapsed  time.Duration
	// Unknown is set when some attempt may have been applied: retrying with
	// the same request ID is then the only way to learn the outcome without
	// spending twice.
	Unknown bool
	Last    error // the last attempt's error
	Stopped error // context.DeadlineExceeded or context.Canceled; nil when Last was not retryable
	hint    string
	// readOnly: the request changes nothing, so the message does not say
	// whether it was applied.
	readOnly bool
}

func (e *retryError) Unwrap() []error {
	if e.Stopped != nil {
		return []error{e.Last, e.Stopped}
	}
	return []error{e.Last}
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

// runCall runs one call of a client command as each of them does: over the
// servers of client, retried through cliRetrier (with the same request ID
// when the call carries one; hint says how to retry by hand once out of
// time; readOnly calls are also retried after an unknown outcome), then
// printed as JSON or by format, which gets the answer and the number of
// attempts.
func runCall[C, R any](cmd *cobra.Command, client *clientOptions, output outputFormat, newClient func(baseURL string) C,
	procedure, requestID, hint string, readOnly bool,
	call func(context.Context, C) (*connect.Response[R], error),
	format func(resp *R, attempts int) string,
) error {
	servers, ctx, cancel, err := client.beginServers(cmd.Context())
	if err != nil {
		return err
	}
	defer cancel()
	resp, attempts, err := callWithRetries(ctx, cliRetrier(cmd, servers, hint, readOnly), newClient,
		func(ctx context.Context, c C, server string) (*R, error) {
			res, err := call(ctx, c)
			if err != nil {
				return nil, wrapRPC(procedure, server, requestID, err)
			}
			return res.Msg, nil
		})
	if err != nil {
		return err
	}
	if output == outputJSON {
		return writeJSON(cmd.OutOrStdout(), any(resp).(proto.Message))
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), format(resp, attempts))
	return err
}
