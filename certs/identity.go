package certs

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// NodeURIScheme and NodeURIHost make the URI SAN that names a node:
// quorate://node/<id>.
const (
	NodeURIScheme = "quorate"
	NodeURIHost   = "node"
)

// ErrNoNodeID is returned by NodeID for a certificate whose URI SANs name no
// node.
var ErrNoNodeID = errors.New("certs: certificate names no node (no quorate://node/<id> URI SAN)")

// NodeURI is the URI SAN a node certificate carries for node id:
// quorate://node/<id>. It fails for an ID that is not 1 to 64 letters,
// digits, '-', '_' or '.' (the IDs `quorate serve --id` accepts).
func NodeURI(id string) (*url.URL, error) {
	if err := checkNodeID(id); err != nil {
		return nil, err
	}
	return &url.URL{Scheme: NodeURIScheme, Host: NodeURIHost, Path: "/" + id}, nil
}

// NodeID is the node a certificate names: the <id> of its one URI SAN of the
// form quorate://node/<id>. Its CN and DNS SANs are not looked at. It returns
// ErrNoNodeID when no URI SAN has that form, and an error when there are
// several (a certificate names at most one node) or the ID is malformed.
func NodeID(cert *x509.Certificate) (string, error) {
	if cert == nil {
		return "", ErrNoNodeID
	}
	id := ""
	for _, u := range cert.URIs {
		got, err := NodeIDOfURI(u)
		if errors.Is(err, ErrNoNodeID) {
			continue
		}
		if err != nil {
			return "", err
		}
		if id != "" {
			return "", fmt.Errorf("certs: certificate names two nodes (%q and %q)", id, got)
		}
		id = got
	}
	if id == "" {
		return "", ErrNoNodeID
	}
	return id, nil
}

// NodeIDOfURI is the node a URI names when it is of the form
// quorate://node/<id>: ErrNoNodeID when it is not of that scheme and host,
// an error when it is but has more (a query, a user) or a malformed ID.
func NodeIDOfURI(u *url.URL) (string, error) {
	if u == nil || !strings.EqualFold(u.Scheme, NodeURIScheme) || u.Host != NodeURIHost {
		return "", ErrNoNodeID
	}
	if u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", fmt.Errorf("certs: node URI %q: only quorate://node/<id>", u)
	}
	id := strings.TrimPrefix(u.Path, "/")
	if err := checkNodeID(id); err != nil {
		return "", fmt.Errorf("certs: node URI %q: %w", u, err)
	}
	return id, nil
}

// checkNodeID applies the rule of `quorate serve --id`.
func checkNodeID(id string) error {
	if id == "" || len(id) > 64 || strings.ContainsFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) {
		return fmt.Errorf("node ID %q: use 1 to 64 letters, digits, '-', '_' or '.'", id)
	}
	return nil
}
