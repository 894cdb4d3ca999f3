package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/quorate/quorate/certs"
)

// devTLS is the throwaway CA of `quorate dev --tls`, in DIR/tls: its CA
// bundle, a certificate for each node and the admin caller's certificate
// the CLI presents.
type devTLS struct {
	dir   string
	ca    string
	nodes map[string]certs.KeyPair
	admin certs.KeyPair
}

// openDevTLS creates the development CA in dir with certificates for
// nodes, or, when dir already holds one (a restarted dev), issues the nodes
// fresh certificates from it (new nodes get theirs; the old ones a new
// validity).
func openDevTLS(dir string, nodes []string) (*devTLS, error) {
	t := &devTLS{dir: dir, ca: filepath.Join(dir, certs.DevCAFile), nodes: make(map[string]certs.KeyPair, len(nodes))}
	_, err := os.Stat(t.ca)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		ca, err := certs.NewDevCA(dir, nodes, nil)
		if err != nil {
			return nil, fmt.Errorf("dev: --tls: %w", err)
		}
		t.nodes, t.admin = ca.Nodes, ca.Admin
		return t, nil
	case err != nil:
		return nil, fmt.Errorf("dev: --tls: %w", err)
	}
	for _, id := range nodes {
		kp, err := certs.IssueDevCert(dir, certs.CertRequest{Name: certs.DevNodeName(id), NodeID: id, Hosts: []string{"127.0.0.1", "localhost"}})
		if err != nil {
			return nil, fmt.Errorf("dev: --tls: %s's certificate: %w", id, err)
		}
		t.nodes[id] = kp
	}
	if t.admin, err = certs.IssueDevCert(dir, certs.CertRequest{Name: certs.DevAdminName, URIs: []string{certs.DevAdminIdentity}}); err != nil {
		return nil, fmt.Errorf("dev: --tls: the admin certificate: %w", err)
	}
	return t, nil
}

// client is what the CLI needs to reach the cluster: the CA bundle and the
// admin certificate.
func (t *devTLS) client() tlsFlags {
	return tlsFlags{ca: t.ca, cert: t.admin.CertFile, key: t.admin.KeyFile}
}

// cliFlags are the client flags that reach the cluster, for the summary.
func (t *devTLS) cliFlags() string {
	c := t.client()
	return fmt.Sprintf("--tls-ca %s --tls-cert %s --tls-key %s", c.ca, c.cert, c.key)
}
