package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// repo is the repository's root, where `make image` runs.
const repo = "../.."

// testVersion is the version the tests stamp.
const testVersion = "v0.0.0-imagetest"

var hostPlatform = v1.Platform{OS: "linux", Architecture: runtime.GOARCH}

// made is one `make image` of the host's platform, shared by the tests.
type made struct {
	out      string // $(DIST)/image/<version>
	revision string
	created  time.Time
	caCerts  []byte
}

var (
	tmpDir   string
	makeOnce sync.Once
	madeOnce made
	makeErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "quorate-image-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmpDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// makeImage runs `make image` for the host's platform into a new DIST and
// returns $(DIST)/image/<version>.
func makeImage(t *testing.T, dist string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on this machine")
	}
	out, err := command(repo, "make", "image", "VERSION="+testVersion, "DIST="+dist,
		"IMAGE_PLATFORMS="+hostPlatform.OS+"/"+hostPlatform.Architecture)
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	return filepath.Join(dist, "image", testVersion)
}

// theImage is the image the tests share, made once.
func theImage(t *testing.T) made {
	t.Helper()
	makeOnce.Do(func() {
		rev, err := command(repo, "git", "rev-parse", "HEAD")
		if err != nil {
			makeErr = fmt.Errorf("git rev-parse HEAD: %v\n%s", err, rev)
			return
		}
		ct, err := command(repo, "git", "log", "-1", "--format=%ct")
		if err != nil {
			makeErr = fmt.Errorf("git log: %v\n%s", err, ct)
			return
		}
		secs, err := strconv.ParseInt(strings.TrimSpace(ct), 10, 64)
		if err != nil {
			makeErr = fmt.Errorf("git log -1 --format=%%ct: %q: %v", ct, err)
			return
		}
		ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
		if err != nil {
			makeErr = fmt.Errorf("the build machine's CA bundle: %v", err)
			return
		}
		madeOnce = made{revision: strings.TrimSpace(rev), created: time.Unix(secs, 0).UTC(), caCerts: ca}
		madeOnce.out = makeImage(t, filepath.Join(tmpDir, "dist"))
	})
	if makeErr != nil {
		t.Fatal(makeErr)
	}
	if madeOnce.out == "" {
		t.Fatal("make image failed in an earlier test")
	}
	return madeOnce
}

func (m made) want(t *testing.T) want {
	return want{version: testVersion, revision: m.revision, created: m.created, caCerts: m.caCerts,
		platform: hostPlatform, runDir: t.TempDir()}
}

// command runs name with args in dir and returns its combined output. A
// make of the tests' is not given the variables of a make that runs them.
func command(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// `make image` writes an OCI layout whose index.json names the version,
// an index of the platforms, and a `docker load` archive of each: both read
// back here, each image checked whole (config, files, binary).
func TestMakeImage(t *testing.T) {
	m := theImage(t)
	w := m.want(t)

	img := layoutImage(t, filepath.Join(m.out, "oci"))
	for _, problem := range checkImage(img, w) {
		t.Errorf("OCI layout, %s: %s", hostPlatform, problem)
	}

	archive := filepath.Join(m.out, fmt.Sprintf("quorate-%s-%s-%s.tar", testVersion, hostPlatform.OS, hostPlatform.Architecture))
	tag, err := name.NewTag("quorate:" + testVersion)
	if err != nil {
		t.Fatal(err)
	}
	dimg, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatalf("the docker archive has no image quorate:%s: %v", testVersion, err)
	}
	// The archive holds the image's config and its compressed layers (its
	// manifest the reader makes up, with Docker's media types): the same
	// blobs as the layout's image, checked whole above, each read here.
	if a, b := configOf(t, img), configOf(t, dimg); !bytes.Equal(a, b) {
		t.Errorf("the docker archive's config differs from the layout's:\n%s\n%s", b, a)
	}
	if a, b := layerDigests(t, img), layerDigests(t, dimg); !slices.Equal(a, b) {
		t.Errorf("the docker archive's layers are %v, the layout's %v", b, a)
	}
}

func configOf(t *testing.T, img v1.Image) []byte {
	t.Helper()
	c, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// layerDigests are the digests of img's compressed layers, each computed
// from its bytes.
func layerDigests(t *testing.T, img v1.Image) []v1.Hash {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var ds []v1.Hash
	for _, l := range ls {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		d, _, err := v1.SHA256(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	return ds
}

// layoutImage reads the OCI layout dir: its index.json must name one image
// index, as ref.name the version, and that index one image, the host's
// platform's, which it returns.
func layoutImage(t *testing.T, dir string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 {
		t.Fatalf("index.json has %d manifests, want 1 (the index of every platform)", len(tm.Manifests))
	}
	d := tm.Manifests[0]
	if d.MediaType != types.OCIImageIndex {
		t.Fatalf("index.json names a %q, want an image index", d.MediaType)
	}
	if got := d.Annotations["org.opencontainers.image.ref.name"]; got != testVersion {
		t.Fatalf("index.json's ref.name is %q, want %q (skopeo's oci:DIR:%s)", got, testVersion, testVersion)
	}
	if got := d.Annotations["io.containerd.image.name"]; got != "quorate:"+testVersion {
		t.Fatalf("index.json's io.containerd.image.name is %q, want quorate:%s", got, testVersion)
	}
	idx, err := top.ImageIndex(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || !im.Manifests[0].Platform.Equals(hostPlatform) {
		t.Fatalf("the image index holds %+v, want one image for %s", im.Manifests, hostPlatform)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// A second `make image` of the same commit gives the same digests and the
// same archive, byte for byte.
func TestMakeImageReproducible(t *testing.T) {
	m := theImage(t)
	again := makeImage(t, t.TempDir())
	for _, f := range []string{"oci/index.json", fmt.Sprintf("quorate-%s-%s-%s.tar", testVersion, hostPlatform.OS, hostPlatform.Architecture)} {
		a, errA := os.ReadFile(filepath.Join(m.out, f))
		b, errB := os.ReadFile(filepath.Join(again, f))
		if errA != nil || errB != nil {
			t.Fatalf("%s: %v, %v", f, errA, errB)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("two builds of the same commit give different %s:\n%s\n%s", f, head(a), head(b))
		}
	}
}

func head(b []byte) []byte {
	return b[:min(len(b), 600)]
}

// make image builds linux/amd64 and linux/arm64 by default (the tests
// build the host's alone: a cross build costs minutes here), each static,
// and stops, naming it, without a CA bundle.
func TestMakeImagePlan(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on this machine")
	}
	plan, err := command(repo, "make", "-n", "image", "VERSION="+testVersion, "DIST="+t.TempDir())
	if err != nil {
		t.Fatalf("make -n image: %v\n%s", err, plan)
	}
	for _, s := range []string{"linux/amd64", "linux/arm64", "CGO_ENABLED=0", "-trimpath", "stampVersion=" + testVersion} {
		if !strings.Contains(plan, s) {
			t.Errorf("make image's plan lacks %q:\n%s", s, plan)
		}
	}
	missing := filepath.Join(t.TempDir(), "no-such-bundle.crt")
	out, err := command(repo, "make", "image", "VERSION="+testVersion, "DIST="+t.TempDir(), "CA_CERTS="+missing)
	if err == nil || !strings.Contains(out, "no CA bundle at "+missing) {
		t.Errorf("make image with CA_CERTS=%s: %v, want a failure naming the file:\n%s", missing, err, out)
	}
}
