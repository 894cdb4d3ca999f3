package client

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
// certificate the client does not trust, a server that refuses the client's
// certificate, or an HTTP server that is not a Quorate node. None of these
// is the cluster being unavailable, and none applied anything, so retrying
// them until the deadline and calling the outcome unknown would only hide
// the cause. AsMismatch recognizes them; every attempt of every call goes
// through it, and a *MismatchError ends the call at once.

// MismatchKind says how a client and a server fail to speak the same
// protocol.
type MismatchKind int

const (
	// MismatchPlaintextServer: an https:// server that serves plaintext.
	MismatchPlaintextServer MismatchKind = iota + 1
	// MismatchTLSServer: an http:// server that may serve TLS.
	MismatchTLSServer
	// MismatchCertificateName: the server's certificate does not name the
	// address dialled.
	MismatchCertificateName
	// MismatchUntrustedCertificate: the server's certificate is not signed
	// by a CA the client trusts.
	MismatchUntrustedCertificate
	// MismatchHandshakeRefused: the server refused the TLS handshake, e.g.
	// for want of a client certificate it trusts.
	MismatchHandshakeRefused
	// MismatchNotQuorate: the server answers HTTP, but not as a Quorate
	// node (or not as one that serves the procedure).
	MismatchNotQuorate
)

// String is the likely cause, for people.
func (k MismatchKind) String() string {
	switch k {
	case MismatchPlaintextServer:
		return "TLS mismatch: the server serves plaintext, not TLS"
	case MismatchTLSServer:
		return "protocol mismatch: the server may serve TLS"
	case MismatchCertificateName:
		return "TLS mismatch: the server's certificate does not name the address dialled"
	case MismatchUntrustedCertificate:
		return "TLS mismatch: the server's certificate is not trusted"
	case MismatchHandshakeRefused:
		return "TLS mismatch: the server refused the TLS handshake"
	case MismatchNotQuorate:
		return "protocol mismatch: the server is not a Quorate node"
	}
	return fmt.Sprintf("MismatchKind(%d)", int(k))
}

// MismatchError is a failed call whose client and server do not speak the
// same protocol: a configuration error, never retried, never hidden by a
// fallback, and certain: nothing was applied. It unwraps to a Connect error
// of code FailedPrecondition (a TLS mismatch) or Unimplemented (a server that
// is not a Quorate node), so connect.CodeOf gives that, and to Cause.
type MismatchError struct {
	// Procedure is the RPC, e.g. "Admit"; Server the base URL called.
	Procedure, Server string
	Kind              MismatchKind
	// Cause is the attempt's error (the TLS or HTTP error).
	Cause error
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s on %s: %v (%v)", e.Procedure, e.Server, e.Kind, e.Cause)
}

// Unwrap returns the Connect error of the mismatch's code, then Cause.
func (e *MismatchError) Unwrap() []error {
	code := connect.CodeFailedPrecondition
	if e.Kind == MismatchNotQuorate {
		code = connect.CodeUnimplemented
	}
	return []error{connect.NewError(code, errors.New(e.Kind.String())), e.Cause}
}

// AsMismatch returns a *MismatchError when err, the error of a call of
// procedure to the server at base URL server, shows a protocol or TLS
// mismatch, else nil. A Quorate node's own answer (a Connect error read from
// the wire), or no answer at all, is never a mismatch.
func AsMismatch(procedure, server string, err error) *MismatchError {
	if err == nil {
		return nil
	}
	var m *MismatchError
	if errors.As(err, &m) {
		return m
	}
	var ie *itemError
	if errors.As(err, &ie) {
		return nil // one request's answer inside an AdmitBatch
	}
	if kind := mismatchKind(server, err); kind != 0 {
		return &MismatchError{Procedure: procedure, Server: server, Kind: kind, Cause: err}
	}
	return nil
}

func mismatchKind(server string, err error) MismatchKind {
	https := strings.HasPrefix(server, "https://")
	msg := err.Error()
	var recordErr tls.RecordHeaderError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidErr x509.CertificateInvalidError
	var verifyErr *tls.CertificateVerificationError
	var alert tls.AlertError
	var opErr *net.OpError
	switch {
	case https && (errors.As(err, &recordErr) || strings.Contains(msg, "server gave HTTP response to HTTPS client") ||
		strings.Contains(msg, "first record does not look like a TLS handshake")):
		return MismatchPlaintextServer
	case errors.As(err, &hostErr):
		return MismatchCertificateName
	case errors.As(err, &unknownCA), errors.As(err, &invalidErr), errors.As(err, &verifyErr):
		return MismatchUntrustedCertificate
	case errors.As(err, &alert),
		https && errors.As(err, &opErr) && opErr.Op == "remote error" && strings.Contains(msg, "tls:"):
		return MismatchHandshakeRefused
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || connect.IsWireError(err) {
		return 0 // a Quorate node's answer, or no answer at all
	}
	// An HTTP answer that is not a Connect one: the status or the content
	// type was wrong.
	switch {
	case !https && ce.Code() == connect.CodeInternal && strings.Contains(ce.Message(), "400 Bad Request"):
		return MismatchTLSServer
	case ce.Code() == connect.CodeUnimplemented, strings.Contains(ce.Message(), "invalid content-type"):
		return MismatchNotQuorate
	}
	return 0
}
