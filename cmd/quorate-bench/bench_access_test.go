package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/cmd/internal/apiflags"
	"github.com/quorate/quorate/cmd/internal/clitest"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// applyBenchPolicy applies a token bucket policy named p with room for
// every call of a short run.
func applyBenchPolicy(t *testing.T, c *nodetest.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{{
		Name: "p", Algorithm: "token_bucket", Limit: 1_000_000, Period: durationpb.New(time.Hour)}}})); err != nil {
		t.Fatal(err)
	}
}

// quorate-bench over TLS, with the flags quorate's commands take: every
// call answered, none failed; without them, every call fails.
func TestBenchOverTLS(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 2, TLS: true})
	applyBenchPolicy(t, c)
	ca := c.CA()
	servers := c.Node(0).APIAddr() + "," + c.Node(1).APIAddr() // host:port: https with --tls-ca
	out, stderr, err := clitest.Run(t, run, "--server", servers, "--tls-ca", ca.CAFile, "--tls-cert", ca.Admin.CertFile, "--tls-key", ca.Admin.KeyFile,
		"--policy", "p", "--workers", "2", "--duration", "500ms", "-o", "json")
	if err != nil {
		t.Fatalf("bench over TLS: %v\n%s", err, stderr)
	}
	var sum BenchSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("bench over TLS: %v\n%s", err, out)
	}
	if sum.Calls == 0 || len(sum.Errors) != 0 {
		t.Fatalf("bench over TLS: %d calls, errors %v", sum.Calls, sum.Errors)
	}
	_, _, err = clitest.Run(t, run, "--server", servers, "--tls-cert", ca.Admin.CertFile, "--policy", "p")
	clitest.WantErrNaming(t, err, "--tls-key")
}

// quorate-bench sends the bearer token of --token-file or $QUORATE_TOKEN,
// and refuses a token on the command line.
func TestBenchSendsToken(t *testing.T) {
	token := access.NewToken()
	dir := t.TempDir()
	tokens, rules, tokenFile := filepath.Join(dir, "tokens.yaml"), filepath.Join(dir, "access.yaml"), filepath.Join(dir, "app.token")
	for f, text := range map[string]string{
		tokens:    "tokens:\n  - caller: app\n    sha256: " + access.HashToken(token) + "\n",
		rules:     "callers:\n  - caller: app\n    roles: [admin, client]\n",
		tokenFile: token + "\n",
	} {
		if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Token: token, Configure: func(_ int, cfg *node.Config) {
		cfg.AccessFile, cfg.TokenFile = rules, tokens
	}})
	applyBenchPolicy(t, c)
	server := c.APIURL(0)
	load := []string{"--server", server, "--policy", "p", "--duration", "200ms", "--workers", "1", "-o", "json"}
	bench := func(args ...string) BenchSummary {
		t.Helper()
		out, stderr, err := clitest.Run(t, run, append(load, args...)...)
		if err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, stderr)
		}
		var s BenchSummary
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, out)
		}
		return s
	}
	if s := bench(); s.Errors["unauthenticated"] == 0 || s.Allowed != 0 {
		t.Errorf("bench without a token: %+v, want unauthenticated calls only", s)
	}
	if s := bench("--token-file", tokenFile); s.Allowed == 0 || len(s.Errors) != 0 {
		t.Errorf("bench with --token-file: %+v, want allowed calls and no errors", s)
	}
	t.Setenv(apiflags.TokenEnv, token)
	if s := bench(); s.Allowed == 0 || len(s.Errors) != 0 {
		t.Errorf("bench with $%s: %+v, want allowed calls and no errors", apiflags.TokenEnv, s)
	}
	_, _, err := clitest.Run(t, run, append(load, "--token", token)...)
	clitest.WantErrNaming(t, err, "--token", "--token-file")
	if err != nil && strings.Contains(err.Error(), token) {
		t.Errorf("the refusal of --token echoes the token: %v", err)
	}
}
