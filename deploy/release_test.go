package deploy

import (
	"bufio"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// `make release` builds a static binary per platform into DIST/<version>,
// stamped with the version, the commit and the build date, and writes a
// SHA256SUMS that checks them. The test builds the host's platform for real
// (a cross build of each platform costs minutes on this machine's two
// cores) and checks, through make's dry run, that the default platforms are
// the three a release promises, each built without cgo.
func TestMakeRelease(t *testing.T) {
	if _, err := runErr("..", "make", "--version"); err != nil {
		t.Skip("no make on this machine")
	}
	const version = "v0.0.0-releasetest"

	plan, err := runErr("..", "make", "-n", "release", "VERSION="+version, "DIST="+t.TempDir())
	if err != nil {
		t.Fatalf("make -n release: %v\n%s", err, plan)
	}
	for _, p := range []string{"linux/amd64", "linux/arm64", "darwin/arm64"} {
		if !strings.Contains(plan, p) {
			t.Errorf("make release does not build %s by default:\n%s", p, plan)
		}
	}
	if !strings.Contains(plan, "CGO_ENABLED=0") || !strings.Contains(plan, "-trimpath") {
		t.Errorf("make release does not build static, trimmed binaries:\n%s", plan)
	}

	dist := t.TempDir()
	host := runtime.GOOS + "/" + runtime.GOARCH
	out, err := runErr("..", "make", "release", "VERSION="+version, "DIST="+dist, "RELEASE_PLATFORMS="+host)
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	dir := filepath.Join(dist, version)
	name := fmt.Sprintf("quorate-%s-%s-%s", version, runtime.GOOS, runtime.GOARCH)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"SHA256SUMS", name}; !slices.Equal(names, want) {
		t.Fatalf("%s holds %q, want %q", dir, names, want)
	}

	// SHA256SUMS names the binary with its digest, as sha256sum -c reads it.
	sums := readSums(t, filepath.Join(dir, "SHA256SUMS"))
	if got, want := sums[name], fileSHA256(t, filepath.Join(dir, name)); got != want {
		t.Errorf("SHA256SUMS gives %s %q, the file's digest is %q", name, got, want)
	}

	bin := filepath.Join(dir, name)
	if runtime.GOOS == "linux" {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s is dynamically linked (program header %v)", name, p.Type)
			}
		}
	}
	v, err := runErr(dir, bin, "version")
	if err != nil {
		t.Fatalf("%s version: %v\n%s", name, err, v)
	}
	commit, err := runErr("..", "git", "rev-parse", "HEAD")
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v\n%s", err, commit)
	}
	for _, want := range []string{version, strings.TrimSpace(commit)} {
		if !strings.Contains(v, want) {
			t.Errorf("%s version prints %q, want it to name %s", name, v, want)
		}
	}
}

// readSums reads a sha256sum file: "<hex digest>  <name>" per line.
func readSums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		digest, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("%s: line %q is not \"<digest>  <name>\"", path, sc.Text())
		}
		sums[name] = digest
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sums
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
