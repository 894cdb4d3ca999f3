package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/cmd/internal/apiflags"
)

func main() {
	if os.Getenv(floorEchoEnv) != "" { // the floor's echo process (bench_floor_echo.go)
		if err := floorEcho(); err != nil {
			fmt.Fprintf(os.Stderr, "quorate-bench: floor echo: %v\n", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// After the first signal, restore the default behaviour so that a second
	// Ctrl-C kills a process that is slow to stop what it started.
	go func() { <-ctx.Done(); stop() }()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "quorate-bench: %v\n", err)
		os.Exit(1)
	}
}

// run executes the command line args (without the program name), writing
// the summary to stdout and progress and diagnostics to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newBenchCmd()
	root.SilenceUsage = true  // a failed run is not a usage mistake
	root.SilenceErrors = true // main prints the error once
	// $QUORATE_SERVER is the default of --server, as for quorate's commands.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return apiflags.ServerFromEnv(cmd) }
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)
	root.CompletionOptions.DisableDefaultCmd = true
	return root.ExecuteContext(ctx)
}

// outputFormat is the value of -o/--output: "text" or "json" (the
// summary's own JSON form). It implements pflag.Value, so a bad value is
// refused while parsing flags.
type outputFormat string

const (
	outputText outputFormat = "text"
	outputJSON outputFormat = "json"
)

func (f *outputFormat) String() string { return string(*f) }
func (f *outputFormat) Type() string   { return "text|json" }
func (f *outputFormat) Set(s string) error {
	switch outputFormat(s) {
	case outputText, outputJSON:
		*f = outputFormat(s)
		return nil
	}
	return errors.New("must be text or json")
}

// addOutputFlag registers -o/--output on cmd, defaulting to text.
func addOutputFlag(cmd *cobra.Command, f *outputFormat) {
	*f = outputText
	cmd.Flags().VarP(f, "output", "o", "output format: text or json")
}
