package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// binaryFlags collects --binary OS/ARCH=PATH.
type binaryFlags []string

func (b *binaryFlags) String() string     { return strings.Join(*b, ",") }
func (b *binaryFlags) Set(v string) error { *b = append(*b, v); return nil }

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var (
		bins                                   binaryFlags
		version, revision, created, out, image string
		source, caCerts                        string
	)
	fs.Var(&bins, "binary", "OS/ARCH=PATH: the static quorate binary of a platform (repeat for each)")
	fs.StringVar(&version, "version", "", "the version the binaries are stamped with (git describe); the image's tag")
	fs.StringVar(&revision, "revision", "", "the commit built")
	fs.StringVar(&created, "created", "", "the commit's time (RFC 3339): every timestamp in the image")
	fs.StringVar(&source, "source", defaultSource, "the repository's URL (org.opencontainers.image.source)")
	fs.StringVar(&caCerts, "ca-certs", caPath, "the CA bundle to install as "+caPath)
	fs.StringVar(&image, "name", "quorate", "the image's name in the docker archives (NAME:VERSION)")
	fs.StringVar(&out, "out", "", "directory to write the OCI layout (oci/) and the docker archives into")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	s, err := readSpec(bins, version, revision, created, source, caCerts)
	if err != nil {
		return err
	}
	if out == "" {
		return errors.New("--out: required: the directory to write the image into")
	}
	tag, err := name.NewTag(image + ":" + version)
	if err != nil {
		return fmt.Errorf("--name %q with --version %q: not an image tag: %w", image, version, err)
	}
	return write(s, tag, out)
}

// readSpec checks the flags and reads the files they name.
func readSpec(bins []string, version, revision, created, source, caCerts string) (spec, error) {
	s := spec{Version: version, Revision: revision, Source: source}
	if version == "" {
		return s, errors.New("--version: required (the stamped version, git describe)")
	}
	if revision == "" {
		return s, errors.New("--revision: required (the commit built)")
	}
	t, err := time.Parse(time.RFC3339, created)
	if err != nil {
		return s, fmt.Errorf("--created %q: not an RFC 3339 time (the commit's time, 2006-01-02T15:04:05Z): %w", created, err)
	}
	s.Created = t.UTC()
	s.CACerts, err = os.ReadFile(caCerts)
	if err != nil {
		return s, fmt.Errorf("--ca-certs: %w (Debian's ca-certificates package installs %s)", err, caPath)
	}
	if !strings.Contains(string(s.CACerts), "-----BEGIN CERTIFICATE-----") {
		return s, fmt.Errorf("--ca-certs %s: holds no PEM certificate", caCerts)
	}
	if len(bins) == 0 {
		return s, errors.New("--binary: required: OS/ARCH=PATH of each platform's static quorate binary")
	}
	seen := map[string]bool{}
	for _, b := range bins {
		plat, path, ok := strings.Cut(b, "=")
		goos, goarch, ok2 := strings.Cut(plat, "/")
		if !ok || !ok2 || goos == "" || goarch == "" || path == "" {
			return s, fmt.Errorf("--binary %q: want OS/ARCH=PATH (linux/amd64=dist/quorate)", b)
		}
		if seen[plat] {
			return s, fmt.Errorf("--binary %q: %s given twice", b, plat)
		}
		seen[plat] = true
		data, err := os.ReadFile(path)
		if err != nil {
			return s, fmt.Errorf("--binary %s: %w", plat, err)
		}
		s.Binaries = append(s.Binaries, binary{Platform: v1.Platform{OS: goos, Architecture: goarch}, Data: data})
	}
	return s, nil
}

// write writes s's OCI layout and docker archives into out.
func write(s spec, tag name.Tag, out string) error {
	idx, images, err := s.index()
	if err != nil {
		return err
	}
	dir := filepath.Join(out, "oci")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	ann := map[string]string{
		"org.opencontainers.image.ref.name": s.Version,
		"io.containerd.image.name":          tag.String(),
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(ann)); err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s %s\n", dir, tag, d)
	for i, img := range images {
		pl := s.Binaries[i].Platform
		f := filepath.Join(out, fmt.Sprintf("quorate-%s-%s-%s.tar", s.Version, pl.OS, pl.Architecture))
		if err := tarball.WriteToFile(f, tag, img); err != nil {
			return fmt.Errorf("docker archive %s: %w", f, err)
		}
		d, err := img.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("wrote %s: %s %s %s\n", f, tag, pl, d)
	}
	return nil
}
