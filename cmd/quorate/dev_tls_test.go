package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// `quorate dev --tls` serves TLS with a CA in DIR/tls, prints the CLI
// flags that reach it, and the CLI reaches it with them (and not without);
// a restart keeps the CA.
func TestDevTLS(t *testing.T) {
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(policies, []byte("policies:\n  - name: p\n    algorithm: token_bucket\n    limit: 100\n    period: 1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	apiPort := freePortRange(t, 2)
	raftPort := freePortRange(t, 2, apiPort, apiPort+1)
	state := filepath.Join(dir, "state")
	args := []string{"dev", "--tls", "--dir", state, "--nodes", "2", "--groups", "0", "--policies", policies,
		"--api-port", fmt.Sprint(apiPort), "--raft-port", fmt.Sprint(raftPort)}
	dev := startDev(t, args)
	tlsDir := filepath.Join(state, "tls")
	flags := fmt.Sprintf("--tls-ca %s --tls-cert %s --tls-key %s", filepath.Join(tlsDir, "ca.pem"),
		filepath.Join(tlsDir, "admin.pem"), filepath.Join(tlsDir, "admin-key.pem"))
	server := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	if out := dev.stdout.String(); !strings.Contains(out, "quorate admit --server "+server+" "+flags+" --policy p --key tenant-a\n") ||
		!strings.Contains(out, "--cacert ") {
		t.Fatalf("summary does not say how to reach the TLS cluster:\n%s", out)
	}
	for node := range 2 {
		var d quoratev1.AdmitResponse
		args := append([]string{"admit", "--server", fmt.Sprintf("127.0.0.1:%d", apiPort+node)}, strings.Fields(flags)...)
		mustRunJSON(t, &d, append(args, "--policy", "p", "--key", "k", "-o", "json")...)
		if !d.GetAllowed() {
			t.Fatalf("admit through node %d: %v", node+1, &d)
		}
	}
	// Only the CA bundle: the server is verified, no client certificate.
	var d quoratev1.AdmitResponse
	mustRunJSON(t, &d, "admit", "--server", fmt.Sprintf("127.0.0.1:%d", apiPort), "--tls-ca", filepath.Join(tlsDir, "ca.pem"),
		"--policy", "p", "--key", "k", "-o", "json")
	if _, _, err := runCLI(t, "admit", "--server", fmt.Sprintf("127.0.0.1:%d", apiPort), "--policy", "p", "--key", "k"); err == nil {
		t.Fatal("a plaintext admit reached the TLS cluster")
	}
	dev.stop(t)
	dev = startDev(t, args)
	if out := dev.stdout.String(); !strings.Contains(out, "restarted from existing state") || !strings.Contains(out, flags) {
		t.Fatalf("restart: unexpected summary:\n%s", out)
	}
}
