package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// containerEngine is the first of docker and podman that is on the PATH
// and answers `info`; without one the test is skipped, naming what is
// missing.
func containerEngine(t *testing.T) string {
	t.Helper()
	var missing []string
	for _, name := range []string{"docker", "podman"} {
		path, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name+" is not on the PATH")
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, path, "info").CombinedOutput()
		cancel()
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s is on the PATH but `%s info` fails (%v: %s)", name, name, err, lastLine(out)))
			continue
		}
		return path
	}
	t.Skipf("no container engine to run the image in: %s", strings.Join(missing, "; "))
	return ""
}

// lastLine is b's last line, where a command says what went wrong.
func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	return s[strings.LastIndex(s, "\n")+1:]
}

// Where the machine has a container engine, the `docker load` archive
// loads, its image runs `version` printing the stamps, and its default
// command (serve --help) exits 0.
func TestImageRunsInContainerEngine(t *testing.T) {
	engine := containerEngine(t)
	m := theImage(t)
	archive := filepath.Join(m.out, fmt.Sprintf("quorate-%s-%s-%s.tar", testVersion, hostPlatform.OS, hostPlatform.Architecture))
	ref := "quorate:" + testVersion
	if out, err := command(".", engine, "load", "-i", archive); err != nil {
		t.Fatalf("%s load -i %s: %v\n%s", engine, archive, err, out)
	}
	t.Cleanup(func() { command(".", engine, "rmi", ref) })

	out, err := command(".", engine, "run", "--rm", ref, "version")
	if err != nil {
		t.Fatalf("%s run %s version: %v\n%s", engine, ref, err, out)
	}
	for _, line := range []string{"quorate " + testVersion, "commit:      " + m.revision} {
		if !hasLinePrefix([]byte(out), line) {
			t.Errorf("%s run %s version prints no line %q:\n%s", engine, ref, line, out)
		}
	}
	out, err = command(".", engine, "run", "--rm", ref)
	if err != nil || !strings.Contains(out, "--data-dir") {
		t.Errorf("%s run %s (serve --help): %v, want serve's usage:\n%s", engine, ref, err, out)
	}
	out, err = command(".", engine, "run", "--rm", "--entrypoint", "/quorate", ref, "serve", "--print-config", "--id", "n1", "--data-dir", "/var/lib/quorate", "--bootstrap")
	if err != nil {
		t.Errorf("%s run %s serve --print-config: %v\n%s", engine, ref, err, out)
	}
}
