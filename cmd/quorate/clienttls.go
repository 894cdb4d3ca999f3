package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/spf13/pflag"

	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// tlsFlags are a client's TLS files: the CA bundle that verifies the
// servers' certificates and, optionally, a certificate (with its key) the
// client presents.
type tlsFlags struct {
	ca, cert, key string
}

// addTLSFlags registers --tls-ca, --tls-cert and --tls-key on fs.
func addTLSFlags(fs *pflag.FlagSet, t *tlsFlags) {
	fs.StringVar(&t.ca, "tls-ca", "", "PEM CA bundle that verifies the servers' certificates; makes host:port servers https://")
	fs.StringVar(&t.cert, "tls-cert", "", "PEM client certificate to present (optional; with --tls-key)")
	fs.StringVar(&t.key, "tls-key", "", "PEM key of --tls-cert")
}

// given reports whether any TLS file is given: the servers are then https.
func (t tlsFlags) given() bool { return t.ca != "" || t.cert != "" || t.key != "" }

// httpClient returns the HTTP client of these files, sending the call's
// bearer token (tokenTransport): apiHTTPClient when none is given, else one
// that verifies the server's certificate and host name (an IP address too)
// against --tls-ca and presents --tls-cert.
func (t tlsFlags) httpClient() (*http.Client, error) {
	if !t.given() {
		return apiHTTPClient, nil
	}
	tr, err := t.transport(0)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: tokenTransport{next: tr}}, nil
}

// transport returns an HTTP transport of these files (see httpClient)
// keeping up to conns connections per node (0: the library's default),
// plaintext when no file is given.
func (t tlsFlags) transport(conns int) (*http.Transport, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	if !t.given() {
		return tr, nil
	}
	if (t.cert == "") != (t.key == "") {
		if t.cert == "" {
			return nil, fmt.Errorf("--tls-cert: must be given with --tls-key")
		}
		return nil, fmt.Errorf("--tls-key: must be given with --tls-cert")
	}
	if t.ca == "" {
		return nil, fmt.Errorf("--tls-ca: must be given to verify the servers' certificates")
	}
	src, err := certs.NewSource(certs.Options{CertFile: t.cert, KeyFile: t.key, CAFile: t.ca, Interval: -1})
	if err != nil {
		return nil, fmt.Errorf("--tls-ca, --tls-cert, --tls-key: %w", err)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	tr.Protocols = &protocols
	// The host name checked is the one dialled, an IP address too.
	tr.DialTLSContext = src.DialTLS((&net.Dialer{}).DialContext)
	return tr, nil
}

// defaultScheme gives the entries of a comma-separated server list that
// have no scheme the one of the client: https with TLS files.
func (t tlsFlags) defaultScheme(list string) string {
	if !t.given() {
		return list
	}
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if p = strings.TrimSpace(p); p != "" && !strings.Contains(p, "://") {
			parts[i] = "https://" + p
		} else if p == defaultServer {
			parts[i] = "https://" + strings.TrimPrefix(defaultServer, "http://")
		}
	}
	return strings.Join(parts, ",")
}

// http is the HTTP client begin or beginServers built for the command.
func (o *clientOptions) http() *http.Client {
	if o.hc == nil {
		return apiHTTPClient
	}
	return o.hc
}

// adminClient is the command's client of the AdminService of the node at
// baseURL: Connect over HTTP/1.1 (or HTTP/2 with TLS), which every node
// serves.
func (o *clientOptions) adminClient(baseURL string) quoratev1connect.AdminServiceClient {
	return newAdminClient(o.http(), baseURL)
}
