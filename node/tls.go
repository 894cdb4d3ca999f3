package node

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/node/internal/replica"
)

// TLS on a node's two ports. One certificate, key and CA bundle
// (Config.TLSCertFile, TLSKeyFile, TLSCAFile) serve both:
//
//   - The API port is TLS 1.2+ (HTTP/2 by ALPN, or HTTP/1.1); a caller's
//     certificate is optional, verified against the CA bundle when given
//     (the request's authentication reads it from r.TLS).
//   - The peer port is TLS 1.3 with certificates required both ways, and
//     the handshake completes before the mux reads the connection's header
//     (package peermux). The peer's certificate must chain to the CA bundle
//     and name, by its URI SAN quorate://node/<id>, a node this node knows
//     (peerGate).
//   - This node's calls to other nodes' API ports (the first join, status
//     calls) verify the server's certificate and its host name against the
//     CA bundle and present this node's certificate.
//
// The files are reloaded when they change (certs.Source): new handshakes
// use the new material, open connections keep theirs.

// tlsEnabled reports whether the node serves TLS (the three files given).
func (c Config) tlsEnabled() bool { return c.TLSCertFile != "" }

// checkTLS checks the TLS files (all three or none) and refuses a
// non-loopback address served in plaintext without InsecurePlaintext.
func (c Config) checkTLS(bad func(flag, format string, args ...any) error) error {
	files := []struct{ flag, file string }{{"tls-cert", c.TLSCertFile}, {"tls-key", c.TLSKeyFile}, {"tls-ca", c.TLSCAFile}}
	given := 0
	for _, f := range files {
		if f.file != "" {
			given++
		}
	}
	if given > 0 && given < len(files) {
		for _, f := range files {
			if f.file == "" {
				return bad(f.flag, "must be given with --tls-cert, --tls-key and --tls-ca: the three serve the API and the peer port together")
			}
		}
	}
	if given > 0 {
		if c.InsecurePlaintext {
			return bad("insecure-plaintext", "cannot be combined with --tls-cert, --tls-key and --tls-ca")
		}
		if strings.HasPrefix(c.Join, "http://") {
			return bad("join", "%q: the cluster's API is TLS; use https:// or host:port", c.Join)
		}
		return nil
	}
	if c.InsecurePlaintext {
		return nil
	}
	for _, a := range []struct{ flag, addr string }{
		{"api-addr", c.APIAddr}, {"raft-addr", c.RaftAddr}, {"admin-addr", c.AdminAddr},
		{"advertise-api-addr", c.AdvertiseAPIAddr}, {"advertise-raft-addr", c.AdvertiseRaftAddr},
	} {
		if a.addr == "" || isLoopback(a.addr) {
			continue
		}
		return bad(a.flag, "%q is not a loopback address: serving it in plaintext needs --insecure-plaintext; "+
			"give --tls-cert, --tls-key and --tls-ca to serve TLS", a.addr)
	}
	return nil
}

// apiScheme is the scheme of this cluster's API URLs.
func (c Config) apiScheme() string {
	if c.tlsEnabled() {
		return "https"
	}
	return "http"
}

// edgeTLS is the node's TLS files as its ports serve them; nil on a node
// in plaintext (its methods then serve plaintext). Made in New.
type edgeTLS struct {
	src *certs.Source // reloaded until the node closes
}

// openTLS loads cfg's TLS files, the certificate naming this node (checked
// again at every reload: a rotated certificate that names another node is
// not served); the Source reloads the files, checking them on use
// (handshakes, TLSStatus), until the node closes.
func openTLS(cfg Config, log *slog.Logger) (*edgeTLS, error) {
	src, err := certs.NewSource(certs.Options{
		CertFile:      cfg.TLSCertFile,
		KeyFile:       cfg.TLSKeyFile,
		CAFile:        cfg.TLSCAFile,
		CheckOwnChain: true,
		CheckLeaf: func(leaf *x509.Certificate) error {
			id, err := certs.NodeID(leaf)
			if err == nil && id != cfg.ID {
				err = fmt.Errorf("names node %q, not this node's --id %q", id, cfg.ID)
			}
			return err
		},
		OnReload: func(st certs.Status) {
			if st.Err != nil {
				log.Error("TLS files not reloaded: serving the previous certificate", "err", st.Err)
				return
			}
			log.Info("TLS files reloaded", "serial", st.Serial, "not_after", st.NotAfter)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: --id: %q: --tls-cert %s: %v", ErrInvalidConfig, cfg.ID, cfg.TLSCertFile, err)
	}
	return &edgeTLS{src: src}, nil
}

// peerConfigs returns the peer port's configs: mutual TLS, the peer naming
// a node allow allows (peerGate).
func (t *edgeTLS) peerConfigs(allow func(id string) bool) (server, client *tls.Config, err error) {
	opts := certs.PeerOptions{AllowNode: allow}
	if server, err = t.src.PeerServerConfig(opts); err != nil {
		return nil, nil, err
	}
	if client, err = t.src.PeerClientConfig(opts); err != nil {
		return nil, nil, err
	}
	return server, client, nil
}

// peerGate decides which nodes may use the peer port (allow).
type peerGate struct {
	self string                           // this node's ID
	meta *atomic.Pointer[replica.Replica] // the meta replica once it is open
}

// allow reports whether a peer whose certificate names node id may use
// the peer port: this node, a node registered in this node's replica of the
// meta group, or a member of that replica's latest Raft configuration (read
// from its log at start, so a restarted node whose registry is not yet
// caught up still knows its peers, and a node the leader adds is a member
// here once the configuration reaches this node). A replica with no
// state at all (no registered node and no configuration: a node not yet
// joined) allows any node of the CA: it holds nothing to guard, and the
// node adding it (the meta leader, which registers a node before it makes
// it a member) must reach it to replicate the log, which then tells it the
// cluster's nodes. A node's first join goes to another node's API port,
// which asks nothing of the gate. Before the meta replica opens, only this
// node is allowed.
func (p peerGate) allow(id string) bool {
	if id == p.self {
		return true
	}
	g := p.meta.Load()
	if g == nil {
		return false
	}
	if _, ok := g.FSM.Node(id); ok {
		return true
	}
	f := g.Raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	servers := f.Configuration().Servers
	for _, s := range servers {
		if string(s.ID) == id {
			return true
		}
	}
	return len(servers) == 0 && len(g.FSM.Nodes()) == 0
}

// serveTLS sets up srv, a server of the API or admin port or the
// profiling endpoint, to serve TLS with the node's certificate, a caller's
// certificate optional and verified when given. In plaintext it does
// nothing.
func (t *edgeTLS) serveTLS(srv *http.Server) error {
	if t == nil {
		return nil
	}
	cfg, err := t.src.ServerConfig(certs.ServerOptions{ClientAuth: certs.OptionalClientCert})
	if err != nil {
		return err
	}
	srv.TLSConfig = cfg
	srv.Protocols.SetHTTP2(true)
	return nil
}

// serve serves srv, set up by serveTLS, on ln until srv closes.
func (t *edgeTLS) serve(srv *http.Server, ln net.Listener) error {
	if t == nil {
		return srv.Serve(ln)
	}
	return srv.ServeTLS(ln, "", "") // srv.TLSConfig
}

// scheme is the scheme of the URLs the node's API and profiling endpoint
// serve.
func (t *edgeTLS) scheme() string {
	if t == nil {
		return "http"
	}
	return "https"
}

// status is what the TLS files serve and how their last reload went; ok is
// false in plaintext.
func (t *edgeTLS) status() (_ certs.Status, ok bool) {
	if t == nil {
		return certs.Status{}, false
	}
	return t.src.Status(), true
}

// close stops reloading the files.
func (t *edgeTLS) close() error {
	if t == nil {
		return nil
	}
	return t.src.Close()
}

// TLSStatus is what the node's TLS files serve and how their last reload
// went; ok is false for a node without TLS.
func (n *Node) TLSStatus() (_ certs.Status, ok bool) { return n.tls.status() }
