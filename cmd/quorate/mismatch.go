package main

import (
	"errors"
	"fmt"

	"github.com/quorate/quorate/client"
)

// A client and a server that do not speak the same protocol (TLS to a
// plaintext port, plaintext to a TLS port, an untrusted certificate, a
// server that is not a Quorate node) fail the same way on every attempt;
// package client recognizes them (client.AsMismatch) and ends the call at
// once with a *client.MismatchError. The CLI only says it in its own terms:
// which flag to change.

// mismatchError is a *client.MismatchError as the CLI reports it: the
// server, the likely cause, the attempt's error and what to change. It
// unwraps to the client's error, so connect.CodeOf gives its code
// (failed_precondition for TLS, unimplemented for a server that is not a
// Quorate node).
type mismatchError struct{ m *client.MismatchError }

func (e *mismatchError) Error() string {
	m := e.m
	cause := m.Kind.String()
	switch m.Kind {
	case client.MismatchUntrustedCertificate:
		cause += " by --tls-ca"
	case client.MismatchNotQuorate:
		var notHTTP *notHTTPError
		if !errors.As(m.Cause, &notHTTP) && m.Procedure != "" {
			cause += ", or a Quorate version without " + m.Procedure
		}
	}
	if m.Procedure == "" { // found before the command named its call (probeAPI)
		return fmt.Sprintf("%s: %s (%v); %s", m.Server, cause, m.Cause, mismatchHint(m.Kind))
	}
	return fmt.Sprintf("%s on %s: %s (%v); %s", m.Procedure, m.Server, cause, m.Cause, mismatchHint(m.Kind))
}

func (e *mismatchError) Unwrap() error { return e.m }

// mismatchHint says which flag to change for a mismatch of kind k.
func mismatchHint(k client.MismatchKind) string {
	switch k {
	case client.MismatchPlaintextServer:
		return "use an http:// --server, without --tls-ca"
	case client.MismatchTLSServer:
		return "give --tls-ca, or an https:// --server"
	case client.MismatchCertificateName:
		return "use the host name or IP address its certificate names in --server"
	case client.MismatchUntrustedCertificate:
		return "give --tls-ca the CA bundle that signed the nodes' certificates"
	case client.MismatchHandshakeRefused:
		return "it may require a client certificate signed by its CA: give --tls-cert and --tls-key"
	}
	return "check that --server is a node's API address (quorate serve --api-addr), not its Raft or another port"
}
