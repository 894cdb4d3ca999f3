package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/cmd/internal/apiflags"
	"github.com/quorate/quorate/devcluster"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/policyfile"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// defaultPoliciesFile is loaded by `quorate dev` when it exists.
const defaultPoliciesFile = "examples/policies.yaml"

// devOptions are the flags of `quorate dev`.
type devOptions struct {
	dir             string
	nodes           int
	policies        string
	policiesChanged bool // --policies was given: the file must exist
	apiPort         int
	raftPort        int
	logLevel        string
	readyTimeout    time.Duration
	groups          *groupsFlag
	groupsChanged   bool // --groups was given
	tls             bool // --tls
	pprofAddr       string
	memoryLimit     int64
	heartbeat       time.Duration // --heartbeat-timeout
	envoyConfig     []string      // --envoy-config
	envoyHeaders    bool          // --envoy-headers
	envoyDedupe     bool          // --envoy-dedupe-request-id
	// program is the path dev was run as, which the summary's commands
	// name (programOf).
	program string
}

func newDevCmd() *cobra.Command {
	o := devOptions{}
	cmd := &cobra.Command{
		Use:   "dev [--dir data/dev] [--nodes 3] [--policies FILE]",
		Short: "Run a whole local cluster in one process",
		Long: "Dev runs N nodes on 127.0.0.1 in this process: node i (node1..nodeN) serves the\n" +
			"API on --api-port+i-1 and Raft on --raft-port+i-1, with its state in DIR/node<i>.\n" +
			"node1 bootstraps the cluster and the others join it. Once a leader is elected\n" +
			"and every node has joined, dev loads the policy file and prints how to reach the\n" +
			"cluster. Ctrl-C stops every node cleanly; running dev again on the same --dir\n" +
			"resumes with the state intact (re-applying unchanged policies keeps their versions).\n\n" +
			"--groups shapes a new cluster only: by default keys are spread over one data group\n" +
			"per node, so each node leads one (quorate serve does the same with --expect-nodes 3\n" +
			"on every node). Dev records the number in\n" +
			"DIR/dev.json; a restart keeps the cluster's groups (changed since only by `admin\n" +
			"group add` and `split`) and refuses another --groups: use a new --dir for that.\n" +
			"--nodes may grow a restarted cluster: the new nodes join it. Two dev clusters need\n" +
			"their own ports: stop the other one, or give --api-port and --raft-port.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.policiesChanged = cmd.Flags().Changed("policies")
			o.groupsChanged = cmd.Flags().Changed("groups")
			o.program = programOf(cmd.Context())
			return runDev(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "data/dev", "directory of the nodes' state (DIR/node1, DIR/node2, ...)")
	f.IntVar(&o.nodes, "nodes", 3, "number of nodes, 1 to 9")
	o.groups = newGroupsFlag()
	f.Var(o.groups, "groups", groupsUsage+"; a restart keeps the cluster's")
	f.StringVar(&o.policies, "policies", defaultPoliciesFile, "policy file to apply once the cluster is ready (the default is skipped when absent)")
	f.IntVar(&o.apiPort, "api-port", 7070, "API port of node1; node i uses api-port+i-1")
	f.StringVar(&o.pprofAddr, "pprof-addr", "", "loopback host:port of a profiling endpoint (/debug/pprof/) for the whole process; off by default")
	f.Var(byteSize{&o.memoryLimit}, "memory-limit", "soft limit on the whole process's memory (512MiB, 2GiB), as serve's; 0: none")
	f.IntVar(&o.raftPort, "raft-port", 7170, "Raft port of node1; node i uses raft-port+i-1")
	f.StringVar(&o.logLevel, "log-level", "warn", "nodes' log level: debug, info, warn or error")
	f.DurationVar(&o.heartbeat, "heartbeat-timeout", node.DefaultConfig().HeartbeatTimeout,
		"nodes' Raft heartbeat timeout (and election timeout; the leader lease at most it): shorter fails over sooner, longer costs less idle CPU")
	f.DurationVar(&o.readyTimeout, "ready-timeout", time.Minute, "how long to wait for a leader, every node and the policies")
	f.BoolVar(&o.tls, "tls", false, "serve TLS on every port (mutual TLS between nodes) with a throwaway CA in DIR/tls;\n"+
		"the summary prints the --tls-ca, --tls-cert and --tls-key flags that reach the cluster")
	f.StringArrayVar(&o.envoyConfig, "envoy-config", nil, "serve Envoy's rate-limit service on every node with this file's domains (as serve's); repeatable")
	f.BoolVar(&o.envoyHeaders, "envoy-headers", false, "add the RateLimit header fields to the rate-limit service's answers")
	f.BoolVar(&o.envoyDedupe, "envoy-dedupe-request-id", false, envoyDedupeUsage)
	return cmd
}

func (o devOptions) validate() error {
	if o.nodes < 1 || o.nodes > 9 {
		return fmt.Errorf("dev: --nodes: must be between 1 and 9 (got %d)", o.nodes)
	}
	if o.heartbeat < 5*time.Millisecond {
		return fmt.Errorf("dev: --heartbeat-timeout: must be at least 5ms (got %v)", o.heartbeat)
	}
	if o.dir == "" {
		return errors.New("dev: --dir: must not be empty")
	}
	maxPort := 65535 - (o.nodes - 1)
	if o.apiPort < 1 || o.apiPort > maxPort {
		return fmt.Errorf("dev: --api-port: must be between 1 and %d for %d nodes (got %d)", maxPort, o.nodes, o.apiPort)
	}
	if o.raftPort < 1 || o.raftPort > maxPort {
		return fmt.Errorf("dev: --raft-port: must be between 1 and %d for %d nodes (got %d)", maxPort, o.nodes, o.raftPort)
	}
	if o.apiPort < o.raftPort+o.nodes && o.raftPort < o.apiPort+o.nodes {
		return fmt.Errorf("dev: --api-port and --raft-port: ports %d-%d and %d-%d overlap",
			o.apiPort, o.apiPort+o.nodes-1, o.raftPort, o.raftPort+o.nodes-1)
	}
	if o.readyTimeout <= 0 {
		return fmt.Errorf("dev: --ready-timeout: must be positive (got %v)", o.readyTimeout)
	}
	return nil
}

// loadPolicies reads the policy file. The default file may be absent (then
// it warns and returns nil); a file named with --policies must exist.
func (o devOptions) loadPolicies(stderr io.Writer) ([]*quoratev1.Policy, error) {
	if o.policies == "" {
		return nil, nil
	}
	policies, err := policyfile.Read(o.policies, nil)
	if errors.Is(err, fs.ErrNotExist) && !o.policiesChanged {
		fmt.Fprintf(stderr, "quorate dev: %s not found; starting without loading policies (add some with: %s policy apply -f FILE)\n",
			o.policies, shellQuote(o.program))
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dev: --policies: %w", err)
	}
	return policies, nil
}

// cluster is the devcluster configuration of the flags.
func (o devOptions) cluster(logs io.Writer) devcluster.Config {
	return devcluster.Config{Dir: o.dir, Nodes: o.nodes, Groups: o.groups.resolve(o.nodes), GroupsGiven: o.groupsChanged,
		APIPort: o.apiPort, RaftPort: o.raftPort, LogLevel: o.logLevel, Logs: logs, Heartbeat: o.heartbeat,
		ReadyTimeout: o.readyTimeout, TLS: o.tls, PprofAddr: o.pprofAddr, MemoryLimit: o.memoryLimit,
		EnvoyConfig: o.envoyConfig, EnvoyHeaders: o.envoyHeaders, EnvoyDedupe: o.envoyDedupe}
}

// runDev starts the cluster (package devcluster), waits until it is ready,
// loads the policies, prints a summary and serves until ctx ends.
func runDev(ctx context.Context, o devOptions, stdout, stderr io.Writer) error {
	start := time.Now()
	if err := o.validate(); err != nil {
		return err
	}
	policies, err := o.loadPolicies(stderr)
	if err != nil {
		return err
	}
	applyMemoryLimit(o.memoryLimit) // one process: one limit for every node
	c, err := devcluster.Start(ctx, o.cluster(stderr))
	if err != nil {
		return err
	}
	if err := c.Ready(ctx, policies); err != nil {
		if ctx.Err() != nil && c.Failure() == nil {
			return c.Stop() // interrupted while starting: a clean stop
		}
		return errors.Join(err, c.Stop())
	}
	writeDevSummary(stdout, o, c)
	fmt.Fprintf(stdout, "ready in %.1fs; press Ctrl-C to stop\n", time.Since(start).Seconds())

	select {
	case <-ctx.Done():
	case <-c.Failed():
	}
	fmt.Fprintln(c.Logs(), "quorate dev: stopping")
	failure := c.Failure()
	stopErr := c.Stop()
	if failure != nil {
		return errors.Join(failure, stopErr)
	}
	if stopErr == nil {
		fmt.Fprintf(c.Logs(), "quorate dev: stopped; state kept in %s\n", o.dir)
	}
	return stopErr
}

// tlsFlags are the client flags that reach a TLS cluster: its CA and the
// admin certificate.
func tlsFlags(t *devcluster.TLSFiles) apiflags.TLS {
	return apiflags.TLS{CA: t.CA, Cert: t.Admin.CertFile, Key: t.Admin.KeyFile}
}

// writeDevSummary prints the ready cluster c and how to reach it.
func writeDevSummary(w io.Writer, o devOptions, c *devcluster.Cluster) {
	nodes, status, policies, restarted, t := c.Nodes(), c.Status(), c.Policies(), c.Restarted(), c.TLS()
	scheme, cli, curl := c.Scheme(), "", ""
	prog := shellQuote(o.program)
	if t != nil {
		f := tlsFlags(t)
		cli = fmt.Sprintf(" --tls-ca %s --tls-cert %s --tls-key %s", f.CA, f.Cert, f.Key)
		curl = fmt.Sprintf(" --cacert %s --cert %s --key %s", f.CA, f.Cert, f.Key)
	}
	how := "new cluster"
	if restarted {
		how = "restarted from existing state"
	}
	fmt.Fprintf(w, "Quorate dev cluster: %d %s on 127.0.0.1, state in %s (%s)\n", len(nodes), plural(len(nodes), "node", "nodes"), o.dir, how)
	for i, n := range nodes {
		id := fmt.Sprintf("node%d", i+1)
		role := ""
		for _, m := range status.GetMembers() {
			if m.GetId() == id {
				role = m.GetStatus().GetRole()
			}
		}
		fmt.Fprintf(w, "  %-6s api %s%s  raft %s  %s\n", id, scheme, n.APIAddr(), n.RaftAddr(), role)
	}
	fmt.Fprintf(w, "leader: %s\n", status.GetLeaderId())
	if sm := status.GetShardMap(); sm != nil {
		fmt.Fprintf(w, "data groups: %d (shard map epoch %d; %s admin status lists them)\n", len(sm.GetGroups()), sm.GetEpoch(), prog)
	} else {
		fmt.Fprintln(w, "data groups: none (every key in the meta group)")
	}
	// The examples use the first rate policy for admit and the first
	// concurrency policy, if any, for lease acquire.
	policy, leasePolicy := "POLICY", ""
	for _, p := range policies {
		switch {
		case p.GetAlgorithm() == string(admission.AlgorithmConcurrency):
			if leasePolicy == "" {
				leasePolicy = p.GetName()
			}
		case policy == "POLICY":
			policy = p.GetName()
		}
	}
	if len(policies) == 0 {
		fmt.Fprintf(w, "policies: none (add some with: %s policy apply -f FILE)\n", prog)
	} else {
		fmt.Fprintln(w, "policies:")
		var table bytes.Buffer
		_ = writePolicies(&table, policies)
		fmt.Fprint(w, indent(table.String(), "  "))
	}
	server := scheme + nodes[0].APIAddr()
	if t != nil {
		fmt.Fprintf(w, "TLS: CA and certificates in %s; the CLI reaches the cluster with%s\n", t.Dir, cli)
	}
	fmt.Fprintln(w, "try:")
	fmt.Fprintf(w, "  curl -s%s -H 'Content-Type: application/json' -d '{\"policy\":\"%s\",\"key\":\"tenant-a\"}' %s/quorate.v1.AdmissionService/Admit\n", curl, policy, server)
	fmt.Fprintf(w, "  %s admit --server %s%s --policy %s --key tenant-a\n", prog, server, cli, policy)
	if leasePolicy != "" {
		fmt.Fprintf(w, "  %s lease acquire --server %s%s --policy %s --key tenant-a\n", prog, server, cli, leasePolicy)
	}
	fmt.Fprintf(w, "  %s admin status --server %s%s\n", prog, server, cli)
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	return b.String()
}

// dirHasEntries reports whether dir exists and holds anything (serve's
// check of a data directory).
func dirHasEntries(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}
