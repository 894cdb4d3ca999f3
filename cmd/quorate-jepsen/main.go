package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
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
	opts, matrix, err := parse(args, stdout)
	if err != nil {
		return err
	}
	if opts.Seed == 0 {
		opts.Seed = uint64(time.Now().UnixNano())
	}
	if opts.ReportDir == "" {
		opts.ReportDir = fmt.Sprintf("jepsen-report-%d", opts.Seed)
	}
	if matrix != "" {
		runs := jepsen.FullMatrix()
		if matrix == "short" {
			runs = jepsen.ShortMatrix()
		}
		results := jepsen.RunMatrix(ctx, opts, runs, stdout)
		fmt.Fprint(stdout, jepsen.FormatMatrix(results))
		for _, r := range results {
			if !r.OK() {
				return errChecksFailed
			}
		}
		return ctx.Err()
	}
	fmt.Fprintf(stdout, "quorate-jepsen: seed %d, %v, %d nodes; report in %s\n", opts.Seed, opts.Duration, opts.Nodes, opts.ReportDir)
	r, err := jepsen.Run(ctx, opts)
	if r != nil {
		fmt.Fprint(stdout, r.Summary(err))
		fmt.Fprintf(stdout, "report: %s/index.html\n", opts.ReportDir)
	}
	if err != nil {
		return err
	}
	if !r.OK() {
		return errChecksFailed
	}
	return nil
}

// parse reads the flags into Options and the matrix name ("" for one run).
func parse(args []string, stdout io.Writer) (jepsen.Options, string, error) {
	fs := flag.NewFlagSet("quorate-jepsen", flag.ContinueOnError)
	fs.SetOutput(stdout)
	opts := jepsen.Options{}
	fs.StringVar(&opts.ReportDir, "report", "", "report directory (default: jepsen-report-<seed> in the working directory)")
	fs.Uint64Var(&opts.Seed, "seed", 0, "seed of the fault schedule and the clients (0: from the time)")
	fs.DurationVar(&opts.Duration, "duration", 60*time.Second, "how long the workload runs (each run of a matrix)")
	fs.IntVar(&opts.Nodes, "nodes", 3, "cluster size (3 or 5)")
	workloads := fs.String("workload", "all", "workloads, comma-separated: "+strings.Join(jepsen.Workloads, ", ")+", or all")
	faults := fs.String("faults", "mixed", "fault families, comma-separated: "+strings.Join(jepsen.Families, ", ")+", mixed (all of those) or none; "+
		"and, only by name, move (replica moves; needs --groups and more than 3 nodes) and slots (slot moves, cancels and splits, and with kill coordinator kills mid-move; needs --groups 2 or more)")
	fs.BoolVar(&opts.Scale, "scale", false, "also run the scale scenario: --nodes → --nodes+2 → --nodes members (two nodes join, a group splits onto them, two original nodes are drained, removed and stopped); the workloads run at least until it ends; --groups defaults to 4")
	fs.BoolVar(&opts.Recovery, "recovery", false, "also run the recovery scenario on 3 nodes: two lost for good (killed, data deleted), the survivor recovered with `quorate admin recover`, two new nodes joined, the lost ones removed; the workloads run at least until it ends")
	fs.DurationVar(&opts.Nemesis.Interval, "interval", 2*time.Second, "mean quiet time between faults (each drawn from half to 1.5 times it)")
	matrix := fs.String("matrix", "", "run a matrix instead of one run: full (each fault family, then mixed, then move, slots and scale runs on data groups) or short (CI's)")
	fs.IntVar(&opts.Clients, "clients", 6, "concurrent clients per workload")
	fs.IntVar(&opts.Keys, "keys", 6, "token-bucket and grant-bucket keys; key i opens after i×duration/keys")
	fs.Int64Var(&opts.Capacity, "capacity", 100, "token-bucket: tokens per key (no refill: the bound is exact)")
	fs.Int64Var(&opts.Limit, "limit", 20, "fixed-window: units per key and window")
	fs.DurationVar(&opts.Window, "window", 2*time.Second, "fixed-window: window length (whole seconds)")
	fs.Int64Var(&opts.Holders, "holders", 2, "lease: leases per key")
	fs.DurationVar(&opts.LeaseTTL, "lease-ttl", 2*time.Second, "lease: TTL asked on acquire and renew (≥ 1s)")
	fs.Int64Var(&opts.GrantLimit, "grant-limit", 200, "grant, grant-sync: units per key and 1s window (grants of at most a fifth of it; grant-sync may go over by a tenth of it, its bound)")
	fs.BoolVar(&opts.TLS, "tls", false, "run the cluster with TLS on both ports of every node (a throwaway CA; the clients verify the nodes against it) and check that it does; with --matrix, every run")
	fs.StringVar(&opts.Net, "net", "auto", "network faults via: auto (nftables in a private network namespace when root, else proxy), nftables or proxy")
	fs.IntVar(&opts.Groups, "groups", 0, "data groups the cluster hashes keys to (quorate serve --groups); 0: one group")
	fs.StringVar(&opts.Binary, "binary", "", "a prebuilt quorate binary (default: build ./cmd/quorate)")
	planted := fs.String("planted-bug", "", "build the server with a planted bug, so checkers must fail: dedupe (ignores request IDs), local-read (answers from the local replica) "+
		"or overspend (nodes spend past the grants they hold); the Go clients' overspend is planted by building this harness with -tags "+jepsen.PlantedClientOverspend+" instead")
	if err := fs.Parse(args); err != nil {
		return opts, "", err
	}
	var err error
	if opts.Workloads, err = jepsen.ParseWorkloads(*workloads); err != nil {
		return opts, "", fmt.Errorf("--workload: %w", err)
	}
	if opts.Nemesis.Families, err = jepsen.ParseFamilies(*faults); err != nil {
		return opts, "", fmt.Errorf("--faults: %w", err)
	}
	switch {
	case opts.Nodes != 3 && opts.Nodes != 5:
		return opts, "", fmt.Errorf("--nodes: must be 3 or 5 (got %d)", opts.Nodes)
	case opts.Duration < time.Second:
		return opts, "", fmt.Errorf("--duration: must be at least 1s (got %v)", opts.Duration)
	case opts.Nemesis.Interval < 100*time.Millisecond:
		return opts, "", fmt.Errorf("--interval: must be at least 100ms (got %v)", opts.Nemesis.Interval)
	case opts.Clients < 1:
		return opts, "", fmt.Errorf("--clients: must be at least 1 (got %d)", opts.Clients)
	case opts.Keys < 1:
		return opts, "", fmt.Errorf("--keys: must be at least 1 (got %d)", opts.Keys)
	case opts.Capacity < 1:
		return opts, "", fmt.Errorf("--capacity: must be at least 1 (got %d)", opts.Capacity)
	case opts.Limit < 1:
		return opts, "", fmt.Errorf("--limit: must be at least 1 (got %d)", opts.Limit)
	case opts.Window < time.Second || opts.Window%time.Second != 0:
		return opts, "", fmt.Errorf("--window: must be a whole number of seconds (got %v)", opts.Window)
	case opts.Holders < 1:
		return opts, "", fmt.Errorf("--holders: must be at least 1 (got %d)", opts.Holders)
	case opts.LeaseTTL < time.Second:
		return opts, "", fmt.Errorf("--lease-ttl: must be at least 1s (got %v)", opts.LeaseTTL)
	case opts.GrantLimit < 5:
		return opts, "", fmt.Errorf("--grant-limit: must be at least 5 (got %d)", opts.GrantLimit)
	case opts.Groups < 0 || opts.Groups > 64:
		return opts, "", fmt.Errorf("--groups: must be between 0 and 64 (got %d)", opts.Groups)
	case slices.Contains(opts.Nemesis.Families, jepsen.FamilySlots) && opts.Groups < 2:
		return opts, "", fmt.Errorf("--groups: the slots faults need at least 2 data groups (got %d)", opts.Groups)
	case !slices.Contains([]string{"auto", "nftables", "proxy"}, opts.Net):
		return opts, "", fmt.Errorf("--net: must be auto, nftables or proxy (got %q)", opts.Net)
	case *matrix != "" && *matrix != "full" && *matrix != "short":
		return opts, "", fmt.Errorf("--matrix: must be full or short (got %q)", *matrix)
	}
	if opts.Net == "auto" {
		opts.Net = ""
	}
	if opts.Scale && opts.Groups == 0 {
		opts.Groups = 4
	}
	if *planted != "" {
		tag, ok := jepsen.PlantedBugs[*planted]
		if !ok {
			return opts, "", fmt.Errorf("--planted-bug: must be dedupe, local-read or overspend (got %q)", *planted)
		}
		opts.BuildTags = tag
	}
	return opts, *matrix, nil
}
