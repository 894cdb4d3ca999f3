package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/quorate/quorate/node/nodetest"
)

// requireSystemdAnalyzeEnv, set to 1, makes the unit's tests fail where
// systemd-analyze is not on the PATH rather than skip.
const requireSystemdAnalyzeEnv = "QUORATE_REQUIRE_SYSTEMD_ANALYZE"

// tool returns the path of the command name, which Debian's package pkg
// has. Without it the test is skipped, saying so, or fails where the
// environment variable requireEnv is 1.
func tool(t *testing.T, name, pkg, requireEnv string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := name + " is not on the PATH (Debian's " + pkg + " package has it; make test installs it where it can)"
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("%s, and %s=1", msg, requireEnv)
	}
	t.Skipf("%s: skipped (%s=1 makes this a failure)", msg, requireEnv)
	return ""
}

func promtool(t *testing.T) string {
	t.Helper()
	return tool(t, "promtool", "prometheus", nodetest.RequirePromtoolEnv)
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	return tool(t, "systemd-analyze", "systemd", requireSystemdAnalyzeEnv)
}

// run runs name with args in dir and returns its combined output, failing
// t when it exits with an error.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	out, err := runErr(dir, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// The quorate binary, built once for the package's tests into binDir,
// which TestMain removes.
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binError string
)

// quorateBinary builds ../cmd/quorate once and returns the binary's path.
func quorateBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		path := filepath.Join(binDir, "quorate")
		out, err := runErr("..", "go", "build", "-o", path, "./cmd/quorate")
		if err != nil {
			binError = "go build ./cmd/quorate: " + err.Error() + "\n" + out
			return
		}
		binPath = path
	})
	if binError != "" {
		t.Fatal(binError)
	}
	return binPath
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "quorate-deploy-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	stopCluster()
	os.RemoveAll(dir)
	os.Exit(code)
}

// lockedBuffer collects a process's output; safe for the process's copying
// goroutine and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
