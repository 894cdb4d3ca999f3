package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
)

// ErrNodeRefused is returned by a peer handshake when the peer's
// certificate names a node the PeerOptions.AllowNode hook refuses.
var ErrNodeRefused = errors.New("certs: peer node refused")

// ClientAuth is what the API listener asks of callers' certificates.
type ClientAuth int

const (
	// NoClientCert asks for none: callers authenticate otherwise (a bearer
	// token) or not at all.
	NoClientCert ClientAuth = iota
	// OptionalClientCert verifies a certificate a caller presents against
	// the current CA bundle (and refuses the handshake when it does not
	// verify) but accepts a caller that presents none.
	OptionalClientCert
	// RequireClientCert refuses a caller without a certificate the current
	// CA bundle verifies.
	RequireClientCert
)

// ServerOptions configures the API listener's tls.Config.
type ServerOptions struct {
	ClientAuth ClientAuth
	// NextProtos are the ALPN protocols offered; nil means h2 and
	// http/1.1. (Set them here: an http.Server adding h2 to the returned
	// config does not reach the per-connection configs.)
	NextProtos []string
}

// ServerConfig is the API listener's tls.Config: TLS 1.2 or later (1.3 is
// preferred by both Go ends), the Source's current certificate, and callers'
// certificates verified per opts against the current CA bundle. Each
// handshake gets a config built from the material current at that moment
// (GetConfigForClient), so connections opened after a reload see the new
// certificate and CA bundle while open ones go on. Callers' verified chains
// are in the connection's tls.ConnectionState; access.IdentityFromCertificate
// names them.
func (s *Source) ServerConfig(opts ServerOptions) (*tls.Config, error) {
	if s.current().cert == nil {
		return nil, errors.New("certs: ServerConfig needs a certificate (CertFile)")
	}
	var auth tls.ClientAuthType
	switch opts.ClientAuth {
	case NoClientCert:
		auth = tls.NoClientCert
	case OptionalClientCert:
		auth = tls.VerifyClientCertIfGiven
	case RequireClientCert:
		auth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("certs: unknown ClientAuth %d", opts.ClientAuth)
	}
	if auth != tls.NoClientCert && s.current().pool == nil {
		return nil, errors.New("certs: client certificates need a CA bundle (CAFile)")
	}
	protos := opts.NextProtos
	if protos == nil {
		protos = []string{"h2", "http/1.1"}
	}
	base := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		Time:       s.opts.Now,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		},
	}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		m := s.current()
		return &tls.Config{
			MinVersion:   tls.VersionTLS12,
			NextProtos:   protos,
			Time:         s.opts.Now,
			Certificates: []tls.Certificate{*m.cert},
			ClientAuth:   auth,
			ClientCAs:    m.pool,
		}, nil
	}
	return base, nil
}

// PeerOptions configures the peer port's tls.Configs.
type PeerOptions struct {
	// AllowNode reports whether the node a peer's certificate names (see
	// NodeID) may talk to this one; a refused peer fails the handshake with
	// ErrNodeRefused. nil allows every node the CA bundle signs. It is
	// called at every handshake, so it may consult a membership that
	// changes.
	AllowNode func(nodeID string) bool
	// NextProtos are the ALPN protocols offered, none by default.
	NextProtos []string
}

// PeerServerConfig is the peer port's listener config: TLS 1.3, the Source's
// current certificate, and a client certificate required and verified at
// each handshake against the CA bundle current at that moment (not a pool
// frozen here), for client authentication, naming a node (NodeID) that
// opts.AllowNode allows. A refused peer's handshake fails before the
// listener reads any byte of its.
func (s *Source) PeerServerConfig(opts PeerOptions) (*tls.Config, error) {
	if err := s.checkPeer(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: opts.NextProtos,
		Time:       s.opts.Now,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		},
		// Any certificate gets through the library's check, which would use
		// a frozen pool; VerifyConnection verifies it against the current one.
		ClientAuth:             tls.RequireAnyClientCert,
		SessionTicketsDisabled: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return s.verifyPeer(cs, x509.ExtKeyUsageClientAuth, opts.AllowNode)
		},
	}, nil
}

// PeerClientConfig is the config a node dials other nodes' peer ports with:
// TLS 1.3, the Source's current certificate as client certificate, and the
// server's certificate verified at each handshake against the current CA
// bundle, for server authentication, naming a node opts.AllowNode allows.
// Host names are not checked: a peer is identified by the node its
// certificate names, not by the address it was dialled at.
func (s *Source) PeerClientConfig(opts PeerOptions) (*tls.Config, error) {
	if err := s.checkPeer(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: opts.NextProtos,
		Time:       s.opts.Now,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		},
		// The library's check would use a frozen pool and the dialled host
		// name; VerifyConnection verifies against the current pool instead.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return s.verifyPeer(cs, x509.ExtKeyUsageServerAuth, opts.AllowNode)
		},
	}, nil
}

func (s *Source) checkPeer() error {
	m := s.current()
	if m.cert == nil || m.pool == nil {
		return errors.New("certs: the peer port needs a certificate and a CA bundle (CertFile, CAFile)")
	}
	return nil
}

// verifyPeer verifies a peer's chain against the current CA bundle and the
// node it names against allow.
func (s *Source) verifyPeer(cs tls.ConnectionState, usage x509.ExtKeyUsage, allow func(string) bool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("certs: peer presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         s.current().pool,
		Intermediates: poolOf(cs.PeerCertificates[1:]),
		CurrentTime:   s.opts.Now(),
		KeyUsages:     []x509.ExtKeyUsage{usage},
	})
	if err != nil {
		return fmt.Errorf("certs: peer certificate: %w", err)
	}
	id, err := NodeID(leaf)
	if err != nil {
		return err
	}
	if allow != nil && !allow(id) {
		return fmt.Errorf("%w: %q", ErrNodeRefused, id)
	}
	return nil
}

// ClientOptions configures the config a caller (a node calling another
// node's API, the CLI) dials the API with.
type ClientOptions struct {
	// ServerName is the host name or IP address the server's certificate
	// must carry; empty means the host name tls.Dial or http.Transport fills
	// in from the dialled address. The TLS library passes no IP address on
	// to the check, so dialling an IP address needs ServerName set.
	ServerName string
	// NextProtos are the ALPN protocols offered; nil means h2 and http/1.1.
	NextProtos []string
}

// ClientConfig is the config to dial the API with: TLS 1.2 or later, the
// Source's current certificate (if it has one) as client certificate, and
// the server's certificate verified, with its host name, against the current
// CA bundle (or against the system's roots when the Source has no CAFile).
func (s *Source) ClientConfig(opts ClientOptions) (*tls.Config, error) {
	protos := opts.NextProtos
	if protos == nil {
		protos = []string{"h2", "http/1.1"}
	}
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		ServerName: opts.ServerName,
		Time:       s.opts.Now,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert := s.current().cert; cert != nil {
				return cert, nil
			}
			return &tls.Certificate{}, nil
		},
	}
	if s.current().pool == nil {
		return c, nil
	}
	c.InsecureSkipVerify = true // verified by VerifyConnection, against the current pool
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("certs: server presented no certificate")
		}
		name := cs.ServerName
		if name == "" {
			name = opts.ServerName
		}
		if name == "" {
			return errors.New("certs: no server name to verify the server's certificate against (set ClientOptions.ServerName when dialling an IP address)")
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
			DNSName:       name,
			Roots:         s.current().pool,
			Intermediates: poolOf(cs.PeerCertificates[1:]),
			CurrentTime:   s.opts.Now(),
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			return fmt.Errorf("certs: server certificate: %w", err)
		}
		return nil
	}
	return c, nil
}

func poolOf(certs []*x509.Certificate) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool
}

// DialTLS returns a dial function for an HTTP transport's DialTLSContext:
// it opens a connection with dial and completes a TLS handshake on it with
// ClientConfig, the server's certificate checked against the host name
// dialled (an IP address too) and the current CA bundle, the current
// client certificate (if any) presented.
func (s *Source) DialTLS(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		cfg, err := s.ClientConfig(ClientOptions{ServerName: host})
		if err != nil {
			return nil, err
		}
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := tls.Client(raw, cfg)
		if err := c.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return c, nil
	}
}
