package node_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
)

// --pprof-addr serves the process's runtime profiles on loopback; it is
// refused on any other address.
func TestPprofEndpoint(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Configure: func(_ int, cfg *node.Config) {
		cfg.PprofAddr = "127.0.0.1:0"
	}})
	base := "http://" + c.Node(0).PprofAddr() + "/debug/pprof/"
	get := func(path string) []byte {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d, %v: %s", path, resp.StatusCode, err, b)
		}
		return b
	}
	if b := get("heap?debug=1"); !bytes.Contains(b, []byte("heap profile")) {
		t.Fatalf("heap profile: %.200s", b)
	}
	if b := get("goroutine?debug=1"); !bytes.Contains(b, []byte("goroutine profile")) {
		t.Fatalf("goroutine profile: %.200s", b)
	}
	if b := get("profile?seconds=1"); len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("CPU profile is not gzipped protobuf: % x", b[:min(len(b), 8)])
	}

	cfg := node.DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Bootstrap, cfg.PprofAddr = "n1", t.TempDir(), true, "0.0.0.0:6060"
	if err := cfg.Validate(); !errors.Is(err, node.ErrInvalidConfig) || !strings.Contains(err.Error(), "--pprof-addr:") {
		t.Fatalf("Validate with a non-loopback --pprof-addr: %v", err)
	}
}

// pprofStatus GETs url with client (adding token as a bearer token when
// not empty) and returns the status and body.
func pprofStatus(t *testing.T, client *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// With an access file, the profiling endpoint serves only the admin role:
// /debug/pprof/cmdline (the process's arguments) and every profile are
// refused to an anonymous caller (401), a bad token (401) and a client
// (403).
func TestPprofNeedsAdminWithAccessFile(t *testing.T) {
	dir := t.TempDir()
	tokens := map[string]string{"ops": access.NewToken(), "app": access.NewToken()}
	accessPath, tokenPath := filepath.Join(dir, "access.yaml"), filepath.Join(dir, "tokens.yaml")
	writeAtomic(t, accessPath, "callers:\n  - caller: ops\n    roles: [admin]\n  - caller: app\n    roles: [client]\n")
	writeAtomic(t, tokenPath, tokenFile(tokens))
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Token: tokens["ops"], Configure: func(_ int, cfg *node.Config) {
		cfg.AccessFile, cfg.TokenFile, cfg.PprofAddr = accessPath, tokenPath, "127.0.0.1:0"
	}})
	base := "http://" + c.Node(0).PprofAddr() + "/debug/pprof/"
	for _, path := range []string{"cmdline", "heap?debug=1", "goroutine?debug=2", ""} {
		for _, tc := range []struct {
			who, token string
			want       int
		}{
			{"anonymous", "", http.StatusUnauthorized},
			{"an unknown token", access.NewToken(), http.StatusUnauthorized},
			{"a client", tokens["app"], http.StatusForbidden},
			{"an admin", tokens["ops"], http.StatusOK},
		} {
			code, body := pprofStatus(t, http.DefaultClient, base+path, tc.token)
			if code != tc.want {
				t.Errorf("GET %s as %s: HTTP %d, want %d: %.200s", path, tc.who, code, tc.want, body)
			}
			if code != http.StatusOK && (strings.Contains(body, "goroutine") || strings.Contains(body, "heap")) {
				t.Errorf("GET %s as %s: the refusal shows a profile: %.200s", path, tc.who, body)
			}
		}
	}
}

// On a TLS node with an access file the endpoint is TLS, and an admin's
// client certificate reaches it while a client's does not.
func TestPprofTLSAdminCertificate(t *testing.T) {
	dir := t.TempDir()
	accessPath := filepath.Join(dir, "access.yaml")
	writeAtomic(t, accessPath, "callers:\n  - caller: "+certs.DevAdminIdentity+"\n    roles: [admin, client]\n  - caller: "+
		certs.DevClientIdentity+"\n    roles: [client]\n")
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, TLS: true, Configure: func(_ int, cfg *node.Config) {
		cfg.AccessFile, cfg.PprofAddr = accessPath, "127.0.0.1:0"
	}})
	url := "https://" + c.Node(0).PprofAddr() + "/debug/pprof/cmdline"
	client := func(kp *certs.KeyPair) *http.Client {
		o := certs.Options{CAFile: c.CA().CAFile, Interval: -1}
		if kp != nil {
			o.CertFile, o.KeyFile = kp.CertFile, kp.KeyFile
		}
		src, err := certs.NewSource(o)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := src.ClientConfig(certs.ClientOptions{ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true} // certs.ClientConfig offers h2
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	for _, tc := range []struct {
		who  string
		kp   *certs.KeyPair
		want int
	}{
		{"no certificate", nil, http.StatusUnauthorized},
		{"a client's certificate", &c.CA().Client, http.StatusForbidden},
		{"an admin's certificate", &c.CA().Admin, http.StatusOK},
	} {
		if code, body := pprofStatus(t, client(tc.kp), url, ""); code != tc.want {
			t.Errorf("GET cmdline with %s: HTTP %d, want %d: %.200s", tc.who, code, tc.want, body)
		}
	}
}
