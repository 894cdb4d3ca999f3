package main

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlagErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		args  []string
		flags []string // the error must name each
	}{
		{"serve bootstrap and join", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--join", "127.0.0.1:7070"}, []string{"--bootstrap", "--join"}},
		{"serve without id", []string{"serve", "--data-dir", dir, "--bootstrap"}, []string{"--id"}},
		{"serve bad log level", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--log-level", "loud"}, []string{"--log-level"}},
		{"serve election below heartbeat", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--heartbeat-timeout", "2s", "--election-timeout", "1s"}, []string{"--election-timeout"}},
		{"dev zero nodes", []string{"dev", "--dir", dir, "--nodes", "0"}, []string{"--nodes"}},
		{"dev ten nodes", []string{"dev", "--dir", dir, "--nodes", "10"}, []string{"--nodes"}},
		{"dev overlapping ports", []string{"dev", "--dir", dir, "--api-port", "7000", "--raft-port", "7002"}, []string{"--api-port", "--raft-port"}},
		{"dev port too high", []string{"dev", "--dir", dir, "--api-port", "65535"}, []string{"--api-port"}},
		{"admit without policy and key", []string{"admit"}, []string{"--policy", "--key"}},
		{"admit without key", []string{"admit", "--policy", "p"}, []string{"--key"}},
		{"admit empty policy", []string{"admit", "--policy", "", "--key", "k"}, []string{"--policy"}},
		{"admit zero cost", []string{"admit", "--policy", "p", "--key", "k", "--cost", "0"}, []string{"--cost"}},
		{"admit bad output", []string{"admit", "--policy", "p", "--key", "k", "-o", "yaml"}, []string{"--output"}},
		{"admit bad server", []string{"admit", "--policy", "p", "--key", "k", "--server", "ftp://x"}, []string{"--server"}},
		{"admit zero timeout", []string{"admit", "--policy", "p", "--key", "k", "--timeout", "0s"}, []string{"--timeout"}},
		{"admit also without key", []string{"admit", "--policy", "p", "--key", "k", "--also", "q"}, []string{"--also", "missing key"}},
		{"admit also empty key", []string{"admit", "--policy", "p", "--key", "k", "--also", "q:"}, []string{"--also", "missing key"}},
		{"admit also without policy", []string{"admit", "--policy", "p", "--key", "k", "--also", ":k2"}, []string{"--also", "missing policy"}},
		{"admit also zero cost", []string{"admit", "--policy", "p", "--key", "k", "--also", "q@0:k2"}, []string{"--also", "bad cost"}},
		{"admit also negative cost", []string{"admit", "--policy", "p", "--key", "k", "--also", "q@-1:k2"}, []string{"--also", "bad cost"}},
		{"admit also huge cost", []string{"admit", "--policy", "p", "--key", "k", "--also", "q@99999999999999999999:k2"}, []string{"--also", "bad cost"}},
		{"admit also empty cost", []string{"admit", "--policy", "p", "--key", "k", "--also", "q@:k2"}, []string{"--also", "cost"}},
		{"admit negative max-wait", []string{"admit", "--policy", "p", "--key", "k", "--max-wait", "-1s"}, []string{"--max-wait"}},
		{"admit max-wait over a minute", []string{"admit", "--policy", "p", "--key", "k", "--max-wait", "2m"}, []string{"--max-wait"}},
		{"admit bad max-wait", []string{"admit", "--policy", "p", "--key", "k", "--max-wait", "soon"}, []string{"--max-wait"}},
		{"peek without key", []string{"peek", "--policy", "p"}, []string{"--key"}},
		{"peek server list", []string{"peek", "--policy", "p", "--key", "k", "--server", "a:1,b:2"}, []string{"--server"}},
		{"refund without request id", []string{"refund", "--caller", "c"}, []string{"--request-id"}},
		{"refund bad output", []string{"refund", "--request-id", "r", "-o", "yaml"}, []string{"--output"}},
		{"policy get without name", []string{"policy", "get"}, []string{"NAME"}},
		{"policy get two names", []string{"policy", "get", "a", "b"}, []string{"NAME"}},
		{"policy delete without names", []string{"policy", "delete"}, []string{"NAME"}},
		{"policy apply without file", []string{"policy", "apply"}, []string{"--file"}},
		{"admin status bad output", []string{"admin", "status", "-o", "xml"}, []string{"--output"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCLI(t, tt.args...)
			wantErrNaming(t, err, tt.flags...)
		})
	}
}

func TestDevMissingPoliciesFile(t *testing.T) {
	dir := t.TempDir()
	// Named with --policies, a missing file is an error, before any node starts.
	_, _, err := runCLI(t, "dev", "--dir", dir, "--policies", filepath.Join(dir, "nope.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v, want fs.ErrNotExist", err)
	}
	wantErrNaming(t, err, "--policies")
}

func TestPolicyValidate(t *testing.T) {
	out, _, err := runCLI(t, "policy", "validate", "-f", "../../examples/policies.yaml")
	if err != nil || !strings.Contains(out, "8 policies OK") {
		t.Fatalf("got %q, %v", out, err)
	}
}

func TestServerURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7070":         "http://127.0.0.1:7070",
		"http://127.0.0.1:7070/": "http://127.0.0.1:7070",
		"https://q.example:443":  "https://q.example:443",
		" localhost:1 ":          "http://localhost:1",
	} {
		if got, err := serverURL(in); err != nil || got != want {
			t.Errorf("serverURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "ftp://x", "http://", "http://h:1/?q=1"} {
		if got, err := serverURL(in); err == nil {
			t.Errorf("serverURL(%q) = %q, want an error", in, got)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	_, _, err := runCLI(t, "frobnicate")
	wantErrNaming(t, err, "frobnicate")
}
