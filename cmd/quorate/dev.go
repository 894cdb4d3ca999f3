package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/node"
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
	groups          int
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
			"--groups shapes a new cluster only: keys are spread over 8 data groups by default\n" +
			"(quorate serve defaults to 0, one group for everything, and takes --groups 8\n" +
			"--expect-nodes 3 on every node to do the same). Dev records the value in\n" +
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
	f.IntVar(&o.groups, "groups", 8, "data groups the keys are hashed to, for a new cluster (0: every key in the meta group); a restart keeps the cluster's")
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
	if o.groups < 0 || o.groups > node.MaxDataGroups {
		return fmt.Errorf("dev: --groups: must be between 0 and %d (got %d)", node.MaxDataGroups, o.groups)
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
	policies, err := readPolicyFile(o.policies, nil)
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

func (o devOptions) nodeConfig(i int, logs io.Writer, join string, t *devTLS) node.Config {
	cfg := node.DefaultConfig()
	cfg.ID = fmt.Sprintf("node%d", i)
	cfg.DataDir = filepath.Join(o.dir, cfg.ID)
	cfg.APIAddr = fmt.Sprintf("127.0.0.1:%d", o.apiPort+i-1)
	cfg.RaftAddr = fmt.Sprintf("127.0.0.1:%d", o.raftPort+i-1)
	cfg.Bootstrap = i == 1
	cfg.Join = join
	cfg.LogOutput = logs
	cfg.LogLevel = o.logLevel
	cfg.HeartbeatTimeout, cfg.ElectionTimeout = o.heartbeat, o.heartbeat
	cfg.LeaderLeaseTimeout = min(cfg.LeaderLeaseTimeout, o.heartbeat)
	cfg.DataGroups, cfg.ExpectNodes = o.groups, o.nodes
	cfg.MemoryLimit = o.memoryLimit // one process: one limit for every node
	cfg.EnvoyConfig, cfg.EnvoyHeaders, cfg.EnvoyDedupeRequestID = o.envoyConfig, o.envoyHeaders, o.envoyDedupe
	if i == 1 {
		cfg.PprofAddr = o.pprofAddr // one process: one endpoint profiles every node
	}
	if t != nil {
		kp := t.nodes[cfg.ID]
		cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = kp.CertFile, kp.KeyFile, t.ca
	}
	return cfg
}

// runDev starts the cluster, waits until it is ready, loads the policies,
// prints a summary and serves until ctx ends.
func runDev(ctx context.Context, o devOptions, stdout, stderr io.Writer) error {
	start := time.Now()
	if err := o.validate(); err != nil {
		return err
	}
	policies, err := o.loadPolicies(stderr)
	if err != nil {
		return err
	}
	restarted := dirHasEntries(filepath.Join(o.dir, "node1"))
	rec, recorded, err := readDevRecord(o.dir)
	if err != nil {
		return err
	}
	if restarted && recorded {
		if o.groupsChanged && o.groups != rec.Groups {
			return fmt.Errorf("dev: --groups %d: the cluster in %s was created with --groups %d, and a restarted cluster keeps "+
				"its data groups (see them with quorate admin status); restart it without --groups, or give another --dir "+
				"for a new cluster with %d groups", o.groups, o.dir, rec.Groups, o.groups)
		}
		o.groups = rec.Groups // every node, new ones too, gets the cluster's value
	}
	logs := lockedWriter{mu: new(sync.Mutex), w: stderr}

	var tlsFiles *devTLS
	hc, scheme := http.DefaultClient, "http://"
	if o.tls {
		ids := make([]string, o.nodes)
		for i := range ids {
			ids[i] = fmt.Sprintf("node%d", i+1)
		}
		if tlsFiles, err = openDevTLS(filepath.Join(o.dir, "tls"), ids); err != nil {
			return err
		}
		if hc, err = tlsFiles.client().httpClient(); err != nil {
			return fmt.Errorf("dev: --tls: %w", err)
		}
		scheme = "https://"
	}
	c := newDevCluster(ctx, hc)
	nodes := make([]*node.Node, 0, o.nodes)
	for i := 1; i <= o.nodes; i++ {
		join := ""
		if i > 1 {
			join = nodes[0].APIAddr()
		}
		cfg := o.nodeConfig(i, logs, join, tlsFiles)
		if err := cfg.Validate(); err != nil {
			return errors.Join(fmt.Errorf("dev: %s: %w", cfg.ID, err), c.stop())
		}
		if i == 1 {
			applyMemoryLimit(cfg.MemoryLimit)
		}
		n, err := node.New(cfg)
		if err != nil {
			return errors.Join(fmt.Errorf("dev: starting %s (API %s, Raft %s; see --api-port, --raft-port, --dir): %w",
				cfg.ID, cfg.APIAddr, cfg.RaftAddr, err), c.stop())
		}
		nodes = append(nodes, n)
		c.start(cfg.ID, n)
	}
	base := scheme + nodes[0].APIAddr()
	deadline := start.Add(o.readyTimeout)

	status, err := c.waitReady(ctx, base, o.nodes, o.groups, deadline)
	if err == nil && len(policies) > 0 {
		policies, err = c.applyPolicies(ctx, base, policies, deadline)
	} else if err == nil {
		policies, err = c.listPolicies(ctx, base)
	}
	if err != nil {
		if ctx.Err() != nil && c.failure() == nil {
			return c.stop() // interrupted while starting: a clean stop
		}
		return errors.Join(err, c.stop())
	}

	have := len(status.GetShardMap().GetGroups())
	switch {
	case !restarted:
		err = writeDevRecord(o.dir, devRecord{Groups: o.groups})
	case !recorded && status.GetShardMap() != nil:
		// State from a dev that kept no record: the map says.
		if o.groupsChanged && have != o.groups {
			fmt.Fprintf(stderr, "quorate dev: warning: --groups %d is ignored: the cluster in %s has %d data groups, "+
				"which a restart keeps (give another --dir for a new cluster)\n", o.groups, o.dir, have)
		}
		err = writeDevRecord(o.dir, devRecord{Groups: have})
	}
	if err != nil {
		return errors.Join(err, c.stop())
	}
	writeDevSummary(stdout, o, nodes, status, policies, restarted, tlsFiles)
	fmt.Fprintf(stdout, "ready in %.1fs; press Ctrl-C to stop\n", time.Since(start).Seconds())

	select {
	case <-ctx.Done():
	case <-c.failed:
	}
	fmt.Fprintln(logs, "quorate dev: stopping")
	failure := c.failure()
	stopErr := c.stop()
	if failure != nil {
		return errors.Join(failure, stopErr)
	}
	if stopErr == nil {
		fmt.Fprintf(logs, "quorate dev: stopped; state kept in %s\n", o.dir)
	}
	return stopErr
}

func writeDevSummary(w io.Writer, o devOptions, nodes []*node.Node, status *quoratev1.ClusterStatusResponse, policies []*quoratev1.Policy, restarted bool, t *devTLS) {
	scheme, cli, curl := "http://", "", ""
	prog := shellQuote(o.program)
	if t != nil {
		scheme, cli = "https://", " "+t.cliFlags()
		c := t.client()
		curl = fmt.Sprintf(" --cacert %s --cert %s --key %s", c.ca, c.cert, c.key)
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
		fmt.Fprintf(w, "TLS: CA and certificates in %s; the CLI reaches the cluster with%s\n", t.dir, cli)
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

func dirHasEntries(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}

// devRecordFile, in dev's --dir, records how dev created the cluster.
const devRecordFile = "dev.json"

// devRecord is what dev keeps in devRecordFile.
type devRecord struct {
	Groups int `json:"groups"` // --groups of the new cluster
}

// readDevRecord reads dir's devRecordFile; false when there is none.
func readDevRecord(dir string) (devRecord, bool, error) {
	var r devRecord
	b, err := os.ReadFile(filepath.Join(dir, devRecordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return r, false, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		return r, false, fmt.Errorf("dev: %s: %w", filepath.Join(dir, devRecordFile), err)
	}
	return r, true, nil
}

func writeDevRecord(dir string, r devRecord) error {
	b, err := json.Marshal(r)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, devRecordFile), append(b, '\n'), 0o644)
	}
	if err != nil {
		return fmt.Errorf("dev: recording the cluster's --groups: %w", err)
	}
	return nil
}
