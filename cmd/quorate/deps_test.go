package main

import (
	"debug/buildinfo"
	"os/exec"
	"strings"
	"testing"
)

// benchOnly reports whether the package or module path belongs to the load
// generator alone: a Redis client or a Gubernator package.
func benchOnly(path string) bool {
	return strings.HasPrefix(path, "github.com/redis/") || strings.Contains(strings.ToLower(path), "gubernator")
}

// The server binary serves: it imports no Redis and no Gubernator package
// (go list -deps), its build lists no such module (go version -m reads the
// same build information), and it has no bench command; the load
// generator and its drivers are quorate-bench's.
func TestServerBinaryLinksNoLoadGenerator(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to list the imports with: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 10 {
		t.Fatalf("go list -deps listed %d packages: %q", len(pkgs), out)
	}
	for _, p := range pkgs {
		if benchOnly(p) {
			t.Errorf("cmd/quorate imports %s, which only quorate-bench needs", p)
		}
	}
	info, err := buildinfo.ReadFile(buildQuorate(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Deps) == 0 {
		t.Fatal("the binary's build information lists no module")
	}
	for _, m := range info.Deps {
		if benchOnly(m.Path) {
			t.Errorf("bin/quorate links module %s %s, which only quorate-bench needs", m.Path, m.Version)
		}
	}
	_, _, err = runCLI(t, "bench", "--policy", "p")
	wantErrNaming(t, err, "unknown command", "bench")
}
