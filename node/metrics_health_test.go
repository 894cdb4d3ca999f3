package node_test

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/node/nodetest"
)

// notAfter is the expiry, in Unix seconds, of the first certificate in the
// PEM file at path.
func notAfter(t *testing.T, path string) float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return float64(cert.NotAfter.Unix())
}

// A node with TLS exports the NotAfter of its certificate and of its CA as
// quorate_tls_certificate_expiry_timestamp_seconds, from the start, and
// the new certificate's once its files are rotated.
func TestTLSCertificateExpiryMetric(t *testing.T) {
	const name = "quorate_tls_certificate_expiry_timestamp_seconds"
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, TLS: true})
	c.WaitReady(t)
	for role, file := range map[string]string{"node": c.CA().Nodes["node1"].CertFile, "ca": c.CA().CAFile} {
		want := notAfter(t, file)
		if got, ok := seriesOf(t, c, 0, name, "role", role); !ok || got != want {
			t.Errorf("%s{role=%q} = %v (exported: %v), want %v, the NotAfter of %s", name, role, got, ok, want, file)
		}
	}

	kp, err := certs.IssueDevCert(c.CA().Dir, certs.CertRequest{Name: certs.DevNodeName("node1"), NodeID: "node1",
		Hosts: []string{"127.0.0.1", "localhost"}, Validity: 3 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	want := notAfter(t, kp.CertFile)
	c.Eventually(t, 30*time.Second, "the rotated certificate's expiry", func() error {
		if got, ok := seriesOf(t, c, 0, name, "role", "node"); !ok || got != want {
			return fmt.Errorf("%s{role=\"node\"} = %v (exported: %v), want %v", name, got, ok, want)
		}
		return nil
	})
}

// wantDamagedGauge fails t unless node i exports quorate_replica_damaged
// of group at want.
func wantDamagedGauge(t *testing.T, c *nodetest.Cluster, i int, group string, want float64) {
	t.Helper()
	if v, ok := seriesOf(t, c, i, "quorate_replica_damaged", "group", group); !ok || v != want {
		t.Errorf("node %d: quorate_replica_damaged{group=%q} = %v (exported: %v), want %v", i, group, v, ok, want)
	}
}
