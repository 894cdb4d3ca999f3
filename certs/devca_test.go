package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func parseCertFile(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(mustRead(t, name))
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", name)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewDevCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	ca, err := NewDevCA(dir, []string{"n1", "n2"}, []string{"quorate.internal", "10.0.0.7"})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	keys := []string{ca.CAKeyFile, ca.Admin.KeyFile, ca.Client.KeyFile}
	for _, kp := range ca.Nodes {
		keys = append(keys, kp.KeyFile)
	}
	for _, k := range keys {
		fi, err := os.Stat(k)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", k, fi.Mode().Perm(), err)
		}
	}
	root := parseCertFile(t, ca.CAFile)
	if !root.IsCA || root.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("CA: IsCA %v, key %v", root.IsCA, root.PublicKeyAlgorithm)
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	verify := func(name string, usage x509.ExtKeyUsage) *x509.Certificate {
		t.Helper()
		c := parseCertFile(t, name)
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("%s for %v: %v", name, usage, err)
		}
		if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
			t.Errorf("%s: key is not ECDSA P-256", name)
		}
		if life := c.NotAfter.Sub(c.NotBefore); life > DevValidity+time.Hour || time.Until(c.NotAfter) < DevValidity-time.Hour {
			t.Errorf("%s: valid %v until %v, want about %v", name, life, c.NotAfter, DevValidity)
		}
		return c
	}
	for _, id := range []string{"n1", "n2"} {
		kp := ca.Nodes[id]
		if kp.CertFile != filepath.Join(dir, "node-"+id+".pem") || kp.KeyFile != filepath.Join(dir, "node-"+id+"-key.pem") {
			t.Errorf("node %s files %+v", id, kp)
		}
		verify(kp.CertFile, x509.ExtKeyUsageClientAuth)
		c := verify(kp.CertFile, x509.ExtKeyUsageServerAuth)
		if got, err := NodeID(c); err != nil || got != id {
			t.Errorf("node %s certificate names %q (%v)", id, got, err)
		}
		for _, h := range []string{"127.0.0.1", "localhost", "quorate.internal", "10.0.0.7"} {
			if err := c.VerifyHostname(h); err != nil {
				t.Errorf("node %s: %v", id, err)
			}
		}
	}
	for kp, want := range map[KeyPair]string{ca.Admin: DevAdminIdentity, ca.Client: DevClientIdentity} {
		c := verify(kp.CertFile, x509.ExtKeyUsageClientAuth)
		if got := callerOf(c); got != want {
			t.Errorf("%s: identity %q, want %q", kp.CertFile, got, want)
		}
		if slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
			t.Errorf("%s: a caller's certificate has server usage", kp.CertFile)
		}
	}
	if filepath.Base(ca.Admin.CertFile) != "admin.pem" || filepath.Base(ca.Client.KeyFile) != "client-key.pem" {
		t.Errorf("caller files %+v %+v", ca.Admin, ca.Client)
	}

	if _, err := NewDevCA(dir, nil, nil); err == nil {
		t.Error("NewDevCA replaced an existing CA")
	}
	kp, err := IssueDevCert(dir, CertRequest{Name: "node-n1", NodeID: "n1", Hosts: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	if kp.Serial.Cmp(ca.Nodes["n1"].Serial) == 0 || kp.CertFile != ca.Nodes["n1"].CertFile {
		t.Errorf("reissue: %+v, previous %+v", kp, ca.Nodes["n1"])
	}
	if c := verify(kp.CertFile, x509.ExtKeyUsageServerAuth); c.SerialNumber.Cmp(kp.Serial) != 0 {
		t.Errorf("written serial %x, reported %x", c.SerialNumber, kp.Serial)
	}
	for _, bad := range []CertRequest{{Name: ""}, {Name: "../x"}, {Name: "x", NodeID: "a b"}} {
		if _, err := IssueDevCert(dir, bad); err == nil {
			t.Errorf("IssueDevCert(%+v) accepted", bad)
		}
	}
	if _, err := IssueDevCert(t.TempDir(), CertRequest{Name: "x"}); err == nil {
		t.Error("IssueDevCert without a CA")
	}
}
