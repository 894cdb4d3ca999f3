package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/devcluster"
	"github.com/quorate/quorate/yamllist"
)

// writeTestFile writes text to name in dir and returns its path.
func writeTestFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveUntilReady runs serve with args until GET url (/readyz) answers 200
// through client, then stops it as Ctrl-C does and checks that it returned
// nil.
func serveUntilReady(t *testing.T, args []string, client *http.Client, url string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr devcluster.Output
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, &devcluster.Output{}, &stderr) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			err = errors.New(resp.Status)
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("serve %s: %s not ready after 60s: %v\n%s", strings.Join(args, " "), url, err, stderr.String())
		}
		select {
		case err := <-done:
			t.Fatalf("serve %s returned before %s answered 200: %v\n%s", strings.Join(args, " "), url, err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve %s: %v after a cancel\n%s", strings.Join(args, " "), err, stderr.String())
	}
}

// A config file alone starts a node: serve --config reads every setting
// (here a plaintext loopback node that bootstraps) from it, and the node
// becomes ready and stops on a cancel.
func TestServeConfigFileStartsNode(t *testing.T) {
	dir := t.TempDir()
	port := freePortRange(t, 2)
	path := writeTestFile(t, dir, "quorate.yaml", fmt.Sprintf(`# one node on loopback
id: n1
data-dir: %s
api-addr: 127.0.0.1:%d
raft-addr: 127.0.0.1:%d
bootstrap: true
groups: 2
log-level: error
heartbeat-timeout: 300ms
election-timeout: 300ms
leader-lease-timeout: 300ms
max-request-bytes: 8388608
envoy-config: []
`, filepath.Join(dir, "n1"), port, port+1))
	serveUntilReady(t, []string{"serve", "--config", path}, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
}

// printedConfig runs serve --print-config with args and decodes its output.
func printedConfig(t *testing.T, args ...string) (text string, keys map[string]any) {
	t.Helper()
	out, errOut, err := runCLI(t, append([]string{"serve", "--print-config"}, args...)...)
	if err != nil {
		t.Fatalf("serve --print-config %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	if err := yaml.Unmarshal([]byte(out), &keys); err != nil {
		t.Fatalf("serve --print-config %s: not YAML: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out, keys
}

// A flag given on the command line overrides the file's key, scalars and
// lists alike (the command line's list replaces the file's); the file's
// other keys hold.
func TestServeConfigFlagOverridesFile(t *testing.T) {
	dir := t.TempDir()
	path := writeTestFile(t, dir, "quorate.yaml", `id: from-file
api-addr: 127.0.0.1:7001
bootstrap: true
groups: 4
heartbeat-timeout: 2s
election-timeout: 2s
envoy-config: [a.yaml, b.yaml]
`)
	_, got := printedConfig(t, "--config", path, "--api-addr", "127.0.0.1:7002", "--groups", "6", "--bootstrap=false",
		"--envoy-config", "c.yaml", "--election-timeout", "3s")
	for key, want := range map[string]any{
		"id": "from-file", "api-addr": "127.0.0.1:7002", "bootstrap": false, "groups": 6,
		"heartbeat-timeout": "2s", "election-timeout": "3s", "raft-addr": "127.0.0.1:7170",
	} {
		if got[key] != want {
			t.Errorf("%s: %v (%T), want %v", key, got[key], got[key], want)
		}
	}
	if list := fmt.Sprint(got["envoy-config"]); list != "[c.yaml]" {
		t.Errorf("envoy-config: %s, want the command line's [c.yaml]", list)
	}
	// Without the flags, the file's values.
	_, got = printedConfig(t, "--config", path)
	if got["api-addr"] != "127.0.0.1:7001" || got["groups"] != 4 || got["bootstrap"] != true || fmt.Sprint(got["envoy-config"]) != "[a.yaml b.yaml]" {
		t.Errorf("the file's values not taken: %v", got)
	}
}

// wantConfigError runs serve --config on a file of text and checks that the
// refusal is a *yamllist.Error at line naming key and each of words.
func wantConfigError(t *testing.T, text string, line int, key string, words ...string) {
	t.Helper()
	path := writeTestFile(t, t.TempDir(), "quorate.yaml", text)
	for _, extra := range [][]string{{"--print-config"}, {"--id", "n1", "--bootstrap"}} {
		_, _, err := runCLI(t, append([]string{"serve", "--config", path}, extra...)...)
		var fe *yamllist.Error
		if !errors.As(err, &fe) {
			t.Fatalf("serve --config %s: %v, want a *yamllist.Error", extra, err)
		}
		if fe.Line != line || fe.Field != key {
			t.Errorf("refusal at line %d, key %q (%v); want line %d, key %q", fe.Line, fe.Field, err, line, key)
		}
		wantErrNaming(t, err, append([]string{"--config", fmt.Sprintf("%s:%d", path, line), key}, words...)...)
	}
}

// An unknown key, a repeated one, and a secret given as a value are refused
// with the file, line and key named, before any node starts.
func TestServeConfigRefusesUnknownKey(t *testing.T) {
	wantConfigError(t, "id: n1\n\napi-adr: 127.0.0.1:7070\n", 3, "api-adr", "unknown key")
	wantConfigError(t, "id: n1\nbootstrap: true\n# the same key twice\nid: n2\n", 4, "id", "repeated key", "line 1")
	wantConfigError(t, "id: n1\ndebug-clock-offset: 1s\n", 2, "debug-clock-offset", "unknown key")
	const token = "qrt_never_echoed"
	path := writeTestFile(t, t.TempDir(), "quorate.yaml", "id: n1\nnode-token: "+token+"\n")
	_, _, err := runCLI(t, "serve", "--config", path, "--print-config")
	wantErrNaming(t, err, path+":2", "node-token", "node-token-file")
	if strings.Contains(err.Error(), token) {
		t.Errorf("the refusal echoes the token: %v", err)
	}
}

// A value of the wrong type is refused naming the key, its line and what it
// must be.
func TestServeConfigRefusesWrongType(t *testing.T) {
	for _, tt := range []struct {
		text      string
		line      int
		key, want string
	}{
		{"id: n1\nbootstrap: \"yes\"\n", 2, "bootstrap", "true or false"},
		{"groups: eight\n", 1, "groups", "a whole number"},
		{"groups: 2.5\n", 1, "groups", "a whole number"},
		{"max-feature-level: -1\n", 1, "max-feature-level", "a whole number"},
		{"api-addr: [127.0.0.1:7070]\n", 1, "api-addr", "a string"},
		{"id: {name: n1}\n", 1, "id", "a string"},
		{"envoy-config: envoy.yaml\n", 1, "envoy-config", "a list of strings"},
		{"envoy-config:\n  - a.yaml\n  - [b.yaml]\n", 3, "envoy-config", "a list of strings"},
		{"heartbeat-timeout: soon\n", 1, "heartbeat-timeout", "a duration"},
		{"memory-limit: 1GB\n", 1, "memory-limit", "a size"},
		{"data-dir:\n", 1, "data-dir", "no value"},
	} {
		t.Run(tt.key, func(t *testing.T) { wantConfigError(t, tt.text, tt.line, tt.key, tt.want) })
	}
	path := writeTestFile(t, t.TempDir(), "quorate.yaml", "- id: n1\n")
	_, _, err := runCLI(t, "serve", "--config", path, "--print-config")
	wantErrNaming(t, err, path+":1", "expected a mapping")
	path = writeTestFile(t, t.TempDir(), "quorate.yaml", "id: n1\ngroups: [\n")
	_, _, err = runCLI(t, "serve", "--config", path, "--print-config")
	wantErrNaming(t, err, path+":2", "invalid YAML")
}

// --print-config prints every key a config file has (each serve flag but
// the hidden ones), and its output is a config file that gives the same
// configuration back.
func TestServePrintConfigParsesBack(t *testing.T) {
	dir := t.TempDir()
	path := writeTestFile(t, dir, "quorate.yaml", "id: n7\ngroups: 3\nmemory-limit: 512MiB\nenvoy-config: [a.yaml, \"b c.yaml\"]\ninsecure-plaintext: true\n")
	out, keys := printedConfig(t, "--config", path, "--request-timeout", "7s")
	for _, f := range configFlags(newServeCmd()) {
		if _, ok := keys[f.Name]; !ok {
			t.Errorf("--print-config has no key %s", f.Name)
		}
	}
	if len(keys) != len(configFlags(newServeCmd())) {
		t.Errorf("--print-config prints %d keys, serve has %d", len(keys), len(configFlags(newServeCmd())))
	}
	if keys["id"] != "n7" || keys["memory-limit"] != "512MiB" || keys["request-timeout"] != "7s" || keys["insecure-plaintext"] != true {
		t.Errorf("--print-config:\n%s", out)
	}
	again := writeTestFile(t, dir, "printed.yaml", out)
	if out2, _ := printedConfig(t, "--config", again); out2 != out {
		t.Errorf("the printed configuration does not read back the same:\n%s\nthen:\n%s", out, out2)
	}
	// The defaults alone read back too.
	defaults, _ := printedConfig(t)
	if out2, _ := printedConfig(t, "--config", writeTestFile(t, dir, "defaults.yaml", defaults)); out2 != defaults {
		t.Errorf("the printed defaults do not read back the same:\n%s\nthen:\n%s", defaults, out2)
	}
}

// No serve flag takes a secret as its value: each one that names a secret
// (a token, a secret, a key, a password) takes the path of a file holding
// it, which --print-config shows, never the file's content; the node token
// of $QUORATE_NODE_TOKEN is named as such and not shown.
func TestServePrintConfigShowsNoSecret(t *testing.T) {
	secretName := regexp.MustCompile(`token|secret|key|password`)
	paths := map[string]bool{"tls-key": true, "token-file": true, "node-token-file": true, "peer-secret-file": true}
	for _, f := range configFlags(newServeCmd()) {
		if secretName.MatchString(f.Name) && !paths[f.Name] {
			t.Errorf("--%s: a flag named for a secret that is not known to take a file's path", f.Name)
		}
	}

	dir := t.TempDir()
	ca, err := certs.NewDevCA(filepath.Join(dir, "ca"), []string{"n1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(ca.Nodes["n1"].KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	nodeToken, envToken, peerSecret := access.NewToken(), access.NewToken(), access.NewToken()
	tokenPath := writeTestFile(t, dir, "node.token", nodeToken+"\n")
	peerPath := writeTestFile(t, dir, "peer.secret", peerSecret+"\n")
	path := writeTestFile(t, dir, "quorate.yaml", fmt.Sprintf("id: n1\ntls-key: %s\nnode-token-file: %s\n", ca.Nodes["n1"].KeyFile, tokenPath))
	t.Setenv(nodeTokenEnv, envToken)

	withFile, _ := printedConfig(t, "--config", path, "--peer-secret-file", peerPath)
	fromEnv, keys := printedConfig(t, "--peer-secret-file", peerPath)
	for _, out := range []string{withFile, fromEnv} {
		for _, secret := range []string{nodeToken, envToken, peerSecret, strings.TrimSpace(string(keyPEM))} {
			if strings.Contains(out, secret) {
				t.Fatalf("--print-config shows a secret:\n%s", out)
			}
		}
		for _, line := range strings.Split(strings.TrimSpace(string(keyPEM)), "\n")[1:2] {
			if strings.Contains(out, line) {
				t.Fatalf("--print-config shows the TLS key's content:\n%s", out)
			}
		}
	}
	if !strings.Contains(withFile, "tls-key: "+ca.Nodes["n1"].KeyFile) || !strings.Contains(withFile, "node-token-file: "+tokenPath) ||
		!strings.Contains(withFile, "peer-secret-file: "+peerPath) {
		t.Errorf("--print-config does not show the secret files' paths:\n%s", withFile)
	}
	if keys["node-token-file"] != "" || !strings.Contains(fromEnv, "$"+nodeTokenEnv+" (not shown)") {
		t.Errorf("without --node-token-file, --print-config should say the token comes from $%s:\n%s", nodeTokenEnv, fromEnv)
	}
}

// deploy/quorate.yaml, the example of docs/operating.md, is a config file
// serve accepts, and starts a TLS node with an access file once its paths
// and addresses are the test's (given as flags, which override the file).
func TestServeExampleConfig(t *testing.T) {
	const example = "../../deploy/quorate.yaml"
	_, keys := printedConfig(t, "--config", example)
	id, _ := keys["id"].(string)
	if id == "" || keys["tls-cert"] == "" || keys["access-file"] == "" || keys["token-file"] == "" {
		t.Fatalf("%s: want an id, TLS files, an access file and a token file: %v", example, keys)
	}
	dir := t.TempDir()
	ca, err := certs.NewDevCA(filepath.Join(dir, "ca"), []string{id}, nil)
	if err != nil {
		t.Fatal(err)
	}
	accessPath := writeTestFile(t, dir, "access.yaml", "callers:\n  - caller: "+certs.DevAdminIdentity+"\n    roles: [admin]\n  - caller: gateway\n    roles: [client]\n")
	tokensPath := writeTestFile(t, dir, "tokens.yaml", "tokens:\n  - caller: gateway\n    sha256: "+access.HashToken(access.NewToken())+"\n")
	port := freePortRange(t, 2)
	args := []string{"serve", "--config", example, "--data-dir", filepath.Join(dir, "data"), "--log-level", "error",
		"--api-addr", fmt.Sprintf("127.0.0.1:%d", port), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", port+1),
		"--tls-cert", ca.Nodes[id].CertFile, "--tls-key", ca.Nodes[id].KeyFile, "--tls-ca", ca.CAFile,
		"--access-file", accessPath, "--token-file", tokensPath}
	pem, err := os.ReadFile(ca.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}}
	serveUntilReady(t, args, client, fmt.Sprintf("https://127.0.0.1:%d/readyz", port))
}
