package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
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

// skopeo (Debian's skopeo package), another implementation of the image
// formats (containers/image), reads the layout by its ref.name, copies
// every platform of it and the docker archive, checking each blob's
// digest. Skipped, saying so, without it.
func TestSkopeoReadsImage(t *testing.T) {
	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		t.Skip("skopeo is not on the PATH (Debian's skopeo package has it): the image is not read by a second implementation")
	}
	m := theImage(t)
	ref := "oci:" + filepath.Join(m.out, "oci") + ":" + testVersion
	out, err := command(".", skopeo, "inspect", ref)
	if err != nil {
		t.Fatalf("skopeo inspect %s: %v\n%s", ref, err, out)
	}
	var got struct {
		Digest       string
		Architecture string
		Os           string
		Labels       map[string]string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("skopeo inspect: %v\n%s", err, out)
	}
	p, err := layout.FromPath(filepath.Join(m.out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	top, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || got.Digest != top.Manifests[0].Digest.String() {
		t.Errorf("skopeo inspect %s: digest %s, the layout's index.json names %+v", ref, got.Digest, top.Manifests)
	}
	if got.Os != hostPlatform.OS || got.Architecture != hostPlatform.Architecture ||
		got.Labels["org.opencontainers.image.version"] != testVersion || got.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" {
		t.Errorf("skopeo inspect %s: %s/%s, labels %v", ref, got.Os, got.Architecture, got.Labels)
	}
	archive := "docker-archive:" + filepath.Join(m.out, fmt.Sprintf("quorate-%s-%s-%s.tar", testVersion, hostPlatform.OS, hostPlatform.Architecture))
	for i, src := range [][]string{{"--all", ref}, {archive}} {
		dst := "dir:" + filepath.Join(t.TempDir(), strconv.Itoa(i))
		args := append(append([]string{"copy", "-q"}, src...), dst)
		if out, err := command(".", skopeo, args...); err != nil {
			t.Errorf("skopeo %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
