// Command quorate-jepsen runs Quorate's fault-injection harness against a
// real cluster of `quorate serve` processes on this machine: concurrent
// clients admit through the public API, a seeded nemesis kills (-9) and
// pauses (SIGSTOP) nodes, and checkers verify no over-admission,
// at-most-once answers per request ID and durability. It writes a report
// directory (summary.txt, history.jsonl, node logs, seed) and exits 1 when a
// checker fails.
//
//	quorate-jepsen [--report DIR] [--seed N] [--duration 60s] [--nodes 3]
//	               [--clients 8] [--keys 6] [--capacity 100] [--binary PATH]
//	               [--planted-bug]
//
// Re-running with the same --seed replays the same fault schedule.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quorate/quorate/jepsen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "quorate-jepsen: %v\n", err)
		os.Exit(1)
	}
}

// errChecksFailed is returned when the run completed but a checker failed.
var errChecksFailed = errors.New("a checker failed: see the report")

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("quorate-jepsen", flag.ContinueOnError)
	fs.SetOutput(stdout)
	opts := jepsen.Options{}
	fs.StringVar(&opts.ReportDir, "report", "", "report directory (default: jepsen-report-<seed> in the working directory)")
	fs.Uint64Var(&opts.Seed, "seed", 0, "seed of the fault schedule and the clients (0: from the time)")
	fs.DurationVar(&opts.Duration, "duration", 60*time.Second, "how long the workload runs")
	fs.IntVar(&opts.Nodes, "nodes", 3, "cluster size (3 or 5)")
	fs.IntVar(&opts.Clients, "clients", 8, "concurrent clients")
	fs.IntVar(&opts.Keys, "keys", 6, "keys; key i opens after i×duration/keys")
	fs.Int64Var(&opts.Capacity, "capacity", 100, "tokens per key (no refill: the bound is exact)")
	fs.StringVar(&opts.Binary, "binary", "", "a prebuilt quorate binary (default: build ./cmd/quorate)")
	planted := fs.Bool("planted-bug", false, "build the server with -tags quorate_planted_bug (ignores request IDs): checkers must fail")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case opts.Nodes != 3 && opts.Nodes != 5:
		return fmt.Errorf("--nodes: must be 3 or 5 (got %d)", opts.Nodes)
	case opts.Duration < time.Second:
		return fmt.Errorf("--duration: must be at least 1s (got %v)", opts.Duration)
	case opts.Clients < 1 || opts.Keys < 1 || opts.Capacity < 1:
		return errors.New("--clients, --keys and --capacity must be at least 1")
	}
	if opts.Seed == 0 {
		opts.Seed = uint64(time.Now().UnixNano())
	}
	if opts.ReportDir == "" {
		opts.ReportDir = fmt.Sprintf("jepsen-report-%d", opts.Seed)
	}
	if *planted {
		opts.BuildTags = "quorate_planted_bug"
	}
	fmt.Fprintf(stdout, "quorate-jepsen: seed %d, %v, %d nodes; report in %s\n", opts.Seed, opts.Duration, opts.Nodes, opts.ReportDir)
	r, err := jepsen.Run(ctx, opts)
	if r != nil {
		fmt.Fprint(stdout, r.Summary(err))
		fmt.Fprintf(stdout, "reproduce: quorate-jepsen --seed %d --duration %v --nodes %d --clients %d --keys %d --capacity %d%s\n",
			opts.Seed, opts.Duration, opts.Nodes, opts.Clients, opts.Keys, opts.Capacity, map[bool]string{true: " --planted-bug"}[*planted])
	}
	if err != nil {
		return err
	}
	for _, v := range r.Verdicts {
		if !v.OK {
			return errChecksFailed
		}
	}
	return nil
}
