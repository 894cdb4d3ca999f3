package node

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/quorate/quorate/peermux"
)

// The peer port's gate. The cluster ID in every peer connection's header
// is an identifier, not a credential: it crosses the wire in clear and
// admins see it. Anything that reaches the peer port past its gate is
// trusted as a node (the forwarding channel runs calls as the callers its
// headers name), so a cluster with an access file — one that
// distinguishes callers — must have its peers authenticate
// cryptographically: by mutual TLS (tls.go), or by the challenge–response
// of the peer secret (Config.PeerSecretFile, package peermux). Validate
// refuses an access file with a plaintext peer port on a non-loopback
// address (listened on or advertised) and no peer secret. A node whose
// peer port is on loopback only (quorate dev) may run without either: only
// processes of its own host reach it.

// The secret file holds the standard base64 of at least
// peermux.MinSecretLen random bytes, readable by the node alone; create it
// with `head -c 32 /dev/urandom | base64 > peer.secret; chmod 600
// peer.secret` and copy it to every node.

// errPeerSecret is wrapped by the errors of a peer secret file.
var errPeerSecret = errors.New("peer secret")

// readPeerSecret reads the peer secret file path: the standard base64 of
// at least peermux.MinSecretLen bytes (as base64(1) or openssl rand
// -base64 write it), white space ignored.
func readPeerSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errPeerSecret, err)
	}
	secret, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(b)), ""))
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not base64 (create one with: head -c 32 /dev/urandom | base64 > %s)", errPeerSecret, path, path)
	}
	if len(secret) < peermux.MinSecretLen {
		return nil, fmt.Errorf("%w: %s holds %d bytes; at least %d random bytes are needed (head -c 32 /dev/urandom | base64 > %s)",
			errPeerSecret, path, len(secret), peermux.MinSecretLen, path)
	}
	return secret, nil
}

// checkPeerSecret checks the peer secret file, and that a node with an
// access file authenticates its peers (see above).
func (c Config) checkPeerSecret(bad func(flag, format string, args ...any) error) error {
	if c.PeerSecretFile != "" {
		if _, err := readPeerSecret(c.PeerSecretFile); err != nil {
			return bad("peer-secret-file", "%v", err)
		}
		return nil
	}
	if c.AccessFile == "" || c.tlsEnabled() {
		return nil
	}
	for _, a := range []struct{ flag, addr string }{{"raft-addr", c.RaftAddr}, {"advertise-raft-addr", c.AdvertiseRaftAddr}} {
		if a.addr == "" || isLoopback(a.addr) {
			continue
		}
		return bad("peer-secret-file", "required with --access-file when the peer port is plaintext and not on loopback (--%s %s): "+
			"the cluster ID is no credential, and anyone who reaches the port with it could act as a node; give every node the same "+
			"--peer-secret-file (head -c 32 /dev/urandom | base64 > peer.secret; chmod 600 peer.secret), or serve TLS with --tls-cert, --tls-key and --tls-ca",
			a.flag, a.addr)
	}
	return nil
}
