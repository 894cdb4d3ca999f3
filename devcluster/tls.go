package devcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/quorate/quorate/certs"
)

// TLSFiles is the throwaway CA of a TLS cluster, in Dir/tls: its CA bundle,
// a certificate for each node and the admin caller's certificate a client
// presents.
type TLSFiles struct {
	// Dir holds the CA and the certificates.
	Dir string
	// CA is the CA bundle that verifies the nodes' certificates.
	CA string
	// Admin is the certificate (with its key) of the admin caller, whom
	// the cluster grants every call.
	Admin certs.KeyPair
	nodes map[string]certs.KeyPair
}

// openTLS creates the development CA in dir with certificates for nodes,
// or, when dir already holds one (a restarted cluster), issues the nodes
// fresh certificates from it (new nodes get theirs; the old ones a new
// validity).
func openTLS(dir string, nodes []string) (*TLSFiles, error) {
	t := &TLSFiles{Dir: dir, CA: filepath.Join(dir, certs.DevCAFile), nodes: make(map[string]certs.KeyPair, len(nodes))}
	_, err := os.Stat(t.CA)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		ca, err := certs.NewDevCA(dir, nodes, nil)
		if err != nil {
			return nil, fmt.Errorf("dev: --tls: %w", err)
		}
		t.nodes, t.Admin = ca.Nodes, ca.Admin
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
	if t.Admin, err = certs.IssueDevCert(dir, certs.CertRequest{Name: certs.DevAdminName, URIs: []string{certs.DevAdminIdentity}}); err != nil {
		return nil, fmt.Errorf("dev: --tls: the admin certificate: %w", err)
	}
	return t, nil
}

// httpClient is the admin caller's client of the cluster: it verifies the
// nodes' certificates against the CA and presents the admin certificate.
func (t *TLSFiles) httpClient() (*http.Client, error) {
	src, err := certs.NewSource(certs.Options{CertFile: t.Admin.CertFile, KeyFile: t.Admin.KeyFile, CAFile: t.CA, Interval: -1})
	if err != nil {
		return nil, fmt.Errorf("dev: --tls: %w", err)
	}
	// The dialer offers h2 and http/1.1 (ALPN): the transport must speak
	// whichever the node picks.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &protocols, DialTLSContext: src.DialTLS((&net.Dialer{}).DialContext)}}, nil
}
