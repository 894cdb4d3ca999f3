package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The builder refuses bad flags, naming the flag, before it writes
// anything.
func TestBuilderRefusesBadFlags(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	bin := filepath.Join(dir, "quorate")
	notPEM := filepath.Join(dir, "not.pem")
	for path, data := range map[string]string{ca: "-----BEGIN CERTIFICATE-----\n", bin: "\x7fELF", notPEM: "hello"} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "out")
	good := map[string]string{
		"--version": "v0.1.0", "--revision": "abc", "--created": "2026-01-02T03:04:05Z",
		"--ca-certs": ca, "--binary": "linux/amd64=" + bin, "--out": out,
	}
	args := func(change map[string]string) []string {
		var a []string
		for _, k := range []string{"--version", "--revision", "--created", "--ca-certs", "--binary", "--out"} {
			v, ok := change[k]
			if !ok {
				v = good[k]
			}
			if v != "-" {
				a = append(a, k, v)
			}
		}
		return a
	}
	for _, c := range []struct {
		change map[string]string
		want   string
	}{
		{map[string]string{"--version": "-"}, "--version: required"},
		{map[string]string{"--revision": "-"}, "--revision: required"},
		{map[string]string{"--created": "yesterday"}, `--created "yesterday": not an RFC 3339 time`},
		{map[string]string{"--created": "-"}, `--created "": not an RFC 3339 time`},
		{map[string]string{"--ca-certs": filepath.Join(dir, "none.crt")}, "--ca-certs: open"},
		{map[string]string{"--ca-certs": notPEM}, "holds no PEM certificate"},
		{map[string]string{"--binary": "-"}, "--binary: required"},
		{map[string]string{"--binary": "linux-amd64=" + bin}, "want OS/ARCH=PATH"},
		{map[string]string{"--binary": "linux/amd64=" + filepath.Join(dir, "none")}, "--binary linux/amd64: open"},
		{map[string]string{"--out": "-"}, "--out: required"},
		{map[string]string{"--version": "v1 beta"}, `with --version "v1 beta": not an image tag`},
	} {
		err := run(args(c.change))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.change, err, c.want)
		}
	}
	twice := append(args(nil), "--binary", "linux/amd64="+bin)
	if err := run(twice); err == nil || !strings.Contains(err.Error(), "linux/amd64 given twice") {
		t.Errorf("a platform given twice: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused build wrote %s (%v)", out, err)
	}
}
