package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/devcluster"
	"github.com/quorate/quorate/node"
)

// makeBuild builds the binary as `make build` does, with the Makefile's
// flags, into a temporary directory and returns its path.
func makeBuild(t *testing.T) string {
	t.Helper()
	makeTool, err := exec.LookPath("make")
	if err != nil {
		t.Skipf("no make to build the binary with: %v", err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build the binary with: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "quorate")
	if out, err := exec.Command(makeTool, "-C", "../..", "build", "BIN="+bin, "GO="+goTool).CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	return bin
}

// gitOutput is the trimmed output of git args in the repository, or skips
// the test when there is no git checkout.
func gitOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", "../.."}, args...)...).Output()
	if err != nil {
		t.Skipf("git %s: %v (not a git checkout?)", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// `make build` stamps the version (git describe), the commit and the build
// date: `quorate version` prints them (its JSON in camelCase, as every other
// JSON output), a node started from the binary logs them and exports them as
// quorate_build_info on /metrics. (That node is a one-node `quorate dev`,
// whose summary names the commands to try with the path the binary was run
// as, not "quorate", which need not be on the PATH.)
func TestMakeBuildStampsVersion(t *testing.T) {
	commit := gitOutput(t, "rev-parse", "HEAD")
	before := time.Now().UTC().Truncate(time.Second)
	bin := makeBuild(t)
	version := gitOutput(t, "describe", "--tags", "--always", "--dirty")

	r := runBinary(t, bin, nil, "version", "-o", "json")
	wantStatus(t, r, exitOK, "version -o json")
	var fields map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &fields); err != nil {
		t.Fatalf("version -o json: %v\n%s", err, r.stdout)
	}
	for name := range fields {
		if strings.Contains(name, "_") {
			t.Errorf("version -o json: field %q is not camelCase:\n%s", name, r.stdout)
		}
	}
	var b node.BuildInfo
	if err := json.Unmarshal([]byte(r.stdout), &b); err != nil {
		t.Fatal(err)
	}
	if b.Version != version || b.Commit != commit || b.Modified != strings.HasSuffix(version, "-dirty") {
		t.Errorf("version -o json: version %q commit %q modified %t; want %q, %q (git describe, rev-parse)", b.Version, b.Commit, b.Modified, version, commit)
	}
	built, err := time.Parse(time.RFC3339, b.BuildDate)
	if err != nil || built.Before(before) || built.After(time.Now().Add(time.Minute)) {
		t.Errorf("version -o json: buildDate %q (%v), want the time of the build, after %v", b.BuildDate, err, before)
	}
	text := runBinary(t, bin, nil, "version")
	for _, want := range []string{"quorate " + version + "\n", "commit:      " + commit + "\n", "build date:  " + b.BuildDate + "\n"} {
		if !strings.Contains(text.stdout, want) {
			t.Errorf("version lacks %q:\n%s", want, text.stdout)
		}
	}

	// A node of the binary logs the build at start and exports it.
	port := freePortRange(t, 2)
	api := fmt.Sprintf("127.0.0.1:%d", port)
	dev := exec.Command(bin, "dev", "--nodes", "1", "--dir", filepath.Join(t.TempDir(), "dev"), "--policies", "",
		"--api-port", fmt.Sprint(port), "--raft-port", fmt.Sprint(port+1), "--log-level", "info")
	var stdout, stderr devcluster.Output
	dev.Stdout, dev.Stderr = &stdout, &stderr
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dev.Process.Kill()
		_ = dev.Wait()
	})
	series := fmt.Sprintf("quorate_build_info{commit=%q,go_version=%q,version=%q} 1\n", commit, b.GoVersion, version)
	deadline := time.Now().Add(time.Minute)
	var metrics string
	servingLine := regexp.MustCompile(`(?m)^.*msg=serving .*$`)
	for !strings.Contains(metrics, series) || !servingLine.MatchString(stderr.String()) || !strings.Contains(stdout.String(), "ready in ") {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in /metrics, or no serving line logged, or not ready, after a minute:\n%s\nstdout:\n%s\nstderr:\n%s",
				series, metrics, stdout.String(), stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
		resp, err := http.Get("http://" + api + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(body)
	}
	started := servingLine.FindString(stderr.String())
	for _, want := range []string{"version=" + version, "commit=" + commit, "build_date=" + b.BuildDate} {
		if !strings.Contains(started, want) {
			t.Errorf("the node's start-up line %q lacks %s\nstderr:\n%s", started, want, stderr.String())
		}
	}
	for _, want := range []string{"  " + bin + " admit --server http://" + api + " ", "add some with: " + bin + " policy apply"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("dev's summary lacks %q:\n%s", want, stdout.String())
		}
	}
}
