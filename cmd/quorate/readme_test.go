package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/devcluster"
)

// readmeBlock returns the command lines of the first ```sh block after the
// heading that starts with heading in doc (a file of docs/), as
// blockCommands gives them.
func readmeBlock(t *testing.T, doc, heading string) [][]string {
	t.Helper()
	rest := docSection(t, filepath.Join("docs", doc), heading)
	_, rest, _ = strings.Cut(rest, "```sh\n")
	block, _, _ := strings.Cut(rest, "```")
	return blockCommands(block)
}

// docSection returns the text of the file at path (from the repository's
// root) after the heading that starts with heading.
func docSection(t *testing.T, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading)
	if !ok {
		t.Fatalf("%s has no heading %q", path, heading)
	}
	return rest
}

// blockCommands returns the command lines of a shell block: each line
// without its comment, split at ";", as arguments after "bin/quorate",
// optional [...] parts left out.
func blockCommands(block string) [][]string {
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

// The commands of the README's "Five minutes with Quorate", run as written
// (with this test's server) in order against a dev cluster like make run's:
// every one succeeds, and the denial the README shows is one. Commands
// naming a lease by the placeholders ID and N are left out.
func TestREADMEFiveMinutes(t *testing.T) {
	section := docSection(t, "README.md", "## Five minutes with Quorate")
	section, _, _ = strings.Cut(section, "\n## ")
	var cmds [][]string
	for {
		var block string
		var ok bool
		if _, section, ok = strings.Cut(section, "```sh\n"); !ok {
			break
		}
		block, section, _ = strings.Cut(section, "```")
		cmds = append(cmds, blockCommands(block)...)
	}
	if len(cmds) < 5 {
		t.Fatalf("found %d quorate commands in the README's five minutes, want at least 5: %q", len(cmds), cmds)
	}
	apiPort := freePortRange(t, 3)
	raftPort := freePortRange(t, 3, apiPort, apiPort+1, apiPort+2)
	startDev(t, []string{"dev", "--dir", filepath.Join(t.TempDir(), "dev"), "--policies", "../../examples/policies.yaml",
		"--api-port", fmt.Sprint(apiPort), "--raft-port", fmt.Sprint(raftPort)})
	server := fmt.Sprintf("127.0.0.1:%d", apiPort)
	ran, denied := 0, 0
	for _, args := range cmds {
		line := " " + strings.Join(args, " ") + " "
		if strings.Contains(line, " ID ") || strings.Contains(line, " N ") {
			continue // placeholders of a lease
		}
		out, errOut, err := runCLI(t, append(args, "--server", server)...)
		if err != nil {
			t.Fatalf("quorate %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
		}
		if strings.HasPrefix(out, "denied") {
			denied++
		}
		ran++
	}
	if ran < 5 || denied != 1 {
		t.Errorf("ran %d commands of the README (want at least 5), %d denied (want the one the README shows): %q", ran, denied, cmds)
	}
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
		var stdout, stderr devcluster.Output
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
