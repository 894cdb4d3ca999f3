package access

import (
	"crypto/x509"
	"fmt"
	"strings"
)

// IdentityFromCertificate returns the identity a client certificate
// proves: its URI SAN (such as a SPIFFE ID, spiffe://trust-domain/path)
// when it has one, else its subject common name. A certificate with more
// than one URI SAN, or with neither a URI SAN nor a CN, or whose name is
// not a valid caller (see checkCaller) is refused with ErrUnauthenticated.
//
// cert must be the leaf of a chain the TLS stack verified against the
// client CAs (tls.ConnectionState.VerifiedChains[0][0]); this function
// checks no signature.
func IdentityFromCertificate(cert *x509.Certificate) (Identity, error) {
	if cert == nil {
		return Anonymous(), fmt.Errorf("%w: no client certificate", ErrUnauthenticated)
	}
	var caller string
	switch n := len(cert.URIs); {
	case n > 1:
		return Anonymous(), fmt.Errorf("%w: client certificate has %d URI SANs; a caller's has one", ErrUnauthenticated, n)
	case n == 1:
		caller = cert.URIs[0].String()
	default:
		caller = cert.Subject.CommonName
	}
	if caller == "" {
		return Anonymous(), fmt.Errorf("%w: client certificate names no caller (no URI SAN, no CN)", ErrUnauthenticated)
	}
	if err := checkCaller(caller); err != nil {
		return Anonymous(), fmt.Errorf("%w: client certificate: %v", ErrUnauthenticated, err)
	}
	return Identity{Caller: caller, Source: SourceCertificate}, nil
}

// BearerToken returns the token of an Authorization header value of the
// form "Bearer <token>" (the scheme in any case), and false for any other
// value, an empty token or one with spaces in it.
func BearerToken(authorization string) (string, bool) {
	scheme, token, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", false
	}
	return token, true
}

// Authenticate returns who a request is from, given the verified leaf of
// its client certificate (nil without one), its Authorization header ("" for
// none) and the token file in use (nil without one):
//
//   - an Authorization header must be a bearer token of the token file,
//     else ErrUnauthenticated: a bad token never falls back to the
//     certificate;
//   - with both a certificate and a token, both must name the same caller;
//   - with a certificate alone, the certificate's identity (see
//     IdentityFromCertificate);
//   - with neither, Anonymous and no error: Authorize refuses it all but
//     health checks.
func Authenticate(cert *x509.Certificate, authorization string, tokens *Tokens) (Identity, error) {
	var fromToken string
	if authorization != "" {
		token, ok := BearerToken(authorization)
		if !ok {
			return Anonymous(), fmt.Errorf("%w: the Authorization header is not \"Bearer <token>\"", ErrUnauthenticated)
		}
		if tokens == nil {
			return Anonymous(), fmt.Errorf("%w: bearer token given, but this node has no token file", ErrUnauthenticated)
		}
		if fromToken, ok = tokens.Lookup(token); !ok {
			return Anonymous(), fmt.Errorf("%w: unknown bearer token", ErrUnauthenticated)
		}
	}
	if cert == nil {
		if fromToken == "" {
			return Anonymous(), nil
		}
		return Identity{Caller: fromToken, Source: SourceToken}, nil
	}
	id, err := IdentityFromCertificate(cert)
	if err != nil {
		return id, err
	}
	if fromToken != "" && fromToken != id.Caller {
		return Anonymous(), fmt.Errorf("%w: client certificate names caller %s but the bearer token is caller %s's",
			ErrUnauthenticated, quote(id.Caller), quote(fromToken))
	}
	return id, nil
}
