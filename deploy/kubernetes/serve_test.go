package kubernetes

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Pod 0's arguments and the ConfigMap's files start a real node that
// bootstraps, serves TLS with a certificate as docs/operating.md makes them,
// lets the access file's ops caller (CN=ops) run admin status, and stops on
// SIGTERM within the pod's grace period after its preStop sleep. What this
// machine cannot give is replaced: the Secret's and the volume's paths by
// temporary files, the pod's DNS names and ports by loopback ones.
func TestPodZeroServes(t *testing.T) {
	m, sts, c := load(t)
	cm := m.configMaps[0]
	dir := t.TempDir()
	for name, text := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ca := newCert(t, dir, "ca", nil, "quorate-ca", "")
	newCert(t, dir, "quorate-0", ca, "quorate-0", "quorate://node/quorate-0", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	newCert(t, dir, "ops", ca, "ops", "", x509.ExtKeyUsageClientAuth)
	api, raft := freePort(t), freePort(t)
	set := map[string]string{
		"data-dir":            filepath.Join(dir, "data"),
		"access-file":         filepath.Join(dir, "access.yaml"),
		"tls-ca":              filepath.Join(dir, "ca.pem"),
		"tls-cert":            filepath.Join(dir, "quorate-0.pem"),
		"tls-key":             filepath.Join(dir, "quorate-0-key.pem"),
		"api-addr":            fmt.Sprintf("127.0.0.1:%d", api),
		"raft-addr":           fmt.Sprintf("127.0.0.1:%d", raft),
		"advertise-api-addr":  fmt.Sprintf("localhost:%d", api),
		"advertise-raft-addr": fmt.Sprintf("localhost:%d", raft),
	}
	var args []string
	for _, a := range podArgs(t, sts, 0) {
		k, _, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch {
		case ok && k == "config":
			a = "--config=" + filepath.Join(dir, "quorate.yaml")
		case ok && set[k] != "":
			a = "--" + k + "=" + set[k]
			delete(set, k)
		}
		args = append(args, a)
	}
	for k, v := range set {
		args = append(args, "--"+k+"="+v) // a key of the config file: the flag overrides it
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, quorate, args...)
	var stderr bytes.Buffer
	node.Stderr = &stderr
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- node.Wait() }()
	defer func() {
		if node.ProcessState == nil {
			_ = node.Process.Kill()
			<-exited
		}
	}()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(readFile(t, filepath.Join(dir, "ca.pem")))
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	readyz := fmt.Sprintf("https://localhost:%d/readyz", api)
	for deadline := time.Now().Add(60 * time.Second); ; {
		resp, err := client.Get(readyz)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			err = fmt.Errorf("%s", resp.Status)
		}
		select {
		case err := <-exited:
			t.Fatalf("quorate %s exited before it was ready: %v\n%s", strings.Join(args, " "), err, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 60s: %v\n%s", readyz, err, stderr.String())
		}
	}

	status := exec.CommandContext(ctx, quorate, "admin", "status", "--server", fmt.Sprintf("localhost:%d", api),
		"--tls-ca", filepath.Join(dir, "ca.pem"), "--tls-cert", filepath.Join(dir, "ops.pem"), "--tls-key", filepath.Join(dir, "ops-key.pem"))
	out, err := status.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "quorate-0") {
		t.Errorf("admin status as ops: %v\n%s", err, out)
	}

	grace := time.Duration(*sts.Spec.Template.Spec.TerminationGracePeriodSeconds-c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	if err := node.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the node exited with %v after SIGTERM\n%s", err, stderr.String())
		}
	case <-time.After(grace):
		t.Errorf("the node did not stop within %v of SIGTERM (the grace period after the preStop sleep)\n%s", grace, stderr.String())
	}
}

// newCert writes name.pem and name-key.pem to dir: a certificate signed by
// parent (self-signed, a CA, when parent is nil) with the common name cn,
// the URI SAN uri if not empty, DNS name localhost, and the extended key
// usages usage. It returns the certificate and its key for signing others.
func newCert(t *testing.T, dir, name string, parent *tls.Certificate, cn, uri string, usage ...x509.ExtKeyUsage) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	signer, signerKey := tmpl, any(key)
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		tmpl.ExtKeyUsage = usage
		tmpl.DNSNames = []string{"localhost"}
		if uri != "" {
			u, err := url.Parse(uri)
			if err != nil {
				t.Fatal(err)
			}
			tmpl.URIs = []*url.URL{u}
		}
		signer, signerKey = parent.Leaf, parent.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for file, block := range map[string]*pem.Block{
		name + ".pem":     {Type: "CERTIFICATE", Bytes: der},
		name + "-key.pem": {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// freePort is a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
