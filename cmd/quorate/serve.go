package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/cmd/internal/apiflags"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node"
)

// nodeTokenEnv names the environment variable the node token defaults to
// without --node-token-file.
const nodeTokenEnv = "QUORATE_NODE_TOKEN"

func newServeCmd() *cobra.Command {
	cfg := node.DefaultConfig()
	var clockFile, nodeTokenFile, configFile, bootstrapID string
	var printCfg bool
	groups := newGroupsFlag()
	cmd := &cobra.Command{
		Use:   "serve (--config FILE | --id ID --data-dir DIR (--bootstrap | --join API_ADDR))",
		Short: "Run one node of a Quorate cluster",
		Long: "Serve runs one node until SIGINT or SIGTERM, then shuts down gracefully (handing\n" +
			"off leadership when it leads).\n\n" +
			"The first node of a new cluster starts with --bootstrap; every other node starts\n" +
			"with --join and the API (or --admin-addr) address of any member. Both are ignored once the data\n" +
			"directory holds state: a restarted node rejoins with what it has. A node whose\n" +
			"--data-dir is empty or absent is refused without one of them. Nodes started with the same\n" +
			"settings (a Kubernetes StatefulSet) give --bootstrap-id ID and --join instead: the node whose\n" +
			"--id is ID bootstraps, every other one joins.\n\n" +
			"--config names a YAML file of these settings, each key a flag's name without its dashes\n" +
			"(api-addr: 10.0.0.1:7070; a repeatable flag's key holds a list); a flag given on the command\n" +
			"line overrides the file's key. --print-config prints the effective settings as such a file and\n" +
			"exits. Secrets are files (--node-token-file, --peer-secret-file, --tls-key), never values.",
		Example: "  quorate serve --config /etc/quorate/quorate.yaml\n" +
			"  quorate serve --config /etc/quorate/quorate.yaml --print-config\n" +
			"  quorate serve --id n1 --data-dir /var/lib/quorate --api-addr 10.0.0.1:7070 --raft-addr 10.0.0.1:7170 --bootstrap \\\n" +
			"      --tls-cert n1.pem --tls-key n1-key.pem --tls-ca ca.pem --access-file /etc/quorate/access.yaml --token-file /etc/quorate/tokens.yaml\n" +
			"  quorate serve --id n2 --data-dir /var/lib/quorate --api-addr 10.0.0.2:7070 --raft-addr 10.0.0.2:7170 --join 10.0.0.1:7070 \\\n" +
			"      --tls-cert n2.pem --tls-key n2-key.pem --tls-ca ca.pem --access-file /etc/quorate/access.yaml --token-file /etc/quorate/tokens.yaml",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configFile != "" {
				if err := applyConfigFile(cmd, configFile); err != nil {
					return err
				}
			}
			if err := resolveBootstrapID(&cfg, bootstrapID); err != nil {
				return err
			}
			if printCfg {
				return printConfig(cmd, cmd.OutOrStdout())
			}
			cfg.LogOutput = cmd.ErrOrStderr()
			token, err := apiflags.SecretFromFileOrEnv("node-token-file", nodeTokenFile, nodeTokenEnv)
			if err != nil {
				return err
			}
			cfg.NodeToken = token
			var reload chan os.Signal
			if clockFile != "" {
				// Listen before the first read: a SIGUSR1 sent after the
				// file changed is then either seen here or by that read.
				reload = make(chan os.Signal, 1)
				signal.Notify(reload, syscall.SIGUSR1)
				defer signal.Stop(reload)
				d, err := readClockFile(clockFile)
				if err != nil {
					return fmt.Errorf("--debug-clock-file: %w", err)
				}
				cfg.ClockOffset = d
			}
			cfg.DataGroups = groups.resolve(cfg.ExpectNodes)
			if err := cfg.Validate(); err != nil {
				return err
			}
			if !cfg.Bootstrap && cfg.Join == "" && !dirHasEntries(cfg.DataDir) {
				// Such a node would wait, forever, to be added by a cluster
				// that does not know it.
				return fmt.Errorf("serve: --data-dir %s holds no state, so this node needs either --bootstrap (to form a new "+
					"cluster with it as the first member) or --join HOST:PORT (the API address of any member of an existing cluster)", cfg.DataDir)
			}
			applyMemoryLimit(cfg.MemoryLimit)
			n, err := node.New(cfg)
			if err != nil {
				return err
			}
			stopRaftMetrics, err := bridgeRaftMetrics(n)
			if err != nil {
				_ = n.Close()
				return err
			}
			defer stopRaftMetrics()
			fmt.Fprintf(cmd.ErrOrStderr(), "quorate: node %s: API on %s, Raft on %s\n", cfg.ID, n.APIAddr(), n.RaftAddr())
			if reload != nil {
				stop := make(chan struct{})
				done := make(chan struct{})
				go func() {
					defer close(done)
					reloadClockOffset(n, clockFile, reload, stop, cmd.ErrOrStderr())
				}()
				defer func() { close(stop); <-done }()
			}
			// Run shuts the node down (and closes it) when the context ends.
			return n.Run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&configFile, "config", "", "YAML file of serve's settings, each key a flag's name (api-addr: ..., data-dir: ...); flags given\n"+
		"on the command line override it")
	fs.BoolVar(&printCfg, "print-config", false, "print the effective settings (defaults, --config, flags) as a config file and exit without starting")
	fs.StringVar(&cfg.ID, "id", cfg.ID, "this node's ID, unique in the cluster (required)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory of the Raft log, stable store and snapshots (required)")
	fs.StringVar(&cfg.APIAddr, "api-addr", cfg.APIAddr, "host:port to serve the API on (Connect, gRPC, gRPC-Web, JSON)")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", cfg.AdminAddr, "host:port of a listener of its own for the admin API (policies, nodes, groups, plans, audit);\n"+
		"the API port then refuses admin calls, and a joining node's --join names this address. Default: admin on --api-addr")
	fs.StringVar(&cfg.PprofAddr, "pprof-addr", cfg.PprofAddr, "loopback host:port of a profiling endpoint (/debug/pprof/, for go tool pprof); off by default")
	fs.Var(byteSize{&cfg.MemoryLimit}, "memory-limit", "soft limit on the process's memory (512MiB, 2GiB): the runtime collects garbage more often near it\n"+
		"and hands free memory back to stay under it; 0: none")
	fs.StringVar(&cfg.RaftAddr, "raft-addr", cfg.RaftAddr, "host:port for Raft traffic between nodes")
	fs.StringVar(&cfg.AdvertiseAPIAddr, "advertise-api-addr", cfg.AdvertiseAPIAddr, "API host:port other nodes use to reach this one (default --api-addr)")
	fs.StringVar(&cfg.AdvertiseRaftAddr, "advertise-raft-addr", cfg.AdvertiseRaftAddr, "Raft host:port peers dial (default --raft-addr)")
	fs.BoolVar(&cfg.Bootstrap, "bootstrap", cfg.Bootstrap, "form a new cluster with this node as its only voter (ignored when --data-dir has state)")
	fs.StringVar(&bootstrapID, "bootstrap-id", "", "the ID of the node that bootstraps: that node starts as with --bootstrap (its --join is ignored),\n"+
		"every other node joins --join; give every node the same value (for nodes started with the same settings)")
	fs.Var(groups, "groups", groupsUsage+"; give every node the same value")
	fs.IntVar(&cfg.ExpectNodes, "expect-nodes", cfg.ExpectNodes, "registered nodes the shard map waits for, so replicas spread over them from the start")
	fs.StringVar(&cfg.Join, "join", cfg.Join, "API address (host:port, http://host:port or https://host:port; host:port is https with --tls-cert) of any\n"+
		"member to join (ignored when --data-dir has state)")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert", cfg.TLSCertFile, "PEM certificate of this node (URI SAN quorate://node/<--id>), served on the API and the peer\n"+
		"port; with --tls-key and --tls-ca, both ports are TLS (mutual between nodes). Reloaded when it changes")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key", cfg.TLSKeyFile, "PEM private key of --tls-cert")
	fs.StringVar(&cfg.TLSCAFile, "tls-ca", cfg.TLSCAFile, "PEM CA bundle that verifies other nodes' and callers' certificates (and signs --tls-cert)")
	fs.StringVar(&cfg.PeerSecretFile, "peer-secret-file", cfg.PeerSecretFile, "file of the cluster's peer secret (the same on every node; create it with\n"+
		"head -c 32 /dev/urandom | base64 > peer.secret; chmod 600 peer.secret): peers prove they hold it before the peer port\n"+
		"serves them. Required with --access-file when the peer port is plaintext beyond loopback")
	fs.BoolVar(&cfg.InsecurePlaintext, "insecure-plaintext", cfg.InsecurePlaintext, "serve a non-loopback --api-addr or --raft-addr without TLS: anyone who reaches the ports\n"+
		"can read and change the cluster's state. Without it, a plaintext node listens on loopback only")
	fs.Uint32Var(&cfg.MaxFeatureLevel, "max-feature-level", cfg.MaxFeatureLevel, fmt.Sprintf("highest log feature level this node registers (at most %d, this binary's; 0: this binary's); lower it to hold\n"+
		"a later binary's new log features back during a rolling upgrade, so the cluster can still go back to the old binary", fsm.FeatureLevel))
	fs.StringVar(&cfg.AccessFile, "access-file", cfg.AccessFile, "access file: the roles (admin, client) and policies of each caller; reloaded when it changes.\n"+
		"Required unless the API listens on loopback only (without one, every caller may do everything)")
	fs.StringArrayVar(&cfg.EnvoyConfig, "envoy-config", cfg.EnvoyConfig, "serve Envoy's rate-limit service (envoy.service.ratelimit.v3) on the API port with this file's domains and\n"+
		"descriptors, in the rate-limit service's YAML format; repeatable; reloaded when it changes. The node applies its policies")
	fs.BoolVar(&cfg.EnvoyHeaders, "envoy-headers", cfg.EnvoyHeaders, "add the RateLimit-Policy and RateLimit header fields to the rate-limit service's answers")
	fs.BoolVar(&cfg.EnvoyDedupeRequestID, "envoy-dedupe-request-id", cfg.EnvoyDedupeRequestID, envoyDedupeUsage)
	fs.StringVar(&cfg.TokenFile, "token-file", cfg.TokenFile, "token file: callers and the SHA-256 of their bearer tokens (quorate token create); reloaded when it changes")
	fs.StringVar(&nodeTokenFile, "node-token-file", "", "file holding the bearer token this node sends on its --join, for a cluster without TLS that has an\n"+
		"access file: a caller with the admin role (default $"+nodeTokenEnv+"). With TLS, the node's certificate is enough")
	apiflags.RefuseSecretFlag(cmd, "node-token", "node-token-file", nodeTokenEnv)
	addNodeTuningFlags(cmd, &cfg)
	fs.DurationVar(&cfg.ClockOffset, "debug-clock-offset", cfg.ClockOffset, "added to this node's clock when it stamps log entries; for fault-injection tests only")
	_ = fs.MarkHidden("debug-clock-offset")
	fs.StringVar(&clockFile, "debug-clock-file", clockFile, "file holding a duration added to this node's clock (overrides --debug-clock-offset), read at start and again on SIGUSR1; for fault-injection tests only")
	_ = fs.MarkHidden("debug-clock-file")
	fs.StringToStringVar(&cfg.DebugDialMap, "debug-dial-map", cfg.DebugDialMap, "PEER=VIA,...: dial host:port VIA whenever a peer's host:port PEER is dialed; for fault-injection tests only")
	_ = fs.MarkHidden("debug-dial-map")
	return cmd
}

// resolveBootstrapID sets cfg's Bootstrap and Join for --bootstrap-id id
// (none when id is ""): the node whose ID is id bootstraps, and its --join
// is dropped; every other node joins, so it needs --join and must not have
// --bootstrap. --print-config then shows what the node does.
func resolveBootstrapID(cfg *node.Config, id string) error {
	switch {
	case id == "":
		return nil
	case cfg.ID == id:
		cfg.Bootstrap, cfg.Join = true, ""
		return nil
	case cfg.Bootstrap:
		return fmt.Errorf("serve: --bootstrap: --bootstrap-id %s names the node that bootstraps, and this is node %q: drop --bootstrap", id, cfg.ID)
	case cfg.Join == "":
		return fmt.Errorf("serve: --bootstrap-id %s names another node to bootstrap, so node %q joins and needs --join HOST:PORT "+
			"(the API address of node %s or of any member)", id, cfg.ID, id)
	}
	return nil
}

// readClockFile reads a Go duration (e.g. "-1.5s"); blank means 0.
func readClockFile(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// reloadClockOffset sets n's clock offset from path on every signal on sig
// until stop is closed. A file it cannot read or parse leaves the offset as
// it was, with a message on stderr.
func reloadClockOffset(n *node.Node, path string, sig <-chan os.Signal, stop <-chan struct{}, stderr io.Writer) {
	for {
		select {
		case <-stop:
			return
		case <-sig:
		}
		d, err := readClockFile(path)
		if err != nil {
			fmt.Fprintf(stderr, "quorate: node %s: --debug-clock-file: %v; clock offset stays %v\n", n.ID(), err, n.ClockOffset())
			continue
		}
		n.SetClockOffset(d)
	}
}

// addNodeTuningFlags registers the flags of cfg's timeouts, request limits,
// snapshots and logging, with cfg's values as defaults.
func addNodeTuningFlags(cmd *cobra.Command, cfg *node.Config) {
	fs := cmd.Flags()
	fs.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", cfg.HeartbeatTimeout, "how long a follower waits without hearing from the leader before an election")
	fs.DurationVar(&cfg.ElectionTimeout, "election-timeout", cfg.ElectionTimeout, "how long a candidate waits before a new election (≥ --heartbeat-timeout)")
	fs.DurationVar(&cfg.LeaderLeaseTimeout, "leader-lease-timeout", cfg.LeaderLeaseTimeout, "how long a leader stays leader without a quorum (≤ --heartbeat-timeout)")
	fs.DurationVar(&cfg.CommitTimeout, "commit-timeout", cfg.CommitTimeout, "longest wait before the leader sends an empty AppendEntries")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", cfg.RequestTimeout, "server-side cap on one API request (a shorter client deadline wins)")
	fs.IntVar(&cfg.MaxConns, "max-conns", cfg.MaxConns, fmt.Sprintf("connections the API port (and the admin listener) holds; more are closed at once (default %d)", node.DefaultMaxConns))
	fs.IntVar(&cfg.MaxConnsPerIP, "max-conns-per-ip", cfg.MaxConnsPerIP, fmt.Sprintf("connections the API port (and the admin listener) holds from one client IP (default %d)", node.DefaultMaxConnsPerIP))
	fs.IntVar(&cfg.MaxStreamsPerConn, "max-streams-per-conn", cfg.MaxStreamsPerConn, fmt.Sprintf("calls one HTTP/2 connection carries at once, on every port (default %d)", node.DefaultMaxStreamsPerConn))
	fs.IntVar(&cfg.MaxRequestBytes, "max-request-bytes", cfg.MaxRequestBytes, "largest API request, after decompression; larger ones are refused while read (resource_exhausted)")
	fs.IntVar(&cfg.MaxPeerRequestBytes, "max-peer-request-bytes", cfg.MaxPeerRequestBytes, "largest request on the peer port (forwarded calls, slot-migration pages); ≥ --max-request-bytes")
	fs.Var(byteSize{&cfg.MaxInflightBytes}, "max-inflight-bytes", "request bytes the API port (and the admin listener, each) holds at once across all its calls (256MiB, 1GiB):\n"+
		"bodies as read, and what compressed ones may inflate to (1032 times their size, up to --max-request-bytes);\n"+
		"a call past it is refused at once (resource_exhausted, Retry-After). Default: a 16th of the memory limit\n"+
		"(--memory-limit, else GOMEMLIMIT, else the cgroup's), at least twice --max-request-bytes; 64MiB without a limit.\n"+
		"The peer port's forwarding server gets at least twice --max-peer-request-bytes")
	fs.IntVar(&cfg.MigrationChunkBytes, "migration-chunk-bytes", cfg.MigrationChunkBytes, fmt.Sprintf("state one chunk of a slot move carries (%d to %d); the same on every node",
		1<<10, node.MaxMigrationChunkBytes))
	fs.DurationVar(&cfg.MigrationProgressInterval, "migration-progress-interval", cfg.MigrationProgressInterval, "how often a slot move's copy records its progress in the plan, and so how soon a cancel\n"+
		"stops it (1ms to 1m)")
	fs.DurationVar(&cfg.RequestBodyTimeout, "request-body-timeout", cfg.RequestBodyTimeout, "longest a request body may take to arrive after its headers (deadline_exceeded); the call itself may run longer")
	fs.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", cfg.SnapshotThreshold, "log entries since the last snapshot that trigger a new one")
	fs.DurationVar(&cfg.SnapshotInterval, "snapshot-interval", cfg.SnapshotInterval, "how often to check whether to snapshot")
	fs.Uint64Var(&cfg.TrailingLogs, "trailing-logs", cfg.TrailingLogs, "log entries kept after a snapshot, for lagging followers")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
	fs.DurationVar(&cfg.PeerHandshakeTimeout, "peer-handshake-timeout", cfg.PeerHandshakeTimeout, "how long a peer connection may take to send its header and first byte")
	fs.DurationVar(&cfg.PeerIdleTimeout, "peer-idle-timeout", cfg.PeerIdleTimeout, "close a peer connection that sent nothing for this long, or a shared Raft connection whose frame\n"+
		"does not arrive whole within it (the same on every node)")
}

// envoyDedupeUsage is the help of --envoy-dedupe-request-id (serve's and
// dev's).
const envoyDedupeUsage = "answer a rate-limit call whose x-request-id was already decided as the first, spending nothing. Only where\n" +
	"Envoy always generates the ID: a client whose own x-request-id Envoy passes on (preserve_external_request_id,\n" +
	"an internal address) could pin it and never be counted again"
