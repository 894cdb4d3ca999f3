package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// want is what a good image of one platform is, written out here rather
// than taken from the builder, so that a mistake in the builder shows.
type want struct {
	version, revision string
	created           time.Time
	caCerts           []byte
	platform          v1.Platform
	// runDir, when not "", is where the image's binary is written and run
	// (`version`): the platform is the host's.
	runDir string
}

// entry is what a good image holds at one path.
type entry struct {
	layer    int // 0, the base, or 1, the binary's
	typ      byte
	mode     int64
	uid, gid int
}

var wantEntries = map[string]entry{
	"etc/":                              {0, tar.TypeDir, 0o755, 0, 0},
	"etc/group":                         {0, tar.TypeReg, 0o644, 0, 0},
	"etc/passwd":                        {0, tar.TypeReg, 0o644, 0, 0},
	"etc/ssl/":                          {0, tar.TypeDir, 0o755, 0, 0},
	"etc/ssl/certs/":                    {0, tar.TypeDir, 0o755, 0, 0},
	"etc/ssl/certs/ca-certificates.crt": {0, tar.TypeReg, 0o644, 0, 0},
	"var/":                              {0, tar.TypeDir, 0o755, 0, 0},
	"var/lib/":                          {0, tar.TypeDir, 0o755, 0, 0},
	"var/lib/quorate/":                  {0, tar.TypeDir, 0o700, 65532, 65532},
	"quorate":                           {1, tar.TypeReg, 0o755, 0, 0},
}

// checkImage returns every way img differs from a good image as w
// describes it; none for a good one.
func checkImage(img v1.Image, w want) []string {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }

	if mt, err := img.MediaType(); err != nil || mt != types.OCIManifestSchema1 {
		fail("manifest media type %q (%v), want %q", mt, err, types.OCIManifestSchema1)
	}
	m, err := img.Manifest()
	if err != nil {
		return append(bad, fmt.Sprintf("manifest: %v", err))
	}
	if m.Config.MediaType != types.OCIConfigJSON {
		fail("config media type %q, want %q", m.Config.MediaType, types.OCIConfigJSON)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return append(bad, fmt.Sprintf("config: %v", err))
	}
	if cf.OS != w.platform.OS || cf.Architecture != w.platform.Architecture {
		fail("config platform %s/%s, want %s", cf.OS, cf.Architecture, w.platform)
	}
	if !cf.Created.Time.Equal(w.created) {
		fail("config created %s, want the commit's time %s", cf.Created.Time, w.created)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		fail("config User %q, want the numeric non-root 65532:65532", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/quorate"}) {
		fail("config Entrypoint %q, want [/quorate]", c.Entrypoint)
	}
	if !slices.Equal(c.Cmd, []string{"serve", "--help"}) {
		fail("config Cmd %q, want [serve --help]", c.Cmd)
	}
	if got := slices.Sorted(maps.Keys(c.ExposedPorts)); !slices.Equal(got, []string{"7070/tcp", "7170/tcp"}) {
		fail("config ExposedPorts %q, want 7070/tcp and 7170/tcp", got)
	}
	if got := slices.Sorted(maps.Keys(c.Volumes)); !slices.Equal(got, []string{"/var/lib/quorate"}) {
		fail("config Volumes %q, want /var/lib/quorate", got)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.title":    "quorate",
		"org.opencontainers.image.version":  w.version,
		"org.opencontainers.image.revision": w.revision,
		"org.opencontainers.image.source":   "https://github.com/quorate/quorate",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.created":  w.created.UTC().Format(time.RFC3339),
	}
	if !maps.Equal(c.Labels, wantLabels) {
		fail("config Labels %v, want %v", c.Labels, wantLabels)
	}
	if len(cf.History) != len(m.Layers) {
		fail("config History has %d entries for %d layers", len(cf.History), len(m.Layers))
	}
	for i, h := range cf.History {
		if !h.Created.Time.Equal(w.created) {
			fail("config History[%d] created %s, want %s", i, h.Created.Time, w.created)
		}
	}

	files, problems := readLayers(img, w.created)
	bad = append(bad, problems...)
	for _, name := range slices.Sorted(maps.Keys(wantEntries)) {
		if _, ok := files[name]; !ok {
			fail("layers lack %s", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		f, e := files[name], wantEntries[name]
		if _, ok := wantEntries[name]; !ok {
			fail("layers hold %s, which a good image does not", name)
			continue
		}
		h := f.hdr
		if f.layer != e.layer || h.Typeflag != e.typ || h.Mode != e.mode || h.Uid != e.uid || h.Gid != e.gid {
			fail("%s: layer %d, type %q, mode %#o, owner %d:%d; want layer %d, type %q, mode %#o, owner %d:%d",
				name, f.layer, h.Typeflag, h.Mode, h.Uid, h.Gid, e.layer, e.typ, e.mode, e.uid, e.gid)
		}
	}
	if f, ok := files["etc/passwd"]; ok {
		for _, line := range []string{"root:x:0:0:", "quorate:x:65532:65532:"} {
			if !hasLinePrefix(f.data, line) {
				fail("/etc/passwd has no line %q...:\n%s", line, f.data)
			}
		}
	}
	if f, ok := files["etc/group"]; ok {
		for _, line := range []string{"root:x:0:", "quorate:x:65532:"} {
			if !hasLinePrefix(f.data, line) {
				fail("/etc/group has no line %q:\n%s", line, f.data)
			}
		}
	}
	if f, ok := files["etc/ssl/certs/ca-certificates.crt"]; ok {
		if !bytes.Equal(f.data, w.caCerts) {
			fail("the CA bundle (%d bytes) is not the build machine's (%d bytes)", len(f.data), len(w.caCerts))
		} else if !x509.NewCertPool().AppendCertsFromPEM(f.data) {
			fail("the CA bundle holds no certificate")
		}
	}
	if f, ok := files["quorate"]; ok {
		bad = append(bad, checkBinary(f.data, w)...)
	}
	return bad
}

// checkBinary checks that data is a static ELF of w's platform and, where
// it runs here, that its `version` prints w's stamps.
func checkBinary(data []byte, w want) []string {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return []string{fmt.Sprintf("/quorate is not an ELF file: %v", err)}
	}
	var bad []string
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[w.platform.Architecture]
	if f.Machine != machine {
		bad = append(bad, fmt.Sprintf("/quorate is an ELF for %v, want %v (%s)", f.Machine, machine, w.platform.Architecture))
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			bad = append(bad, fmt.Sprintf("/quorate is not static: it has a %v program header", p.Type))
			break
		}
	}
	if w.runDir == "" || len(bad) > 0 {
		return bad
	}
	bin := filepath.Join(w.runDir, "quorate")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		return append(bad, err.Error())
	}
	defer os.Remove(bin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").CombinedOutput()
	if err != nil {
		return append(bad, fmt.Sprintf("/quorate version: %v\n%s", err, out))
	}
	for _, line := range []string{
		"quorate " + w.version,
		"commit:      " + w.revision,
		"build date:  " + w.created.UTC().Format(time.RFC3339),
	} {
		if !hasLinePrefix(out, line) {
			bad = append(bad, fmt.Sprintf("/quorate version prints no line %q:\n%s", line, out))
		}
	}
	return bad
}

func hasLinePrefix(data []byte, prefix string) bool {
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

// layerFile is one entry of an image's layers.
type layerFile struct {
	layer int
	hdr   *tar.Header
	data  []byte
}

// readLayers reads every layer of img: the entries by name, and what is
// wrong with them as entries of a reproducible OCI image (a media type,
// a timestamp, a name twice).
func readLayers(img v1.Image, created time.Time) (map[string]layerFile, []string) {
	var bad []string
	layers, err := img.Layers()
	if err != nil {
		return nil, []string{fmt.Sprintf("layers: %v", err)}
	}
	files := map[string]layerFile{}
	for i, l := range layers {
		if mt, err := l.MediaType(); err != nil || (mt != types.OCILayer && mt != types.DockerLayer) {
			bad = append(bad, fmt.Sprintf("layer %d media type %q (%v), want a gzip layer", i, mt, err))
		}
		rc, err := l.Uncompressed()
		if err != nil {
			return files, append(bad, fmt.Sprintf("layer %d: %v", i, err))
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				bad = append(bad, fmt.Sprintf("layer %d: %v", i, err))
				break
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				bad = append(bad, fmt.Sprintf("layer %d: %s: %v", i, h.Name, err))
			}
			if !h.ModTime.Equal(created) {
				bad = append(bad, fmt.Sprintf("layer %d: %s: mtime %s, want the commit's time %s", i, h.Name, h.ModTime.UTC(), created))
			}
			if _, ok := files[h.Name]; ok {
				bad = append(bad, fmt.Sprintf("layer %d: %s again", i, h.Name))
			}
			files[h.Name] = layerFile{layer: i, hdr: h, data: data}
		}
		rc.Close()
	}
	return files, bad
}
