package apiflags

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/spf13/pflag"

	"github.com/quorate/quorate/certs"
)

// TLS are a client's TLS files: the CA bundle that verifies the servers'
// certificates and, optionally, a certificate (with its key) the client
// presents.
type TLS struct {
	CA, Cert, Key string
}

// AddTLSFlags registers --tls-ca, --tls-cert and --tls-key on fs.
func AddTLSFlags(fs *pflag.FlagSet, t *TLS) {
	fs.StringVar(&t.CA, "tls-ca", "", "PEM CA bundle that verifies the servers' certificates; makes host:port servers https://")
	fs.StringVar(&t.Cert, "tls-cert", "", "PEM client certificate to present (optional; with --tls-key)")
	fs.StringVar(&t.Key, "tls-key", "", "PEM key of --tls-cert")
}

// Given reports whether any TLS file is given: the servers are then https.
func (t TLS) Given() bool { return t.CA != "" || t.Cert != "" || t.Key != "" }

// Transport returns an HTTP transport of these files keeping up to conns
// connections per node (0: the library's default): plaintext when no file
// is given, else one that verifies the server's certificate and host name
// (an IP address too) against --tls-ca and presents --tls-cert. Errors name
// the flag.
func (t TLS) Transport(conns int) (*http.Transport, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	if !t.Given() {
		return tr, nil
	}
	if (t.Cert == "") != (t.Key == "") {
		if t.Cert == "" {
			return nil, fmt.Errorf("--tls-cert: must be given with --tls-key")
		}
		return nil, fmt.Errorf("--tls-key: must be given with --tls-cert")
	}
	if t.CA == "" {
		return nil, fmt.Errorf("--tls-ca: must be given to verify the servers' certificates")
	}
	src, err := certs.NewSource(certs.Options{CertFile: t.Cert, KeyFile: t.Key, CAFile: t.CA, Interval: -1})
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

// DefaultScheme gives the entries of a comma-separated server list that
// have no scheme the one of the client: https with TLS files.
func (t TLS) DefaultScheme(list string) string {
	if !t.Given() {
		return list
	}
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if p = strings.TrimSpace(p); p != "" && !strings.Contains(p, "://") {
			parts[i] = "https://" + p
		} else if p == DefaultServer {
			parts[i] = "https://" + strings.TrimPrefix(DefaultServer, "http://")
		}
	}
	return strings.Join(parts, ",")
}
