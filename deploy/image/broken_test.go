package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The checks of TestMakeImage catch each way an image can be broken: the
// builder's recipe passes them all, and each change to it fails the check
// named. The images are built around a small static binary (gzip of the
// real one, under -race, costs seconds each); the real one's stamps are
// checked against another version directly.
func TestChecksCatchBrokenImages(t *testing.T) {
	m := theImage(t)
	quorate := binaryOf(t, m)
	wrong := m.want(t)
	wrong.version = "v9.9.9"
	if ps := checkBinary(quorate, wrong); len(ps) != 1 || !strings.Contains(ps[0], `no line "quorate v9.9.9"`) {
		t.Errorf("the binary's version stamp, checked against another version: %q", ps)
	}

	s := spec{Version: testVersion, Revision: m.revision, Source: defaultSource, Created: m.created,
		CACerts: m.caCerts, Binaries: []binary{{Platform: hostPlatform, Data: smallStaticBinary(t)}}}
	w := m.want(t)
	w.runDir = "" // the small binary is not quorate: it is not run
	good := s.recipe(s.Binaries[0])
	img, err := good.image()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkImage(img, w) {
		t.Errorf("the builder's own image: %s", p)
	}

	fileAt := func(t *testing.T, r *recipe, path string) *file {
		for i := range r.Layers {
			for j := range r.Layers[i] {
				if r.Layers[i][j].Path == path {
					return &r.Layers[i][j]
				}
			}
		}
		t.Fatalf("the recipe has no %s", path)
		return nil
	}
	cases := []struct {
		name   string
		change func(*testing.T, *recipe)
		want   want
		caught string
	}{
		{"runs as root", func(t *testing.T, r *recipe) { r.Config.User = "0:0" }, w, "config User"},
		{"user by name", func(t *testing.T, r *recipe) { r.Config.User = "quorate" }, w, "config User"},
		{"other entrypoint", func(t *testing.T, r *recipe) { r.Config.Entrypoint = []string{"/bin/sh"} }, w, "config Entrypoint"},
		{"no default command", func(t *testing.T, r *recipe) { r.Config.Cmd = nil }, w, "config Cmd"},
		{"one port", func(t *testing.T, r *recipe) { delete(r.Config.ExposedPorts, "7170/tcp") }, w, "config ExposedPorts"},
		{"no volume", func(t *testing.T, r *recipe) { r.Config.Volumes = nil }, w, "config Volumes"},
		{"no license", func(t *testing.T, r *recipe) { delete(r.Config.Labels, "org.opencontainers.image.licenses") }, w, "config Labels"},
		{"build time", func(t *testing.T, r *recipe) { r.Created = r.Created.Add(time.Second) }, w, "mtime"},
		{"platform", func(t *testing.T, r *recipe) { r.Platform.Architecture = "riscv64" }, w, "config platform"},
		{"binary not executable", func(t *testing.T, r *recipe) { fileAt(t, r, "/quorate").Mode = 0o644 }, w, "quorate: layer"},
		{"binary owned by the user", func(t *testing.T, r *recipe) { fileAt(t, r, "/quorate").UID = 65532 }, w, "quorate: layer"},
		{"data dir owned by root", func(t *testing.T, r *recipe) { fileAt(t, r, "/var/lib/quorate").UID = 0 }, w, "var/lib/quorate/: layer"},
		{"data dir not a directory", func(t *testing.T, r *recipe) { fileAt(t, r, "/var/lib/quorate").Dir = false }, w, "layers lack var/lib/quorate/"},
		{"another CA bundle", func(t *testing.T, r *recipe) { fileAt(t, r, caPath).Data = []byte("x") }, w, "CA bundle"},
		{"no CA bundle", func(t *testing.T, r *recipe) { r.Layers[0] = without(r.Layers[0], caPath) }, w, "layers lack etc/ssl/certs/ca-certificates.crt"},
		{"no passwd user", func(t *testing.T, r *recipe) {
			fileAt(t, r, "/etc/passwd").Data = []byte("root:x:0:0:root:/root:/sbin/nologin\n")
		}, w, "/etc/passwd has no line"},
		{"no group", func(t *testing.T, r *recipe) { fileAt(t, r, "/etc/group").Data = []byte("root:x:0:\n") }, w, "/etc/group has no line"},
		{"a shell", func(t *testing.T, r *recipe) { r.Layers[0] = append(r.Layers[0], file{Path: "/bin/sh", Mode: 0o755}) }, w, "layers hold bin/sh"},
		{"binary in the base layer", func(t *testing.T, r *recipe) {
			r.Layers[0] = append(r.Layers[0], r.Layers[1]...)
			r.Layers = r.Layers[:1]
		}, w, "quorate: layer 0"},
		{"not an ELF", func(t *testing.T, r *recipe) { fileAt(t, r, "/quorate").Data = []byte("#!/bin/sh\n") }, w, "not an ELF"},
		{"dynamically linked", func(t *testing.T, r *recipe) { fileAt(t, r, "/quorate").Data = dynamicELF(t) }, w, "not static"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			r := s.recipe(s.Binaries[0])
			c.change(t, &r)
			img, err := r.image()
			if err != nil {
				t.Fatal(err)
			}
			problems := checkImage(img, c.want)
			for _, p := range problems {
				if strings.Contains(p, c.caught) {
					return
				}
			}
			t.Errorf("no check caught it (want one saying %q); the checks said %q", c.caught, problems)
		})
	}

	t.Run("docker_media_types", func(t *testing.T) {
		if ps := checkImage(mutate.MediaType(img, types.DockerManifestSchema2), w); len(ps) == 0 || !strings.Contains(ps[0], "manifest media type") {
			t.Errorf("a Docker manifest passed as OCI: %q", ps)
		}
	})
}

func without(files []file, path string) []file {
	var out []file
	for _, f := range files {
		if f.Path != path {
			out = append(out, f)
		}
	}
	return out
}

// binaryOf is the binary `make image` built for the host: /quorate of m's
// image.
func binaryOf(t *testing.T, m made) []byte {
	t.Helper()
	img := layoutImage(t, filepath.Join(m.out, "oci"))
	files, problems := readLayers(img, m.created)
	if f, ok := files["quorate"]; ok && len(problems) == 0 {
		return f.data
	}
	t.Fatalf("the image made has no /quorate to build others from (%q)", problems)
	return nil
}

// smallStaticBinary is a static executable of the host's platform, built
// from a main that does nothing.
func smallStaticBinary(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":  "module small\n\ngo 1.26\n",
		"main.go": "package main\n\nfunc main() {}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", "small", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+hostPlatform.OS, "GOARCH="+hostPlatform.Architecture, "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of a small static binary: %v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "small"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// dynamicELF is a dynamically linked executable of this machine's.
func dynamicELF(t *testing.T) []byte {
	t.Helper()
	for _, name := range []string{"sh", "ls", "true", "env"} {
		path, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		f, err := elf.Open(path)
		if err != nil {
			continue
		}
		dynamic := false
		for _, p := range f.Progs {
			dynamic = dynamic || p.Type == elf.PT_INTERP
		}
		f.Close()
		if dynamic {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
	}
	t.Skip("no dynamically linked executable on this machine to build a broken image of")
	return nil
}
