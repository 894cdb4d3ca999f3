package jepsen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/certs"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// clusterTLS is a TLS cluster's material (ClusterOptions.TLS): a throwaway
// CA in WorkDir/tls with a certificate for every node slot, spares
// included, naming the node (quorate://node/<id>) and the hosts of its
// addresses; and the harness's own, the CA bundle and the admin caller's
// certificate, which every client of the harness dials with.
type clusterTLS struct {
	ca  *certs.DevCA
	src *certs.Source
}

// setUpTLS creates the CA and the certificates of c.Nodes.
func (c *Cluster) setUpTLS() error {
	var ids, hosts []string
	for _, n := range c.Nodes {
		ids = append(ids, n.ID)
		for _, addr := range []string{n.APIAddr, n.RaftAddr} {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return fmt.Errorf("jepsen: TLS: %w", err)
			}
			if host != "127.0.0.1" && !slices.Contains(hosts, host) { // NewDevCA names 127.0.0.1 itself
				hosts = append(hosts, host)
			}
		}
	}
	ca, err := certs.NewDevCA(filepath.Join(c.opts.WorkDir, "tls"), ids, hosts)
	if err != nil {
		return fmt.Errorf("jepsen: TLS: %w", err)
	}
	// The harness never rotates its files: no reloads (Interval < 0).
	src, err := certs.NewSource(certs.Options{CertFile: ca.Admin.CertFile, KeyFile: ca.Admin.KeyFile, CAFile: ca.CAFile, Interval: -1})
	if err != nil {
		return fmt.Errorf("jepsen: TLS: %w", err)
	}
	c.tls = &clusterTLS{ca: ca, src: src}
	return nil
}

// tlsArgs are node n's `quorate serve` TLS flags; none on a plaintext cluster.
func (c *Cluster) tlsArgs(n *Node) []string {
	if c.tls == nil {
		return nil
	}
	kp := c.tls.ca.Nodes[n.ID]
	return []string{"--tls-cert", kp.CertFile, "--tls-key", kp.KeyFile, "--tls-ca", c.tls.ca.CAFile}
}

// TLS reports whether the cluster's nodes serve TLS on both ports.
func (c *Cluster) TLS() bool { return c.tls != nil }

// newHTTPClient is the harness's one HTTP client of the nodes' APIs: its
// connections opened with dial and, with src (a TLS cluster), a TLS
// handshake on each that checks the node's certificate and the host
// dialled against the cluster's CA and presents the admin caller's
// certificate (HTTP/2 or HTTP/1.1 by ALPN).
func newHTTPClient(dial func(ctx context.Context, network, addr string) (net.Conn, error), src *certs.Source) *http.Client {
	tr := &http.Transport{
		DialContext:         dial,
		MaxIdleConnsPerHost: 64,
	}
	if src != nil {
		var protocols http.Protocols
		protocols.SetHTTP1(true)
		protocols.SetHTTP2(true)
		tr.Protocols = &protocols
		tr.DialTLSContext = src.DialTLS(dial)
	}
	return &http.Client{Transport: tr}
}

// url is node i's API base URL.
func (c *Cluster) url(i int) string {
	if c.tls != nil {
		return "https://" + c.Nodes[i].APIAddr
	}
	return "http://" + c.Nodes[i].APIAddr
}

// CheckTLS is the verdict of a TLS cluster ("tls"): every member's API
// port answers ClusterStatus over TLS with a certificate of the cluster's
// CA naming that node, and refuses the same call in plaintext; and its peer
// port completes a TLS 1.3 handshake with a certificate naming that node.
// On a plaintext cluster it fails.
func CheckTLS(ctx context.Context, c *Cluster) Verdict {
	v := Verdict{Checker: "tls", OK: true}
	if c.tls == nil {
		v.violate("the cluster does not serve TLS")
		v.Summary = "plaintext cluster"
		return v
	}
	plainHTTP := newHTTPClient(c.net.dialContext, nil)
	defer plainHTTP.CloseIdleConnections()
	live := c.Live()
	for _, i := range live {
		n := c.Nodes[i]
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := c.apiCertificate(cctx, i); err != nil {
			v.violate("%s API port: %v", n.ID, err)
		}
		if _, err := c.Status(cctx, i); err != nil {
			v.violate("%s: ClusterStatus over TLS: %v", n.ID, err)
		}
		plain := quoratev1connect.NewAdminServiceClient(plainHTTP, "http://"+n.APIAddr)
		if _, err := plain.ClusterStatus(cctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{})); err == nil {
			v.violate("%s API port: answered ClusterStatus in plaintext", n.ID)
		}
		if err := c.peerHandshake(cctx, n); err != nil {
			v.violate("%s peer port: %v", n.ID, err)
		}
		cancel()
	}
	v.Summary = fmt.Sprintf("%d members: API over TLS with their own certificates, plaintext refused; peer ports TLS 1.3", len(live))
	return v
}

// apiCertificate asks node i's API port for its root path with the
// harness's client and checks that the answer came over TLS from a
// certificate naming node i.
func (c *Cluster) apiCertificate(ctx context.Context, i int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(i)+"/", nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return errors.New("answered without TLS")
	}
	id, err := certs.NodeID(resp.TLS.PeerCertificates[0])
	if err != nil {
		return err
	}
	if id != c.Nodes[i].ID {
		return fmt.Errorf("its certificate names node %q", id)
	}
	return nil
}

// peerHandshake completes a TLS handshake with node n's peer port and
// checks that its certificate names n. (The node then refuses the
// harness's certificate, which names no node: only the handshake's first
// half is the harness's to see.)
func (c *Cluster) peerHandshake(ctx context.Context, n *Node) error {
	cfg, err := c.tls.src.PeerClientConfig(certs.PeerOptions{AllowNode: func(id string) bool { return id == n.ID }})
	if err != nil {
		return err
	}
	raw, err := c.net.dialContext(ctx, "tcp", n.RaftAddr)
	if err != nil {
		return err
	}
	defer raw.Close()
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		return err
	}
	if v := conn.ConnectionState().Version; v != tls.VersionTLS13 {
		return fmt.Errorf("TLS version %x, want 1.3", v)
	}
	return nil
}
