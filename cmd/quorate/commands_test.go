package main

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// allCommands lists every command of the tree under root, root included.
func allCommands(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	for _, c := range root.Commands() {
		out = append(out, allCommands(c)...)
	}
	return out
}

// pflag takes a `quoted` word of a flag's usage as the flag's value name:
// "(`quorate dev --groups`)" would render as "--groups quorate dev --groups".
func TestNoFlagUsageHasBackticks(t *testing.T) {
	for _, c := range allCommands(newRootCmd(io.Discard, io.Discard)) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: usage %q has a backtick, which pflag renders as the value name", c.CommandPath(), f.Name, f.Usage)
			}
		})
	}
}

// Every command group (policy, lease, admin, admin node, ...) refuses an
// argument that names none of its subcommands, with an error naming it,
// rather than printing its help and succeeding.
func TestUnknownSubcommandFails(t *testing.T) {
	groups := 0
	for _, c := range allCommands(newRootCmd(io.Discard, io.Discard)) {
		if !c.HasSubCommands() {
			continue
		}
		groups++
		path := strings.Fields(c.CommandPath())[1:]
		t.Run(strings.Join(append([]string{"root"}, path...), " "), func(t *testing.T) {
			_, _, err := runCLI(t, append(path, "export")...)
			wantErrNaming(t, err, `"export"`)
		})
	}
	if groups < 8 {
		t.Errorf("found %d command groups, want at least 8 (policy, lease, admin and its groups)", groups)
	}
	// A group without an argument prints its help and succeeds.
	out, _, err := runCLI(t, "policy")
	if err != nil || !strings.Contains(out, "Available Commands") {
		t.Errorf("quorate policy: %v, output %q; want its help", err, out)
	}
}
