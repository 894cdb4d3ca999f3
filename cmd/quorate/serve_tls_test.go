package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/cmd/internal/apiflags"
	"github.com/quorate/quorate/node/nodetest"
)

func TestServeTLSFlags(t *testing.T) {
	out, _, err := runCLI(t, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"--tls-cert", "--tls-key", "--tls-ca", "--insecure-plaintext"} {
		if !strings.Contains(out, f) {
			t.Errorf("serve --help does not show %s", f)
		}
	}
	dir := t.TempDir()
	ca, err := certs.NewDevCA(filepath.Join(dir, "tls"), []string{"n1", "n2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(extra ...string) error {
		args := append([]string{"serve", "--id", "n1", "--data-dir", filepath.Join(dir, "n1"), "--bootstrap",
			"--api-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0"}, extra...)
		_, _, err := runCLI(t, args...)
		return err
	}
	// Plaintext on a non-loopback address needs --insecure-plaintext.
	wantErrNaming(t, serve("--api-addr", "0.0.0.0:0"), "--api-addr", "--insecure-plaintext", "--tls-cert")
	wantErrNaming(t, serve("--raft-addr", "0.0.0.0:0", "--advertise-raft-addr", "10.1.2.3:7170"), "--raft-addr", "--insecure-plaintext")
	// The three files come together.
	n1 := ca.Nodes["n1"]
	wantErrNaming(t, serve("--tls-cert", n1.CertFile, "--tls-ca", ca.CAFile), "--tls-key")
	wantErrNaming(t, serve("--tls-cert", n1.CertFile, "--tls-key", n1.KeyFile), "--tls-ca")
	wantErrNaming(t, serve("--tls-cert", n1.CertFile, "--tls-key", n1.KeyFile, "--tls-ca", ca.CAFile, "--insecure-plaintext"), "--insecure-plaintext")
	// The certificate must name --id.
	n2 := ca.Nodes["n2"]
	wantErrNaming(t, serve("--tls-cert", n2.CertFile, "--tls-key", n2.KeyFile, "--tls-ca", ca.CAFile), "--id", "n2")
}

func TestClientTLSFlags(t *testing.T) {
	out, _, err := runCLI(t, "admit", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"--tls-ca", "--tls-cert", "--tls-key"} {
		if !strings.Contains(out, f) {
			t.Errorf("admit --help does not show %s", f)
		}
	}
	_, _, err = runCLI(t, "admin", "status", "--tls-cert", "x.pem", "--tls-ca", "ca.pem")
	wantErrNaming(t, err, "--tls-key")
	_, _, err = runCLI(t, "admin", "status", "--tls-ca", filepath.Join(t.TempDir(), "missing.pem"))
	wantErrNaming(t, err, "--tls-ca", "missing.pem")
	var f apiflags.TLS
	if got := f.DefaultScheme("a:1,http://b:2"); got != "a:1,http://b:2" {
		t.Errorf("without TLS files: %q", got)
	}
	f.CA = "ca.pem"
	if got := f.DefaultScheme("a:1,http://b:2," + apiflags.DefaultServer); got != "https://a:1,http://b:2,https://127.0.0.1:7070" {
		t.Errorf("with --tls-ca: %q", got)
	}
}

// A client that speaks plaintext to a TLS port, or TLS to a plaintext one,
// is told which side to change, not just "400 Bad Request".
func TestClientSchemeMismatchHint(t *testing.T) {
	tlsNode := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, TLS: true})
	_, _, err := runCLI(t, "admin", "status", "--server", "http://"+tlsNode.Node(0).APIAddr())
	wantErrNaming(t, err, "may serve TLS", "--tls-ca")
	plain := nodetest.NewCluster(t, 1)
	_, _, err = runCLI(t, "admin", "status", "--server", "https://"+plain.Node(0).APIAddr(), "--tls-ca", tlsNode.CA().CAFile)
	wantErrNaming(t, err, "serves plaintext", "http://")
}
