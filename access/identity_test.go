package access

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"strings"
	"testing"
)

// leaf returns a certificate with the given CN and URI SANs. The functions
// under test read only names: the TLS stack verifies signatures.
func leaf(t *testing.T, cn string, uris ...string) *x509.Certificate {
	t.Helper()
	c := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		c.URIs = append(c.URIs, parsed)
	}
	return c
}

func TestIdentityFromCertificate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cert   *x509.Certificate
		caller string
		msg    string
	}{
		{"spiffe", leaf(t, "ignored", "spiffe://example.org/ns/prod/sa/gateway"), "spiffe://example.org/ns/prod/sa/gateway", ""},
		{"cn", leaf(t, "gateway-eu"), "gateway-eu", ""},
		{"nil", nil, "", "no client certificate"},
		{"no name", leaf(t, ""), "", "names no caller"},
		{"two URIs", leaf(t, "x", "spiffe://a/x", "spiffe://a/y"), "", "2 URI SANs"},
		{"long CN", leaf(t, strings.Repeat("c", MaxCallerBytes+1)), "", "at most 128"},
		{"CN with control", leaf(t, "a\nb"), "", "control character"},
	} {
		id, err := IdentityFromCertificate(tc.cert)
		if tc.caller != "" {
			if err != nil || id != (Identity{Caller: tc.caller, Source: SourceCertificate}) {
				t.Errorf("%s: %+v, %v; want %q", tc.name, id, err, tc.caller)
			}
			continue
		}
		if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.msg) || id != Anonymous() {
			t.Errorf("%s: %+v, %v; want ErrUnauthenticated with %q", tc.name, id, err, tc.msg)
		}
	}
}

func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		header, token string
	}{
		{"Bearer qrt_abc", "qrt_abc"},
		{"bearer qrt_abc", "qrt_abc"},
		{"BEARER  qrt_abc", "qrt_abc"},
		{"Bearer", ""},
		{"Bearer ", ""},
		{"Basic dXNlcjpwYXNz", ""},
		{"qrt_abc", ""},
		{"Bearer qrt abc", ""},
		{"Bearer qrt_abc ", ""},
		{"Bearer\tqrt_abc", ""},
		{"", ""},
	} {
		tok, ok := BearerToken(tc.header)
		if tok != tc.token || ok != (tc.token != "") {
			t.Errorf("BearerToken(%q) = %q, %v; want %q", tc.header, tok, ok, tc.token)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	gw, ops := NewToken(), NewToken()
	toks, err := ParseTokens("t.yaml", []byte("tokens:\n  - {caller: gateway-eu, sha256: "+HashToken(gw)+"}\n  - {caller: ops, sha256: "+HashToken(ops)+"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		cert   *x509.Certificate
		auth   string
		tokens *Tokens
		want   Identity
		msg    string // non-empty: ErrUnauthenticated with this text
	}{
		{"nothing", nil, "", toks, Anonymous(), ""},
		{"nothing, no token file", nil, "", nil, Anonymous(), ""},
		{"token", nil, "Bearer " + gw, toks, Identity{"gateway-eu", SourceToken}, ""},
		{"unknown token", nil, "Bearer " + NewToken(), toks, Anonymous(), "unknown bearer token"},
		{"not bearer", nil, "Basic " + gw, toks, Anonymous(), `not "Bearer <token>"`},
		{"no token file", nil, "Bearer " + gw, nil, Anonymous(), "no token file"},
		{"certificate", leaf(t, "ops"), "", nil, Identity{"ops", SourceCertificate}, ""},
		{"certificate and its token", leaf(t, "ops"), "Bearer " + ops, toks, Identity{"ops", SourceCertificate}, ""},
		{"certificate and another's token", leaf(t, "ops"), "Bearer " + gw, toks, Anonymous(), `certificate names caller "ops" but the bearer token is caller "gateway-eu"'s`},
		{"certificate and a bad token", leaf(t, "ops"), "Bearer " + NewToken(), toks, Anonymous(), "unknown bearer token"},
		{"bad certificate", leaf(t, ""), "", toks, Anonymous(), "names no caller"},
		{"bad certificate and a token", leaf(t, ""), "Bearer " + gw, toks, Anonymous(), "names no caller"},
	} {
		id, err := Authenticate(tc.cert, tc.auth, tc.tokens)
		if id != tc.want {
			t.Errorf("%s: identity %+v, want %+v", tc.name, id, tc.want)
		}
		switch {
		case tc.msg == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.msg != "" && (!errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.msg)):
			t.Errorf("%s: %v, want ErrUnauthenticated with %q", tc.name, err, tc.msg)
		}
		if err != nil && (strings.Contains(err.Error(), gw) || strings.Contains(err.Error(), ops)) {
			t.Errorf("%s: error %q repeats a token", tc.name, err)
		}
	}
}
