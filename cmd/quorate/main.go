package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/cmd/internal/apiflags"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// After the first signal, restore the default behaviour so that a second
	// Ctrl-C kills a process that is slow to shut down.
	go func() { <-ctx.Done(); stop() }()
	status := execute(context.WithValue(ctx, programKey{}, os.Args[0]), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(status)
}

// programKey is the context key of the path the binary was run as
// (os.Args[0]), which main records.
type programKey struct{}

// programOf is the path the binary was run as, for commands that print
// command lines to run next (dev's summary): "quorate" when main did not
// record it (a test runs a command in process).
func programOf(ctx context.Context) string {
	if p, ok := ctx.Value(programKey{}).(string); ok && p != "" {
		return p
	}
	return "quorate"
}

// run executes the command line args (without the program name), writing
// results to stdout and diagnostics to stderr. It returns when the command is
// done or, for serve and dev, when ctx is cancelled and the nodes have
// stopped. A denial is not an error: execute turns it into exit status 2.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "quorate",
		Short: "Quorate: a Raft-replicated strict rate limiter",
		Long: "Quorate decides admission (rate limits) strictly across a cluster: every decision\n" +
			"goes through a Raft log, so all nodes share one budget.\n\n" +
			"Client commands send to --server, default $" + apiflags.ServerEnv + " or " + apiflags.DefaultServer + ",\n" +
			"with the bearer token of --token-file, default $" + apiflags.TokenEnv + ".\n\n" + exitStatusHelp,
		SilenceUsage:  true, // a failed RPC is not a usage mistake
		SilenceErrors: true, // main prints the error once
		// $QUORATE_SERVER is the default of every command's --server.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return apiflags.ServerFromEnv(cmd) },
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().BoolP("verbose", "v", false, "report each failed attempt that is retried on stderr")
	root.AddCommand(
		newServeCmd(),
		newDevCmd(),
		newAdmitCmd(),
		newPeekCmd(),
		newRefundCmd(),
		newReserveCmd(),
		newCommitCmd(),
		newLeaseCmd(),
		newPolicyCmd(),
		newAdminCmd(),
		newTokenCmd(),
		newVersionCmd(),
	)
	root.InitDefaultCompletionCmd()
	failOnUnknownSubcommands(root)
	return root
}

// failOnUnknownSubcommands makes every command group below root (a command
// with subcommands and no action of its own, like "policy" or "admin node")
// fail on an argument that names none of its subcommands, as the root does:
// cobra would otherwise print the group's help and exit 0, so a typo or a
// command this version lacks would look like success. A group given no
// argument prints its help.
func failOnUnknownSubcommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		failOnUnknownSubcommands(c)
		if !c.HasSubCommands() || c.Runnable() {
			continue
		}
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			var names []string
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			return fmt.Errorf("unknown command %q for %q (its commands: %s; see %s --help)",
				args[0], cmd.CommandPath(), strings.Join(names, ", "), cmd.CommandPath())
		}
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
}
