package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readmeBlock returns the command lines of the first ```sh block after the
// heading that starts with heading in doc (a file of docs/): each line
// without its comment, split at ";", as arguments after "bin/quorate",
// optional [...] parts left out.
func readmeBlock(t *testing.T, doc, heading string) [][]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/" + doc)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading)
	if !ok {
		t.Fatalf("docs/%s has no heading %q", doc, heading)
	}
	_, rest, _ = strings.Cut(rest, "```sh\n")
	block, _, _ := strings.Cut(rest, "```")
	var cmds [][]string
	for _, line := range strings.Split(block, "\n") {
		line, _, _ = strings.Cut(line, "#")
		for _, c := range strings.Split(line, ";") {
			var args []string
			optional := false
			for _, f := range strings.Fields(c) {
				switch {
				case strings.HasPrefix(f, "["):
					optional = !strings.HasSuffix(f, "]")
				case optional:
					optional = !strings.HasSuffix(f, "]")
				default:
					args = append(args, f)
				}
			}
			if len(args) > 1 && args[0] == "bin/quorate" {
				cmds = append(cmds, args[1:])
			}
		}
	}
	return cmds
}

// The "Scaling live" commands of docs/operating.md, run as written (with this test's
// directory and ports) against the dev cluster they start: every one
// succeeds, the waits included.
func TestREADMEScalingCommands(t *testing.T) {
	cmds := readmeBlock(t, "operating.md", "## Scaling live")
	if len(cmds) < 12 || cmds[0][0] != "dev" {
		t.Fatalf("unexpected commands in the scaling section of docs/operating.md: %q", cmds)
	}
	apiPort := freePortRange(t, 4)
	raftPort := freePortRange(t, 4, apiPort, apiPort+1, apiPort+2, apiPort+3)
	dev := cmds[0]
	for i, a := range dev {
		if a == "--dir" {
			dev[i+1] = filepath.Join(t.TempDir(), "scale")
		}
	}
	startDev(t, append(dev, "--policies", "", "--api-port", fmt.Sprint(apiPort), "--raft-port", fmt.Sprint(raftPort)))
	server := fmt.Sprintf("127.0.0.1:%d", apiPort)
	for _, args := range cmds[1:] {
		if strings.Join(args, " ") == "admin plan cancel ID" {
			continue // the section's placeholder for a running plan
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var stdout, stderr lockedBuffer
		err := run(ctx, append(args, "--server", server), &stdout, &stderr)
		cancel()
		if err != nil {
			t.Fatalf("quorate %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		t.Logf("quorate %s:\n%s", strings.Join(args, " "), stdout.String())
	}
}

// The client commands of docs/cli.md's "The command" section, run as written
// (with this test's server) against a dev cluster like make run's (3 nodes,
// 8 data groups, the example policies): every one succeeds. Refund names
// the request an admit of the section's options made.
func TestREADMEClientCommands(t *testing.T) {
	apiPort := freePortRange(t, 3)
	raftPort := freePortRange(t, 3, apiPort, apiPort+1, apiPort+2)
	startDev(t, []string{"dev", "--dir", filepath.Join(t.TempDir(), "dev"), "--policies", "../../examples/policies.yaml",
		"--api-port", fmt.Sprint(apiPort), "--raft-port", fmt.Sprint(raftPort)})
	server := fmt.Sprintf("127.0.0.1:%d", apiPort)
	cmds := append([][]string{{"admit", "--policy", "api-free", "--key", "tenant-a", "--cost", "3", "--caller", "svc", "--request-id", "ID"}},
		readmeBlock(t, "cli.md", "## The command")...)
	ran := 0
	for _, args := range cmds {
		line := " " + strings.Join(args, " ") + " "
		if args[0] == "dev" || args[0] == "serve" || strings.Contains(line, " P ") || strings.Contains(line, " K ") {
			continue // a server, or placeholders
		}
		for i, a := range args {
			if a == "examples/policies.yaml" {
				args[i] = "../../examples/policies.yaml"
			}
		}
		out, errOut, err := runCLI(t, append(args, "--server", server)...)
		if err != nil {
			t.Fatalf("quorate %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
		}
		ran++
	}
	if ran < 9 {
		t.Errorf("ran %d commands of docs/cli.md, want at least 9: %q", ran, cmds)
	}
}
