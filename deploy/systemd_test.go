package deploy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/node/nodetest"
)

const (
	unitFile    = "systemd/quorate.service"
	envFile     = "systemd/quorate.env"
	unitBinary  = "/usr/local/bin/quorate"
	unitEtc     = "/etc/quorate"
	unitDataDir = "%S/quorate" // %S: /var/lib for a system unit
)

// unit is a systemd unit file: each section's settings, in order, with
// continuation lines joined.
type unit map[string]map[string][]string

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	section := ""
	var line string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if line == "" && (l == "" || l[0] == '#' || l[0] == ';') {
			continue
		}
		if s, ok := strings.CutSuffix(l, `\`); ok {
			line += s + " "
			continue
		}
		line += l
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		} else if k, v, ok := strings.Cut(line, "="); ok && section != "" {
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		} else {
			t.Errorf("%s: not a setting: %q", path, line)
		}
		line = ""
	}
	return u
}

// readEnv reads an environment file: its assignments, and those of its
// commented-out lines (other values to choose from) apart.
func readEnv(t *testing.T, path string) (set map[string]string, alt map[string][]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	set, alt = map[string]string{}, map[string][]string{}
	assign := regexp.MustCompile(`^(#\s*)?([A-Z_][A-Z0-9_]*)=(.*)$`)
	for l := range strings.Lines(string(b)) {
		m := assign.FindStringSubmatch(strings.TrimSpace(l))
		switch {
		case m == nil:
		case m[1] == "":
			set[m[2]] = m[3]
		default:
			alt[m[2]] = append(alt[m[2]], m[3])
		}
	}
	return set, alt
}

var unitVariableRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// expandExec expands a command line as systemd does for ExecStart: ${X}
// is one word (X's value), a word $X is X's value split at white space,
// and %S is root's /var/lib.
func expandExec(cmdline string, env map[string]string, varLib string) []string {
	var out []string
	for _, w := range strings.Fields(cmdline) {
		if m := unitVariableRE.FindStringSubmatch(w); m != nil && m[2] != "" && m[0] == w {
			out = append(out, strings.Fields(env[m[2]])...)
			continue
		}
		w = unitVariableRE.ReplaceAllStringFunc(w, func(v string) string {
			m := unitVariableRE.FindStringSubmatch(v)
			return env[m[1]+m[2]]
		})
		out = append(out, strings.ReplaceAll(w, "%S", varLib))
	}
	return out
}

// TestSystemdUnit: quorate.service has the sandboxing and settings an
// operator relies on (a user of its own, a read-only system but the data
// directory, no capabilities, LimitNOFILE, Restart=on-failure); its type
// matches the binary (exec: the node does not speak sd_notify); every
// variable its command line uses is set in quorate.env, which holds no
// secret; its command line, with quorate.env's values (each choice of
// CLUSTER), is one the built `quorate serve` accepts; and systemd-analyze
// verify finds nothing to say about it, with an exposure level of at most
// 2.0 in systemd-analyze security. Verify needs ExecStart's binary to
// exist: it runs on a copy of the unit whose ExecStart names the built
// binary instead of /usr/local/bin/quorate. Without systemd-analyze only
// that part is skipped.
func TestSystemdUnit(t *testing.T) {
	bin := quorateBinary(t)
	u := readUnit(t, unitFile)
	svc := u["Service"]
	for key, want := range map[string]string{
		"User": "quorate", "Group": "quorate", "StateDirectory": "quorate", "ReadWritePaths": "/var/lib/quorate",
		"ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes", "NoNewPrivileges": "yes",
		"CapabilityBoundingSet": "", "AmbientCapabilities": "", "LimitNOFILE": "65536", "Restart": "on-failure",
		"EnvironmentFile": unitEtc + "/quorate.env",
	} {
		if got := svc[key]; !slices.Equal(got, []string{want}) {
			t.Errorf("%s: %s=%q, want %s=%s", unitFile, key, got, key, want)
		}
	}
	if env := svc["Environment"]; len(env) > 0 {
		t.Errorf("%s: Environment=%q: the settings belong in quorate.env", unitFile, env)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	wantType := "exec"
	if bytes.Contains(b, []byte("NOTIFY_SOCKET")) {
		wantType = "notify" // the binary reads $NOTIFY_SOCKET: it speaks sd_notify
	}
	if got := svc["Type"]; !slices.Equal(got, []string{wantType}) {
		t.Errorf("%s: Type=%q, want %s", unitFile, got, wantType)
	}

	exec := svc["ExecStart"]
	if len(exec) != 1 {
		t.Fatalf("%s: ExecStart=%q, want one command", unitFile, exec)
	}
	words := strings.Fields(exec[0])
	if len(words) < 2 || words[0] != unitBinary || words[1] != "serve" {
		t.Fatalf("%s: ExecStart=%s, want %s serve ...", unitFile, exec[0], unitBinary)
	}
	if i := slices.Index(words, "--data-dir"); i < 0 || i+1 == len(words) || words[i+1] != unitDataDir {
		t.Errorf("%s: ExecStart has no --data-dir %s (StateDirectory=quorate)", unitFile, unitDataDir)
	}
	set, alt := readEnv(t, envFile)
	for _, m := range unitVariableRE.FindAllStringSubmatch(exec[0], -1) {
		if _, ok := set[m[1]+m[2]]; !ok {
			t.Errorf("%s: ExecStart uses $%s, which %s does not set", unitFile, m[1]+m[2], envFile)
		}
	}
	// systemctl show prints the environment: a secret (QUORATE_NODE_TOKEN,
	// which serve would read) belongs in a file the unit names.
	secret := regexp.MustCompile(`(?i)token|secret|password|key`)
	for k := range set {
		if secret.MatchString(k) {
			t.Errorf("%s: %s: a secret belongs in a file, which the unit names", envFile, k)
		}
	}

	// Every choice of the environment file makes a command line that serve
	// accepts: its flags exist and their values parse (--help then exits 0).
	choices := []map[string]string{set}
	for k, vs := range alt {
		for _, v := range vs {
			c := maps(set)
			c[k] = v
			choices = append(choices, c)
		}
	}
	if len(choices) < 2 {
		t.Errorf("%s: no commented-out alternative (CLUSTER=--join ...)", envFile)
	}
	for _, env := range choices {
		args := expandExec(exec[0], env, "/var/lib")
		if out, err := runErr(".", bin, append(args[1:], "--help")...); err != nil {
			t.Errorf("quorate %s --help: %v\n%s", strings.Join(args[1:], " "), err, out)
		}
	}

	t.Run("systemd-analyze", func(t *testing.T) { analyzeUnit(t, bin) })
}

// analyzeUnit runs systemd-analyze verify and security on a copy of the
// unit naming bin.
func analyzeUnit(t *testing.T, bin string) {
	sa := systemdAnalyze(t)
	unitText, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(t.TempDir(), "quorate.service")
	if err := os.WriteFile(copyPath, bytes.Replace(unitText, []byte("ExecStart="+unitBinary+" "), []byte("ExecStart="+bin+" "), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runErr(".", sa, "verify", copyPath); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
	if out, err := runErr(".", sa, "security", "--offline=true", "--threshold=20", copyPath); err != nil {
		t.Errorf("systemd-analyze security %s: exposure above 2.0 (%v)\n%s", unitFile, err, out)
	}
}

func maps(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// TestSystemdUnitCommandServes: the unit's command line, run as systemd
// would run it (quorate.env's values but the addresses, which are the
// test's loopback ports; /etc/quorate, %S and the binary's path moved into
// the test's directory), starts a TLS node with an access file that
// bootstraps a cluster, becomes ready and stops at SIGTERM, exiting 0.
func TestSystemdUnitCommandServes(t *testing.T) {
	bin := quorateBinary(t)
	svc := readUnit(t, unitFile)["Service"]
	env, _ := readEnv(t, envFile)
	dir := t.TempDir()
	etc, varLib := filepath.Join(dir, "etc"), filepath.Join(dir, "var-lib")
	if err := os.MkdirAll(filepath.Join(varLib, "quorate"), 0o700); err != nil {
		t.Fatal(err)
	}
	ca, err := certs.NewDevCA(filepath.Join(dir, "ca"), []string{env["NODE_ID"]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kp := ca.Nodes[env["NODE_ID"]]
	files := map[string]string{"tls/node.pem": kp.CertFile, "tls/node-key.pem": kp.KeyFile, "tls/ca.pem": ca.CAFile}
	for name, from := range files {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(etc, name), string(b))
	}
	writeFile(t, filepath.Join(etc, "access.yaml"), "callers:\n  - caller: "+certs.DevAdminIdentity+"\n    roles: [admin]\n  - caller: gateway\n    roles: [client]\n")
	sum := sha256.Sum256([]byte("a token the test never sends"))
	writeFile(t, filepath.Join(etc, "tokens.yaml"), "tokens:\n  - caller: gateway\n    sha256: "+hex.EncodeToString(sum[:])+"\n")
	base, err := nodetest.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	api := fmt.Sprintf("127.0.0.1:%d", base)
	env["API_ADDR"], env["RAFT_ADDR"] = api, fmt.Sprintf("127.0.0.1:%d", base+1)
	args := expandExec(strings.ReplaceAll(svc["ExecStart"][0], unitEtc+"/", etc+"/"), env, varLib)
	if args[0] != unitBinary || !slices.Contains(args, "--bootstrap") {
		t.Fatalf("command %q: want %s and quorate.env's CLUSTER=--bootstrap", args, unitBinary)
	}
	cmd := exec.Command(bin, args[1:]...)
	logs := new(lockedBuffer)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error // set before exited is closed
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(ca.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}}
	err = waitFor(60*time.Second, func() error {
		select {
		case <-exited:
			return stopWaiting{fmt.Errorf("exited: %v", waitErr)}
		default:
		}
		_, err := nodetest.Get(client, "https://"+api+"/readyz")
		return err
	})
	if err != nil {
		t.Fatalf("quorate %s: not ready over TLS: %v\n%s", strings.Join(args[1:], " "), err, logs.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("after SIGTERM: %v\n%s", waitErr, logs.String())
		}
	case <-time.After(60 * time.Second): // TimeoutStopSec=60
		t.Errorf("still running 60 s after SIGTERM\n%s", logs.String())
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}
