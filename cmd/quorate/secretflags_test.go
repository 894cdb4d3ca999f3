package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/devcluster"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// serve takes its node token from --node-token-file (or the environment),
// never as an argument: --node-token is refused, naming the file flag,
// without echoing the token; and a plaintext node with an access file
// beyond loopback needs --peer-secret-file.
func TestServeSecretFlags(t *testing.T) {
	dir := t.TempDir()
	const secret = "qrt_secret_never_echoed"
	_, _, err := runCLI(t, "serve", "--id", "n1", "--data-dir", filepath.Join(dir, "n1"), "--bootstrap", "--node-token", secret)
	wantErrNaming(t, err, "--node-token", "--node-token-file", "$"+nodeTokenEnv)
	if strings.Contains(err.Error(), secret) {
		t.Errorf("the refusal echoes the token: %v", err)
	}
	out, _, err := runCLI(t, "serve", "--help")
	if err != nil || strings.Contains(out, "--node-token ") || !strings.Contains(out, "--node-token-file") || !strings.Contains(out, "--peer-secret-file") {
		t.Errorf("serve --help (%v) should list --node-token-file and --peer-secret-file, and not --node-token:\n%s", err, out)
	}
	empty := filepath.Join(dir, "empty.token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = runCLI(t, "serve", "--id", "n1", "--data-dir", filepath.Join(dir, "n1"), "--bootstrap", "--node-token-file", empty)
	wantErrNaming(t, err, "--node-token-file", "empty")

	_, _, err = runCLI(t, "serve", "--id", "n1", "--data-dir", filepath.Join(dir, "n1"), "--bootstrap",
		"--access-file", filepath.Join(dir, "access.yaml"), "--insecure-plaintext",
		"--api-addr", "10.0.0.1:7070", "--raft-addr", "10.0.0.1:7170")
	wantErrNaming(t, err, "--peer-secret-file", "--access-file", "--raft-addr 10.0.0.1:7170", "--tls-cert")
}

// A plaintext cluster with an access file: a node started by serve joins it
// with the admin token of its --node-token-file.
func TestServeJoinsWithNodeTokenFile(t *testing.T) {
	dir := t.TempDir()
	token := access.NewToken()
	accessPath, tokensPath := filepath.Join(dir, "access.yaml"), filepath.Join(dir, "tokens.yaml")
	files := map[string]string{
		accessPath:                       "callers:\n  - caller: ops\n    roles: [admin, client]\n",
		tokensPath:                       fmt.Sprintf("tokens:\n  - caller: ops\n    sha256: %s\n", access.HashToken(token)),
		filepath.Join(dir, "node.token"): token + "\n",
	}
	for p, content := range files {
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Token: token, Configure: func(_ int, cfg *node.Config) {
		cfg.AccessFile, cfg.TokenFile = accessPath, tokensPath
	}})
	port := freePortRange(t, 2)
	args := []string{"serve", "--id", "node2", "--data-dir", filepath.Join(dir, "node2"), "--log-level", "error",
		"--api-addr", fmt.Sprintf("127.0.0.1:%d", port), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", port+1),
		"--join", c.Config(0).APIAddr, "--access-file", accessPath, "--token-file", tokensPath,
		"--node-token-file", filepath.Join(dir, "node.token")}
	ctx, cancel := context.WithCancel(context.Background())
	var stderr devcluster.Output
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, &devcluster.Output{}, &stderr) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v\n%s", err, stderr.String())
		}
	}()
	c.Eventually(t, 30*time.Second, "node2 a member", func() error {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("serve returned: %v\n%s", err, stderr.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return err
		}
		for _, m := range resp.Msg.GetMembers() {
			if m.GetId() == "node2" {
				return nil
			}
		}
		return fmt.Errorf("%d members, node2 not among them", len(resp.Msg.GetMembers()))
	})
}
