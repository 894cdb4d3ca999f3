package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quorate/quorate/devcluster"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// A node started with --debug-clock-file stamps entries with the file's
// offset, and takes a new offset from it on SIGUSR1 without a restart.
func TestServeClockFileReloadsOnSIGUSR1(t *testing.T) {
	dir := t.TempDir()
	clock := filepath.Join(dir, "clock")
	if err := os.WriteFile(clock, []byte("1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePortRange(t, 2)
	api := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr devcluster.Output
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--id", "n1", "--data-dir", filepath.Join(dir, "n1"), "--bootstrap",
			"--api-addr", api, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", port+1), "--log-level", "warn",
			"--debug-clock-file", clock}, &devcluster.Output{}, &stderr)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v\n%s", err, stderr.String())
		}
	}()

	policies := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(policies, []byte("policies:\n  - name: p\n    algorithm: token_bucket\n    limit: 1000\n    period: 1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Until the node serves and leads, applying fails: retry.
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, errOut, err := runCLI(t, "policy", "apply", "-f", policies, "--server", api)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("policy apply: %v\n%s\nserve: %s", err, errOut, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// decidedAhead is how far ahead of the local clock a decision is stamped.
	decidedAhead := func() time.Duration {
		t.Helper()
		var d quoratev1.AdmitResponse
		before := time.Now()
		mustRunJSON(t, &d, "admit", "--server", api, "--policy", "p", "--key", "k", "-o", "json")
		return d.GetDecidedAt().AsTime().Sub(before)
	}
	if ahead := decidedAhead(); ahead < time.Hour || ahead > time.Hour+time.Minute {
		t.Fatalf("decided %v ahead of the clock with 1h in the clock file", ahead)
	}

	if err := os.WriteFile(clock, []byte("3h"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ahead := decidedAhead()
		if ahead >= 3*time.Hour && ahead < 3*time.Hour+time.Minute {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("decided %v ahead of the clock 10s after SIGUSR1 with 3h in the clock file", ahead)
		}
	}

	// A file that does not parse leaves the offset alone.
	if err := os.WriteFile(clock, []byte("soon"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), "clock offset stays 3h0m0s"); {
		if time.Now().After(deadline) {
			t.Fatalf("no complaint about the bad clock file:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ahead := decidedAhead(); ahead < 3*time.Hour {
		t.Fatalf("decided %v ahead of the clock after a bad clock file, want the 3h kept", ahead)
	}
}

func TestServeClockFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "clock")
	if err := os.WriteFile(bad, []byte("soon"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{bad, filepath.Join(dir, "missing")} {
		_, _, err := runCLI(t, "serve", "--id", "n1", "--data-dir", filepath.Join(dir, "n1"), "--bootstrap", "--debug-clock-file", file)
		wantErrNaming(t, err, "--debug-clock-file", file)
	}
}

func TestServeDebugFlagsAreHiddenAndChecked(t *testing.T) {
	out, _, err := runCLI(t, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"--debug-clock-offset", "--debug-clock-file", "--debug-dial-map"} {
		if strings.Contains(out, f) {
			t.Errorf("serve --help shows the hidden %s", f)
		}
	}
	_, _, err = runCLI(t, "serve", "--id", "n1", "--data-dir", t.TempDir(), "--bootstrap", "--debug-dial-map", "127.0.0.1:7170=nowhere")
	wantErrNaming(t, err, "--debug-dial-map", "nowhere")
}
