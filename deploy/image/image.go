package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image holds and how it runs.
const (
	// uid and gid are the user and group quorate runs as (the distroless
	// images' "nonroot" numbers): not root, and numeric in the config, so a
	// runtime that refuses root (Kubernetes' runAsNonRoot) can tell.
	uid, gid = 65532, 65532
	userName = "quorate"
	// binaryPath is the binary, the image's entrypoint.
	binaryPath = "/quorate"
	// dataDir is the data directory, a volume owned by the user.
	dataDir = "/var/lib/quorate"
	// caPath is where Go's crypto/x509 looks first on Linux.
	caPath = "/etc/ssl/certs/ca-certificates.crt"

	license       = "Apache-2.0"
	defaultSource = "https://github.com/quorate/quorate"
)

// cmd is the default command: serve's usage, which exits 0. A node needs
// its ID, data directory, addresses and cluster, which only its operator
// knows: `docker run IMAGE serve --config /etc/quorate/quorate.yaml`.
var cmd = []string{"serve", "--help"}

// ports are the API and Raft ports the examples and `quorate dev` use.
var ports = []string{"7070/tcp", "7170/tcp"}

// spec is one build of the image: every input, so the same spec gives the
// same digests.
type spec struct {
	Version  string    // the version `quorate version` prints (git describe)
	Revision string    // the commit built
	Source   string    // the repository's URL
	Created  time.Time // the commit's time: every timestamp in the image
	CACerts  []byte    // the CA bundle, as caPath
	Binaries []binary  // one image per platform, in this order
}

// binary is the static quorate binary of one platform.
type binary struct {
	Platform v1.Platform // OS and Architecture
	Data     []byte
}

// file is one entry of a layer.
type file struct {
	Path     string // absolute; a directory's without its trailing slash
	Dir      bool
	Mode     int64 // permission bits
	UID, GID int
	Data     []byte
}

// recipe is everything one platform's image is made of. The tests change
// a recipe to make broken images and check that their checks catch each.
type recipe struct {
	Platform v1.Platform
	Created  time.Time
	Layers   [][]file // the base, then the binary
	Config   v1.Config
	History  []string // what made each layer
}

// labels are the image's OCI annotations, as labels of its config.
func (s spec) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "quorate",
		"org.opencontainers.image.version":  s.Version,
		"org.opencontainers.image.revision": s.Revision,
		"org.opencontainers.image.source":   s.Source,
		"org.opencontainers.image.licenses": license,
		"org.opencontainers.image.created":  s.Created.UTC().Format(time.RFC3339),
	}
}

// recipe is the image of platform b.
func (s spec) recipe(b binary) recipe {
	dir := func(path string, mode int64, id int) file {
		return file{Path: path, Dir: true, Mode: mode, UID: id, GID: id}
	}
	reg := func(path string, mode int64, data []byte) file {
		return file{Path: path, Mode: mode, Data: data}
	}
	base := []file{
		dir("/etc", 0o755, 0),
		reg("/etc/group", 0o644, []byte("root:x:0:\n"+fmt.Sprintf("%s:x:%d:\n", userName, gid))),
		reg("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\n"+
			fmt.Sprintf("%s:x:%d:%d:Quorate:%s:/sbin/nologin\n", userName, uid, gid, dataDir))),
		dir("/etc/ssl", 0o755, 0),
		dir("/etc/ssl/certs", 0o755, 0),
		reg(caPath, 0o644, s.CACerts),
		dir("/var", 0o755, 0),
		dir("/var/lib", 0o755, 0),
		dir(dataDir, 0o700, uid),
	}
	exposed := make(map[string]struct{}, len(ports))
	for _, p := range ports {
		exposed[p] = struct{}{}
	}
	return recipe{
		Platform: b.Platform,
		Created:  s.Created,
		Layers:   [][]file{base, {reg(binaryPath, 0o755, b.Data)}},
		Config: v1.Config{
			User:         fmt.Sprintf("%d:%d", uid, gid),
			Entrypoint:   []string{binaryPath},
			Cmd:          cmd,
			ExposedPorts: exposed,
			Volumes:      map[string]struct{}{dataDir: {}},
			Labels:       s.labels(),
		},
		History: []string{
			fmt.Sprintf("CA certificates, user %s (%d:%d), %s", userName, uid, gid, dataDir),
			fmt.Sprintf("%s %s (%s)", binaryPath, s.Version, s.Revision),
		},
	}
}

// image assembles r: OCI media types, one gzip layer per r.Layers, every
// timestamp r.Created.
func (r recipe) image() (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: r.Created.UTC()}
	adds := make([]mutate.Addendum, len(r.Layers))
	for i, files := range r.Layers {
		l, err := layer(files, r.Created)
		if err != nil {
			return nil, err
		}
		h := v1.History{Created: created}
		if i < len(r.History) {
			h.CreatedBy = r.History[i]
		}
		adds[i] = mutate.Addendum{Layer: l, History: h, MediaType: types.OCILayer}
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = r.Platform.OS, r.Platform.Architecture, r.Platform.Variant
	cf.Created = created
	cf.Config = r.Config
	return mutate.ConfigFile(img, cf)
}

// layer is the tar of files (parents before children), each stamped with
// the time mtime, gzipped.
func layer(files []file, mtime time.Time) (v1.Layer, error) {
	files = append([]file(nil), files...)
	sort.SliceStable(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		name := strings.TrimPrefix(f.Path, "/")
		if name == "" || strings.HasPrefix(f.Path, "//") {
			return nil, fmt.Errorf("image: file %q: not an absolute path below /", f.Path)
		}
		h := &tar.Header{
			Name:    name,
			Mode:    f.Mode,
			Uid:     f.UID,
			Gid:     f.GID,
			Uname:   owner(f.UID),
			Gname:   owner(f.GID),
			ModTime: mtime.UTC().Truncate(time.Second),
			Format:  tar.FormatPAX,
		}
		if f.Dir {
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("image: %s: %w", f.Path, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("image: %s: %w", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// owner is the name of the user or group id in the image's passwd and
// group files.
func owner(id int) string {
	switch id {
	case 0:
		return "root"
	case uid:
		return userName
	}
	return ""
}

// index is the image of every platform of s, as one OCI image index.
func (s spec) index() (v1.ImageIndex, []v1.Image, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var images []v1.Image
	for _, b := range s.Binaries {
		img, err := s.recipe(b).image()
		if err != nil {
			return nil, nil, fmt.Errorf("image: %s: %w", b.Platform, err)
		}
		p := b.Platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
		images = append(images, img)
	}
	idx = mutate.Annotations(idx, s.labels()).(v1.ImageIndex)
	return idx, images, nil
}
