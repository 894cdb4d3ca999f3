// Package devcluster runs a whole Quorate cluster in one process on
// 127.0.0.1, as `quorate dev` does: node i (node1..nodeN) serves the API on
// APIPort+i-1 and Raft on RaftPort+i-1, with its state in Dir/node<i>;
// node1 bootstraps the cluster and the others join it. It owns starting
// the nodes, the throwaway CA of a TLS cluster (Dir/tls), waiting until the
// cluster is ready, loading its policies, the record of how the cluster was
// created (Dir/dev.json: its data groups, which a restart keeps) and
// stopping it; the CLI parses dev's flags and prints what it started. The
// tests of the commands start their clusters with it too.
//
// Errors name the flags of `quorate dev` (--groups, --tls, --ready-timeout),
// whose fields of Config they are.
package devcluster
