package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/quorate/quorate/cmd/internal/apiflags"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// createToken runs quorate token create and returns the token and the
// token file entry it printed.
func createToken(t *testing.T, caller string) (token, entry string) {
	t.Helper()
	out, _, err := runCLI(t, "token", "create", "--caller", caller)
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	m := regexp.MustCompile(`(?m)^token: (\S+)$`).FindStringSubmatch(out)
	i := strings.Index(out, "  - caller:")
	if m == nil || i < 0 {
		t.Fatalf("token create printed no token and entry:\n%s", out)
	}
	return m[1], out[i:]
}

// The CLI against a cluster with an access file: tokens from token create,
// sent from --token-file or $QUORATE_TOKEN, never taken as arguments.
func TestTokenEndToEnd(t *testing.T) {
	opsToken, opsEntry := createToken(t, "ops")
	appToken, appEntry := createToken(t, "app")
	dir := t.TempDir()
	tokens, rules := filepath.Join(dir, "tokens.yaml"), filepath.Join(dir, "access.yaml")
	if err := os.WriteFile(tokens, []byte("tokens:\n"+opsEntry+appEntry), 0o600); err != nil {
		t.Fatal(err)
	}
	const access = "callers:\n  - caller: ops\n    roles: [admin]\n  - caller: app\n    roles: [client]\n"
	if err := os.WriteFile(rules, []byte(access), 0o600); err != nil {
		t.Fatal(err)
	}
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Token: opsToken, Configure: func(_ int, cfg *node.Config) {
		cfg.AccessFile, cfg.TokenFile = rules, tokens
	}})
	file := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(file, []byte("policies:\n  - name: tok\n    algorithm: token_bucket\n    limit: 10\n    period: 1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	server := c.APIURL(0)
	_, _, err := runCLI(t, "policy", "apply", "-f", file, "--server", server)
	wantErrNaming(t, err, "unauthenticated")
	opsFile, appFile := filepath.Join(dir, "ops.token"), filepath.Join(dir, "app.token")
	for f, tok := range map[string]string{opsFile: opsToken, appFile: appToken} {
		if err := os.WriteFile(f, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = runCLI(t, "policy", "apply", "-f", file, "--server", server, "--token-file", appFile)
	wantErrNaming(t, err, "permission_denied", "app", "admin")
	// A token as an argument is refused, naming the file flag, and not echoed.
	_, _, err = runCLI(t, "policy", "apply", "-f", file, "--server", server, "--token", opsToken)
	wantErrNaming(t, err, "--token", "--token-file")
	if err != nil && strings.Contains(err.Error(), opsToken) {
		t.Errorf("the refusal of --token echoes the token: %v", err)
	}
	_, _, err = runCLI(t, "policy", "apply", "-f", file, "--server", server, "--token-file", filepath.Join(dir, "absent"))
	wantErrNaming(t, err, "--token-file", "absent")
	if _, errOut, err := runCLI(t, "policy", "apply", "-f", file, "--server", server, "--token-file", opsFile); err != nil {
		t.Fatalf("policy apply as ops: %v\n%s", err, errOut)
	}

	t.Setenv(apiflags.TokenEnv, appToken)
	var d quoratev1.AdmitResponse
	mustRunJSON(t, &d, "admit", "--server", server, "--policy", "tok", "--key", "k", "--request-id", "R", "-o", "json")
	if !d.GetAllowed() {
		t.Fatalf("admit as app: %v", &d)
	}
	mustRunJSON(t, &d, "admit", "--server", server, "--policy", "tok", "--key", "k", "--request-id", "R", "--caller", "app", "-o", "json")
	if !d.GetDuplicate() {
		t.Errorf("admit naming app: %v, want the first answer (duplicate)", &d)
	}
	_, _, err = runCLI(t, "admit", "--server", server, "--policy", "tok", "--key", "k", "--caller", "other")
	wantErrNaming(t, err, "permission_denied", "other")
	// The lease commands take it as every command does: --token is the
	// bearer token (refused on the command line), --fencing-token the
	// lease's.
	leaseID := fsm.LeaseID("tok", "k", 1, [16]byte{1})
	_, _, err = runCLI(t, "lease", "check", "--server", server, "--lease-id", leaseID, "--fencing-token", "1", "--token-file", opsFile)
	wantErrNaming(t, err, "permission_denied", "ops", "client")
	_, _, err = runCLI(t, "lease", "check", "--server", server, "--lease-id", leaseID, "--fencing-token", "1", "--token", opsToken)
	wantErrNaming(t, err, "--token", "--token-file")
	for _, old := range []string{"--auth-token-file", "--auth-token"} {
		_, _, err = runCLI(t, "lease", "check", "--server", server, "--lease-id", leaseID, "--fencing-token", "1", old, opsFile)
		wantErrNaming(t, err, "unknown flag", old)
	}
}

func TestTokenCreateRefusesABadCaller(t *testing.T) {
	_, _, err := runCLI(t, "token", "create")
	wantErrNaming(t, err, "--caller")
	_, _, err = runCLI(t, "token", "create", "--caller", " padded ")
	wantErrNaming(t, err, "--caller", "spaces")
}
