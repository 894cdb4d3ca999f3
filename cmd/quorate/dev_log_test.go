package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quorate/quorate/devcluster"
)

// TestDevCtrlCLogsNoError runs the built binary's `quorate dev` (3 nodes,
// data groups, non-default ports, state in a temporary directory), waits
// until it is ready, interrupts it as Ctrl-C does, and checks that it
// exits 0 and that its one structured log (the nodes' and Raft's, all
// through slog) has no line at ERROR level, from start-up to the end:
// elections, followers catching up, and peers going away while everything
// stops are expected, not errors.
func TestDevCtrlCLogsNoError(t *testing.T) {
	bin := buildQuorate(t)
	dir := t.TempDir()
	apiPort := freePortRange(t, 3)
	raftPort := freePortRange(t, 3, apiPort, apiPort+1, apiPort+2)
	cmd := exec.Command(bin, "dev", "--dir", filepath.Join(dir, "state"), "--nodes", "3", "--policies", "",
		"--api-port", fmt.Sprint(apiPort), "--raft-port", fmt.Sprint(raftPort))
	cmd.Env = os.Environ()
	var stdout, stderr devcluster.Output
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})

	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(stdout.String(), "ready in ") {
		select {
		case err := <-done:
			t.Fatalf("quorate dev exited before it was ready: %v\nstderr:\n%s", err, stderr.String())
		case <-deadline.C:
			t.Fatalf("quorate dev not ready after 2 minutes\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		case <-tick.C:
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("quorate dev after Ctrl-C: %v, want exit status 0\nstderr:\n%s", err, stderr.String())
		}
	case <-deadline.C:
		t.Fatalf("quorate dev did not stop after Ctrl-C\nstderr:\n%s", stderr.String())
	}
	logs := stderr.String()
	if !strings.Contains(logs, "quorate dev: stopped") {
		t.Errorf("no stop message in stderr:\n%s", logs)
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("error logged by a clean start and Ctrl-C: %s", line)
		}
	}
}
