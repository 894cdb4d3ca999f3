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
		{"serve tiny max-request-bytes", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--max-request-bytes", "1000"}, []string{"--max-request-bytes"}},
		{"serve peer bound below API bound", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--max-request-bytes", "100000000", "--max-peer-request-bytes", "50000000"}, []string{"--max-peer-request-bytes"}},
		{"serve max-feature-level above the binary's", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--max-feature-level", "99"}, []string{"--max-feature-level"}},
		{"serve tiny migration-chunk-bytes", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--migration-chunk-bytes", "100"}, []string{"--migration-chunk-bytes"}},
		{"serve huge migration-chunk-bytes", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--migration-chunk-bytes", "5000000"}, []string{"--migration-chunk-bytes"}},
		{"serve long migration-progress-interval", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--migration-progress-interval", "1h"}, []string{"--migration-progress-interval"}},
		{"serve tiny request-body-timeout", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--request-body-timeout", "1ms"}, []string{"--request-body-timeout"}},
		{"serve log store (gone: the node's shared log is the one)", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--log-store", "shared"}, []string{"unknown flag: --log-store"}},
		{"serve max-inflight-bytes below two requests", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--max-inflight-bytes", "16MiB"}, []string{"--max-inflight-bytes"}},
		{"serve tiny memory-limit", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--memory-limit", "1MiB"}, []string{"--memory-limit"}},
		{"serve bad memory-limit", []string{"serve", "--id", "n1", "--data-dir", dir, "--bootstrap", "--memory-limit", "1GB"}, []string{"--memory-limit"}},
		{"dev tiny memory-limit", []string{"dev", "--dir", dir, "--memory-limit", "1000"}, []string{"--memory-limit"}},
		{"dev log store (gone)", []string{"dev", "--dir", dir, "--log-store", "shared"}, []string{"unknown flag: --log-store"}},
		{"dev zero heartbeat", []string{"dev", "--dir", dir, "--heartbeat-timeout", "0s"}, []string{"--heartbeat-timeout"}},
		{"dev zero nodes", []string{"dev", "--dir", dir, "--nodes", "0"}, []string{"--nodes"}},
		{"dev ten nodes", []string{"dev", "--dir", dir, "--nodes", "10"}, []string{"--nodes"}},
		{"dev overlapping ports", []string{"dev", "--dir", dir, "--api-port", "7000", "--raft-port", "7002"}, []string{"--api-port", "--raft-port"}},
		{"dev port too high", []string{"dev", "--dir", dir, "--api-port", "65535"}, []string{"--api-port"}},
		{"admit without policy and key", []string{"admit"}, []string{"--policy", "--key"}},
		{"admit without key", []string{"admit", "--policy", "p"}, []string{"--key"}},
		{"admit empty policy", []string{"admit", "--policy", "", "--key", "k"}, []string{"--policy"}},
		{"admit zero cost", []string{"admit", "--policy", "p", "--key", "k", "--cost", "0"}, []string{"--cost"}},
		{"admit bad output", []string{"admit", "--policy", "p", "--key", "k", "-o", "xml"}, []string{"--output"}},
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
		{"peek bad server list", []string{"peek", "--policy", "p", "--key", "k", "--server", "a:1,ftp://b"}, []string{"--server"}},
		{"refund without request id", []string{"refund", "--caller", "c", "--key", "k"}, []string{"--request-id"}},
		{"refund without key", []string{"refund", "--caller", "svc", "--request-id", "r", "--server", "127.0.0.1:1"}, []string{"--key", "is required", "--caller", "--request-id"}},
		{"refund bad output", []string{"refund", "--request-id", "r", "--key", "k", "-o", "xml"}, []string{"--output"}},
		{"lease acquire without policy and key", []string{"lease", "acquire"}, []string{"--policy", "--key"}},
		{"lease acquire without policy", []string{"lease", "acquire", "--key", "k"}, []string{"--policy"}},
		{"lease acquire empty key", []string{"lease", "acquire", "--policy", "p", "--key", ""}, []string{"--key"}},
		{"lease acquire bad ttl", []string{"lease", "acquire", "--policy", "p", "--key", "k", "--ttl", "soon"}, []string{"--ttl"}},
		{"lease acquire zero ttl", []string{"lease", "acquire", "--policy", "p", "--key", "k", "--ttl", "0s"}, []string{"--ttl", "between 1s and 24h"}},
		{"lease acquire ttl below 1s", []string{"lease", "acquire", "--policy", "p", "--key", "k", "--ttl", "500ms"}, []string{"--ttl", "500ms"}},
		{"lease acquire ttl over 24h", []string{"lease", "acquire", "--policy", "p", "--key", "k", "--ttl", "25h"}, []string{"--ttl", "25h"}},
		{"lease acquire max wait over 1m", []string{"lease", "acquire", "--policy", "p", "--key", "k", "--max-wait", "2m"}, []string{"--max-wait", "1m0s", "2m0s"}},
		{"lease acquire negative max wait", []string{"lease", "acquire", "--policy", "p", "--key", "k", "--max-wait", "-1s"}, []string{"--max-wait"}},
		{"lease acquire timeout within max wait", []string{"lease", "acquire", "--policy", "p", "--key", "k", "--max-wait", "10s", "--timeout", "10s"},
			[]string{"--timeout", "--max-wait", "longer"}},
		{"lease acquire bad output", []string{"lease", "acquire", "--policy", "p", "--key", "k", "-o", "xml"}, []string{"--output"}},
		{"lease acquire zero timeout", []string{"lease", "acquire", "--policy", "p", "--key", "k", "--timeout", "0s"}, []string{"--timeout"}},
		{"lease acquire bad server", []string{"lease", "acquire", "--policy", "p", "--key", "k", "--server", "a:1,ftp://b"}, []string{"--server"}},
		{"lease renew without lease id and fencing token", []string{"lease", "renew"}, []string{"--lease-id", "--fencing-token"}},
		{"lease renew without token", []string{"lease", "renew", "--lease-id", "L"}, []string{"--fencing-token"}},
		{"lease renew without lease id", []string{"lease", "renew", "--fencing-token", "3"}, []string{"--lease-id"}},
		{"lease renew zero token", []string{"lease", "renew", "--lease-id", "L", "--fencing-token", "0"}, []string{"--fencing-token"}},
		{"lease renew bad token", []string{"lease", "renew", "--lease-id", "L", "--fencing-token", "seven"}, []string{"--fencing-token"}},
		{"lease renew bad ttl", []string{"lease", "renew", "--lease-id", "L", "--fencing-token", "3", "--ttl", "-1m"}, []string{"--ttl"}},
		{"lease renew ttl not a duration", []string{"lease", "renew", "--lease-id", "L", "--fencing-token", "3", "--ttl", "60"}, []string{"--ttl"}},
		{"lease release without lease id and token", []string{"lease", "release"}, []string{"--lease-id", "--fencing-token"}},
		{"lease release without token", []string{"lease", "release", "--lease-id", "L"}, []string{"--fencing-token"}},
		{"lease release empty lease id", []string{"lease", "release", "--lease-id", "", "--fencing-token", "3"}, []string{"--lease-id"}},
		{"lease release negative token", []string{"lease", "release", "--lease-id", "L", "--fencing-token", "-3"}, []string{"--fencing-token"}},
		{"lease check without anything", []string{"lease", "check"}, []string{"--lease-id", "--fencing-token"}},
		{"lease check without token", []string{"lease", "check", "--lease-id", "L"}, []string{"--fencing-token"}},
		{"lease check without lease ID", []string{"lease", "check", "--fencing-token", "3"}, []string{"--lease-id"}},
		{"lease check bad output", []string{"lease", "check", "--lease-id", "L", "--fencing-token", "3", "-o", "xml"}, []string{"--output"}},
		{"lease unknown subcommand", []string{"lease", "steal"}, []string{"steal"}},
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
	if err != nil || !strings.Contains(out, "11 policies OK") {
		t.Fatalf("got %q, %v", out, err)
	}
}

func TestUnknownCommand(t *testing.T) {
	_, _, err := runCLI(t, "frobnicate")
	wantErrNaming(t, err, "frobnicate")
}
