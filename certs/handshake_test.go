package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func peerConfigs(t *testing.T, server, client *Source, serverAllows, clientAllows func(string) bool) (*tls.Config, *tls.Config) {
	t.Helper()
	sc, err := server.PeerServerConfig(PeerOptions{AllowNode: serverAllows})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := client.PeerClientConfig(PeerOptions{AllowNode: clientAllows})
	if err != nil {
		t.Fatal(err)
	}
	return sc, cc
}

func TestPeerMutualTLS(t *testing.T) {
	ca := newDevCA(t, "n1", "n2")
	sc, cc := peerConfigs(t, nodeSource(t, ca, "n1"), nodeSource(t, ca, "n2"), allow("n1", "n2"), allow("n1", "n2"))
	addr, got := serveTLS(t, sc)

	tc, err := dialTLS(t, addr, cc)
	if err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := exchange(tc); err != nil {
		t.Fatalf("exchange: %v", err)
	}
	a := next(t, got)
	if a.err != nil {
		t.Fatalf("server handshake: %v", a.err)
	}
	if a.state.Version != tls.VersionTLS13 {
		t.Errorf("version %x, want TLS 1.3", a.state.Version)
	}
	if id, err := NodeID(a.state.PeerCertificates[0]); err != nil || id != "n2" {
		t.Errorf("server sees node %q (%v), want n2", id, err)
	}
	if id, err := NodeID(tc.ConnectionState().PeerCertificates[0]); err != nil || id != "n1" {
		t.Errorf("client sees node %q (%v), want n1", id, err)
	}
}

func TestPeerRefusesAnotherCA(t *testing.T) {
	ca := newDevCA(t, "n1", "n2")
	other := newDevCA(t, "n2")
	good := nodeSource(t, ca, "n1")
	// The stranger trusts the cluster's CA but its certificate is another
	// CA's: only the cluster's node can refuse it.
	kp := other.Nodes["n2"]
	stranger := newSource(t, Options{CertFile: kp.CertFile, KeyFile: kp.KeyFile, CAFile: ca.CAFile, Interval: -1})

	t.Run("client from another CA", func(t *testing.T) {
		sc, cc := peerConfigs(t, good, stranger, nil, nil)
		addr, got := serveTLS(t, sc)
		tc, err := dialTLS(t, addr, cc)
		if err == nil {
			// TLS 1.3: the client finishes first; the server's refusal is
			// the alert that answers its first record.
			if err = exchange(tc); err == nil {
				t.Fatal("exchange with a client of another CA succeeded")
			}
		}
		a := next(t, got)
		var unknown x509.UnknownAuthorityError
		if !errors.As(a.err, &unknown) {
			t.Fatalf("server handshake error %v, want its own unknown-authority refusal", a.err)
		}
		if err == nil || !strings.Contains(err.Error(), "bad certificate") {
			t.Errorf("client error %v, want the server's bad-certificate alert", err)
		}
	})
	t.Run("server from another CA", func(t *testing.T) {
		sc, cc := peerConfigs(t, stranger, good, nil, nil)
		addr, got := serveTLS(t, sc)
		_, err := dialTLS(t, addr, cc)
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Fatalf("client handshake error %v, want its own unknown-authority refusal", err)
		}
		if a := next(t, got); a.err == nil {
			t.Fatal("server completed a handshake the client refused")
		}
	})
}

func TestPeerRefusesUnknownNode(t *testing.T) {
	ca := newDevCA(t, "n1", "n2", "n3")
	n1, n3 := nodeSource(t, ca, "n1"), nodeSource(t, ca, "n3")

	t.Run("server refuses", func(t *testing.T) {
		sc, cc := peerConfigs(t, n1, n3, allow("n1", "n2"), nil)
		addr, got := serveTLS(t, sc)
		if tc, err := dialTLS(t, addr, cc); err == nil && exchange(tc) == nil {
			t.Fatal("an unknown node's exchange succeeded")
		}
		if a := next(t, got); !errors.Is(a.err, ErrNodeRefused) {
			t.Fatalf("server handshake error %v, want ErrNodeRefused", a.err)
		}
	})
	t.Run("client refuses", func(t *testing.T) {
		sc, cc := peerConfigs(t, n3, n1, nil, allow("n1", "n2"))
		addr, _ := serveTLS(t, sc)
		if _, err := dialTLS(t, addr, cc); !errors.Is(err, ErrNodeRefused) {
			t.Fatalf("client handshake error %v, want ErrNodeRefused", err)
		}
	})
	t.Run("certificate naming no node", func(t *testing.T) {
		admin := newSource(t, Options{CertFile: ca.Admin.CertFile, KeyFile: ca.Admin.KeyFile, CAFile: ca.CAFile, Interval: -1})
		sc, cc := peerConfigs(t, n1, admin, nil, nil)
		addr, got := serveTLS(t, sc)
		if tc, err := dialTLS(t, addr, cc); err == nil && exchange(tc) == nil {
			t.Fatal("a caller certificate got onto the peer port")
		}
		if a := next(t, got); a.err == nil {
			t.Fatal("server accepted a certificate naming no node")
		}
	})
}

func TestServerClientAuth(t *testing.T) {
	ca := newDevCA(t, "n1")
	other := newDevCA(t)
	server := nodeSource(t, ca, "n1")
	anonymous := newSource(t, Options{CAFile: ca.CAFile, Interval: -1})
	admin := newSource(t, Options{CertFile: ca.Admin.CertFile, KeyFile: ca.Admin.KeyFile, CAFile: ca.CAFile, Interval: -1})
	stranger := newSource(t, Options{CertFile: other.Client.CertFile, KeyFile: other.Client.KeyFile, CAFile: ca.CAFile, Interval: -1})

	for _, tc := range []struct {
		name   string
		auth   ClientAuth
		client *Source
		want   string // the server-side caller identity; "-" for a refusal
	}{
		{"none/anonymous", NoClientCert, anonymous, ""},
		{"optional/anonymous", OptionalClientCert, anonymous, ""},
		{"optional/admin", OptionalClientCert, admin, DevAdminIdentity},
		{"optional/another CA", OptionalClientCert, stranger, "-"},
		{"required/anonymous", RequireClientCert, anonymous, "-"},
		{"required/admin", RequireClientCert, admin, DevAdminIdentity},
		{"required/another CA", RequireClientCert, stranger, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := server.ServerConfig(ServerOptions{ClientAuth: tc.auth})
			if err != nil {
				t.Fatal(err)
			}
			cc, err := tc.client.ClientConfig(ClientOptions{ServerName: "127.0.0.1"})
			if err != nil {
				t.Fatal(err)
			}
			addr, got := serveTLS(t, sc)
			conn, err := dialTLS(t, addr, cc)
			if err == nil {
				err = exchange(conn)
			}
			a := next(t, got)
			if tc.want == "-" {
				if err == nil || a.err == nil {
					t.Fatalf("accepted: client %v, server %v", err, a.err)
				}
				return
			}
			if err != nil || a.err != nil {
				t.Fatalf("refused: client %v, server %v", err, a.err)
			}
			id := ""
			if len(a.state.PeerCertificates) > 0 {
				id = callerOf(a.state.PeerCertificates[0])
			}
			if id != tc.want {
				t.Errorf("caller %q, want %q", id, tc.want)
			}
			if a.state.NegotiatedProtocol != "h2" {
				t.Errorf("ALPN %q, want h2", a.state.NegotiatedProtocol)
			}
		})
	}
}

func TestClientConfigChecksServerName(t *testing.T) {
	ca := newDevCA(t, "n1")
	sc, err := nodeSource(t, ca, "n1").ServerConfig(ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client := newSource(t, Options{CAFile: ca.CAFile, Interval: -1})
	addr, _ := serveTLS(t, sc)
	for name, want := range map[string]bool{"": false, "example.com": false, "localhost": true, "127.0.0.1": true} {
		cc, err := client.ClientConfig(ClientOptions{ServerName: name})
		if err != nil {
			t.Fatal(err)
		}
		_, err = dialTLS(t, addr, cc)
		if (err == nil) != want {
			t.Errorf("ServerName %q: handshake error %v, want success %v", name, err, want)
		}
	}
}

func TestConfigsNeedMaterial(t *testing.T) {
	ca := newDevCA(t, "n1")
	kp := ca.Nodes["n1"]
	caOnly := newSource(t, Options{CAFile: ca.CAFile, Interval: -1})
	certOnly := newSource(t, Options{CertFile: kp.CertFile, KeyFile: kp.KeyFile, Interval: -1})
	if _, err := caOnly.ServerConfig(ServerOptions{}); err == nil {
		t.Error("ServerConfig without a certificate")
	}
	if _, err := certOnly.ServerConfig(ServerOptions{ClientAuth: OptionalClientCert}); err == nil {
		t.Error("client certificates without a CA bundle")
	}
	if _, err := certOnly.ServerConfig(ServerOptions{}); err != nil {
		t.Errorf("ServerConfig without client certificates: %v", err)
	}
	for _, s := range []*Source{caOnly, certOnly} {
		if _, err := s.PeerServerConfig(PeerOptions{}); err == nil {
			t.Error("PeerServerConfig without a certificate and a CA")
		}
		if _, err := s.PeerClientConfig(PeerOptions{}); err == nil {
			t.Error("PeerClientConfig without a certificate and a CA")
		}
	}
	if _, err := NewSource(Options{CertFile: kp.CertFile}); err == nil {
		t.Error("a certificate without a key")
	}
	if _, err := NewSource(Options{}); err == nil {
		t.Error("a Source of nothing")
	}
}

// TestServerConfigHTTP2 serves HTTP over ServerConfig the way the API
// listener will (http.Server.ServeTLS): the per-handshake configs must
// still offer h2, and the handler sees the caller's certificate.
func TestServerConfigHTTP2(t *testing.T) {
	ca := newDevCA(t, "n1")
	sc, err := nodeSource(t, ca, "n1").ServerConfig(ServerOptions{ClientAuth: OptionalClientCert})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		TLSConfig: sc,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			caller := ""
			if len(r.TLS.PeerCertificates) > 0 {
				caller = callerOf(r.TLS.PeerCertificates[0])
			}
			fmt.Fprintf(w, "%s %s", r.Proto, caller)
		}),
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})

	admin := newSource(t, Options{CertFile: ca.Client.CertFile, KeyFile: ca.Client.KeyFile, CAFile: ca.CAFile, Interval: -1})
	cc, err := admin.ClientConfig(ClientOptions{ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: cc, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: handshakeTimeout}).Get("https://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if want := "HTTP/2.0 " + DevClientIdentity; string(body) != want {
		t.Errorf("got %q, want %q", body, want)
	}
}
