package certs

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/quorate/quorate/access"
)

func certWith(cn string, uris ...string) *x509.Certificate {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			panic(err)
		}
		c.URIs = append(c.URIs, u)
	}
	return c
}

func TestNodeID(t *testing.T) {
	for _, tc := range []struct {
		name string
		cert *x509.Certificate
		want string // "" for an error
		none bool   // the error is ErrNoNodeID
	}{
		{"node URI", certWith("n1", "quorate://node/n1"), "n1", false},
		{"ID characters", certWith("", "quorate://node/eu-west_1.a"), "eu-west_1.a", false},
		{"after a SPIFFE ID", certWith("", "spiffe://example.org/x", "quorate://node/n2"), "n2", false},
		{"scheme case", certWith("", "QUORATE://node/n3"), "n3", false},
		{"CN only", certWith("n1"), "", true},
		{"SPIFFE only", certWith("", "spiffe://example.org/node/n1"), "", true},
		{"other host", certWith("", "quorate://caller/n1"), "", true},
		{"nil certificate", nil, "", true},
		{"two nodes", certWith("", "quorate://node/n1", "quorate://node/n2"), "", false},
		{"empty ID", certWith("", "quorate://node/"), "", false},
		{"ID with a slash", certWith("", "quorate://node/a/b"), "", false},
		{"ID too long", certWith("", "quorate://node/"+strings.Repeat("x", 65)), "", false},
		{"query", certWith("", "quorate://node/n1?x=1"), "", false},
		{"fragment", certWith("", "quorate://node/n1#x"), "", false},
		{"user", certWith("", "quorate://u@node/n1"), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NodeID(tc.cert)
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("NodeID = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("NodeID = %q, want an error", got)
			}
			if errors.Is(err, ErrNoNodeID) != tc.none {
				t.Fatalf("NodeID error %v: ErrNoNodeID %v, want %v", err, errors.Is(err, ErrNoNodeID), tc.none)
			}
		})
	}
}

func TestNodeURI(t *testing.T) {
	u, err := NodeURI("n1")
	if err != nil || u.String() != "quorate://node/n1" {
		t.Fatalf("NodeURI(n1) = %v, %v", u, err)
	}
	if id, err := NodeID(&x509.Certificate{URIs: []*url.URL{u}}); err != nil || id != "n1" {
		t.Fatalf("NodeID of NodeURI(n1) = %q, %v", id, err)
	}
	for _, bad := range []string{"", "a/b", "a b", "ü", strings.Repeat("x", 65)} {
		if _, err := NodeURI(bad); err == nil {
			t.Errorf("NodeURI(%q) accepted", bad)
		}
	}
}

// callerOf is the caller a verified client certificate authenticates, as
// the node will read it (package access), or "" when it names none.
func callerOf(c *x509.Certificate) string {
	id, err := access.IdentityFromCertificate(c)
	if err != nil {
		return ""
	}
	return id.Caller
}
