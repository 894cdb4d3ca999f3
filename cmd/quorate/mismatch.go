package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"connectrpc.com/connect"
)

// A client and a server that do not speak the same protocol fail the same
// way on every attempt: TLS to a plaintext port, plaintext to a TLS port, a
// certificate the client's CA does not trust, a server that refuses the
// client's certificate, or an HTTP server that is not a Quorate node. None
// of these is the cluster being unavailable, and none applied anything, so
// retrying them until the deadline and calling the outcome unknown would
// only hide the cause. protocolMismatch recognizes them; wrapRPC, which every
// attempt of every command goes through, turns them into a *mismatchError,
// which a retry loop takes as final.

// mismatchError is a failed call whose client and server do not speak the
// same protocol. Its message names the server, the likely cause and what to
// change. It unwraps to a *connect.Error read as the server's own answer
// (failed_precondition for TLS, unimplemented for a server that is not a
// Quorate node), not to the transport error: a retry loop stops at once and
// knows nothing was applied. The transport error is kept for the message.
type mismatchError struct {
	procedure string // e.g. "Admit"
	server    string
	cause     string // the likely cause, for people
	hint      string // what to change
	err       error  // the attempt's error
	final     *connect.Error
}

func (e *mismatchError) Error() string {
	return fmt.Sprintf("%s on %s: %s (%v); %s", e.procedure, e.server, e.cause, e.err, e.hint)
}

func (e *mismatchError) Unwrap() error { return e.final }

// protocolMismatch returns a *mismatchError when err, the error of a call of
// procedure to server, shows a protocol or TLS mismatch, else nil.
func protocolMismatch(procedure, server string, err error) *mismatchError {
	cause, hint, code := classifyMismatch(procedure, server, err)
	if cause == "" {
		return nil
	}
	return &mismatchError{procedure: procedure, server: server, cause: cause, hint: hint, err: err,
		final: connect.NewWireError(code, errors.New(cause))}
}

// classifyMismatch says what kind of mismatch err shows, if any: the cause,
// the hint and the code of the mismatchError; "" when it is none.
func classifyMismatch(procedure, server string, err error) (cause, hint string, code connect.Code) {
	https := strings.HasPrefix(server, "https://")
	msg := err.Error()
	var recordErr tls.RecordHeaderError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidErr x509.CertificateInvalidError
	var verifyErr *tls.CertificateVerificationError
	var opErr *net.OpError
	switch {
	case https && (errors.As(err, &recordErr) || strings.Contains(msg, "server gave HTTP response to HTTPS client") ||
		strings.Contains(msg, "first record does not look like a TLS handshake")):
		return "TLS mismatch: the server serves plaintext, not TLS",
			"use an http:// --server, without --tls-ca", connect.CodeFailedPrecondition
	case errors.As(err, &hostErr):
		return "TLS mismatch: the server's certificate does not name the address dialled",
			"use the host name or IP address its certificate names in --server", connect.CodeFailedPrecondition
	case errors.As(err, &unknownCA), errors.As(err, &invalidErr), errors.As(err, &verifyErr):
		return "TLS mismatch: the server's certificate is not trusted by --tls-ca",
			"give --tls-ca the CA bundle that signed the nodes' certificates", connect.CodeFailedPrecondition
	case https && errors.As(err, &opErr) && opErr.Op == "remote error" && strings.Contains(msg, "tls:"):
		return "TLS mismatch: the server refused the TLS handshake",
			"it may require a client certificate signed by its CA: give --tls-cert and --tls-key", connect.CodeFailedPrecondition
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || connect.IsWireError(err) {
		return "", "", 0 // a Quorate node's answer, or no answer at all
	}
	// An HTTP answer that is not a Connect one: the status or the content
	// type was wrong.
	switch {
	case !https && ce.Code() == connect.CodeInternal && strings.Contains(ce.Message(), "400 Bad Request"):
		return "protocol mismatch: the server may serve TLS",
			"give --tls-ca, or an https:// --server", connect.CodeFailedPrecondition
	case ce.Code() == connect.CodeUnimplemented:
		return "protocol mismatch: the server is not a Quorate node, or a Quorate version without " + procedure +
				" (it answered " + ce.Message() + ", not a Connect error)",
			"check that --server is a node's API address (quorate serve --api-addr), not its Raft or another port", connect.CodeUnimplemented
	case strings.Contains(ce.Message(), "invalid content-type"):
		return "protocol mismatch: the server is not a Quorate node (its answer is not the Connect protocol)",
			"check that --server is a node's API address (quorate serve --api-addr), not its Raft or another port", connect.CodeUnimplemented
	}
	return "", "", 0
}
