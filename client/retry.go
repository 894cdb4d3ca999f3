package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/cenkalti/backoff/v5"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Retries with the same request ID (docs/DESIGN.md §3). Every call of the
// Client goes through call: the request is built once by the caller and
// captured by the attempt function, which only gets the server to send it
// to, so every attempt carries the same request ID and payload, and a retry
// of a request that was applied gets the recorded answer (duplicate=true)
// instead of spending again.

// jitteredBackoff is the wait between attempts: InitialInterval after the
// first failure, doubling up to MaxInterval, each wait drawn uniformly from
// [d/2, d] (equal jitter, so that clients that failed together do not retry
// together, yet never retry at once). Each call's waits start again from the
// first.
type jitteredBackoff struct{ backoff.ExponentialBackOff }

func newJitteredBackoff(initial, max time.Duration) *jitteredBackoff {
	b := &jitteredBackoff{backoff.ExponentialBackOff{InitialInterval: initial, Multiplier: 2, MaxInterval: max}}
	b.Reset()
	return b
}

// NextBackOff returns the jittered wait before the next retry.
func (b *jitteredBackoff) NextBackOff() time.Duration {
	d := b.ExponentialBackOff.NextBackOff()
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// Retryable reports whether err, the error of one attempt of a call, is
// worth trying again (with the same request ID): the cluster had no
// answer, as opposed to an answer about the request, a mismatch, or the
// caller's own deadline. It is the classification every call of a Client
// retries by, for programs with a loop of their own, such as a poll.
func Retryable(err error) bool { return retryable(err) }

// retryable reports whether a failed attempt may be retried with the same
// request ID: Unavailable (no leader or quorum, with or without the
// OutcomeUnknown detail), a server's DeadlineExceeded for one attempt, and
// transport failures (connection refused or reset, EOF). It is false for the
// caller's own deadline or cancellation (the time to retry is over) and for
// every answer about the request itself (InvalidArgument, NotFound,
// ResourceExhausted, FailedPrecondition, ...), which a retry would only
// repeat.
func retryable(err error) bool {
	if err == nil {
		return false
	}
	if isProtocolMismatch(err) {
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

// isProtocolMismatch reports whether err is a *MismatchError, a TLS failure
// (a certificate not verified, a handshake with a server that does not speak
// TLS, an alert) or an https request answered in plain HTTP: a configuration
// error that a retry would only repeat, and the request was never sent.
func isProtocolMismatch(err error) bool {
	var m *MismatchError
	if errors.As(err, &m) {
		return true
	}
	var verify *tls.CertificateVerificationError
	var record tls.RecordHeaderError
	var alert tls.AlertError
	var unknownCA x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &verify), errors.As(err, &record), errors.As(err, &alert),
		errors.As(err, &unknownCA), errors.As(err, &host), errors.As(err, &invalid):
		return true
	}
	// net/http's own error, of no exported type.
	return strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

// hasOutcomeUnknown reports whether err's Connect error carries the
// OutcomeUnknown detail a node attaches to an Unavailable answer when the
// request may have been applied.
func hasOutcomeUnknown(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if _, ok := v.(*quoratev1.OutcomeUnknown); ok {
				return true
			}
		}
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
	if err == nil || errors.Is(err, ErrNotSent) || isProtocolMismatch(err) {
		return false
	}
	var ie *itemError
	if errors.As(err, &ie) {
		return ie.unknown
	}
	if hasOutcomeUnknown(err) {
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
	var ce *connect.Error
	if errors.As(err, &ce) && connect.IsWireError(err) {
		// The server's own answer.
		return ce.Code() == connect.CodeDeadlineExceeded
	}
	return true
}

// ErrNotSent marks a request that certainly never left this process: a
// call's error matches it (errors.Is) when its last attempt was not sent
// (the caller's context ended while it waited to join a batch) and no
// earlier attempt may have been applied, so the request was not applied.
// Such an error also matches the context's error.
var ErrNotSent = errors.New("client: request not sent")

// RetryInfo describes a failed attempt that will be retried, for
// Config.OnRetry.
type RetryInfo struct {
	// Procedure is the RPC, e.g. "Admit".
	Procedure string
	// Attempt counts from 1.
	Attempt int
	Server  string
	Err     error
	// Wait is the time before the next attempt.
	Wait time.Duration
}

// callSpec says how call sends one request.
type callSpec struct {
	procedure string
	// key routes the call to its group's leader; empty sends it to any
	// member.
	key string
	// readOnly: the request changes nothing, so an attempt's outcome never
	// matters (Peek, CheckFence).
	readOnly  bool
	requestID string
}

// attemptError is the failure of a call: Last is the last attempt's error,
// Unknown says whether some attempt may have been applied, Stopped is why
// the retries ended early (the context's error, or DeadlineExceeded when the
// deadline left no time for another attempt; nil when Last was final).
type attemptError struct {
	Attempts int
	Unknown  bool
	Last     error
	Stopped  error
}

// call sends one request until an attempt is answered, an attempt fails with
// an error that is not retryable, or ctx ends, and returns the answer. Each
// attempt goes to the key's group leader as the routes say, or to another
// member after a failure there; it gets ctx, i.e. all the time that remains.
// When the wait before the next attempt would pass ctx's deadline, call
// stops at once, leaving the caller time for a fallback.
// A failure is the last attempt's error when it is about the request itself
// (a Connect error), or an *attemptError when the retries ran out of time.
func call[R any](ctx context.Context, c *Client, spec callSpec, attempt func(ctx context.Context, server string) (R, http.Header, error)) (R, error) {
	var zero R
	waits := newJitteredBackoff(c.cfg.InitialBackoff, c.cfg.MaxBackoff)
	var (
		last     error
		unknown  bool
		attempts int
		avoid    = map[string]bool{}
	)
	for {
		server := c.routes.target(spec.key, avoid)
		attempts++
		resp, hdr, err := attempt(ctx, server)
		if hdr.Get(leaderHeader) != "" {
			c.routes.refresh()
		}
		if err == nil {
			return resp, nil
		}
		if m := AsMismatch(spec.procedure, server, err); m != nil {
			return zero, m
		}
		last = err
		unknown = unknown || !spec.readOnly && outcomeUnknown(err)
		if ctx.Err() != nil {
			return zero, &attemptError{Attempts: attempts, Unknown: unknown, Last: err, Stopped: ctx.Err()}
		}
		if !retryable(err) {
			if unknown {
				// An earlier attempt may have been applied: this answer
				// does not say whether it was.
				return zero, &attemptError{Attempts: attempts, Unknown: true, Last: err}
			}
			return zero, err
		}
		avoid[server] = true
		c.routes.refresh()
		wait := waits.NextBackOff()
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return zero, &attemptError{Attempts: attempts, Unknown: unknown, Last: last, Stopped: context.DeadlineExceeded}
		}
		c.cfg.Logger.Debug("retrying", "procedure", spec.procedure, "attempt", attempts, "server", server,
			"request_id", spec.requestID, "error", err, "wait", wait)
		c.retries.add(spec.procedure)
		if c.cfg.OnRetry != nil {
			c.cfg.OnRetry(RetryInfo{Procedure: spec.procedure, Attempt: attempts, Server: server, Err: err, Wait: wait})
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, &attemptError{Attempts: attempts, Unknown: unknown, Last: last, Stopped: ctx.Err()}
		case <-t.C:
		}
	}
}

func (e *attemptError) Error() string { return e.Last.Error() }
func (e *attemptError) Unwrap() error { return e.Last }

// publicError turns call's failure into what a method returns: an
// *OutcomeUnknownError when some attempt may have been applied, else the
// last attempt's error (a Connect error, so connect.CodeOf gives its code),
// which also unwraps to context.DeadlineExceeded (or Canceled) when the
// retries ran out of time.
func publicError(err error, requestID string) error {
	var ae *attemptError
	if errors.As(err, &ae) {
		if ae.Unknown {
			last := ae.Last
			if errors.Is(last, ErrNotSent) && ae.Stopped != nil {
				// An earlier attempt may have been applied: the error must
				// not say the request never left.
				last = ae.Stopped
			}
			return &OutcomeUnknownError{RequestID: requestID, Attempts: ae.Attempts, Last: answerError(last)}
		}
		if ae.Stopped != nil {
			return &outOfTimeError{last: answerError(ae.Last), stopped: ae.Stopped}
		}
		err = ae.Last
	}
	return answerError(err)
}

// outOfTimeError is the failure of a call whose retries ended with the
// context (or too near its deadline for another attempt), none applied: it
// reads as the last attempt's error and unwraps to it and to the context's
// error.
type outOfTimeError struct{ last, stopped error }

func (e *outOfTimeError) Error() string   { return e.last.Error() }
func (e *outOfTimeError) Unwrap() []error { return []error{e.last, e.stopped} }

// answerError is err as a method returns it: the Connect error of a batch
// item's error.
func answerError(err error) error {
	var ie *itemError
	if errors.As(err, &ie) {
		return ie.ce
	}
	return err
}

// metaOf is the header of a failed attempt's answer, if any.
func metaOf(err error) http.Header {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Meta()
	}
	return nil
}
