// Package nodetest runs real Quorate clusters inside a test process: every
// node is a node.Node with its own bbolt files under the test's temporary
// directory, its own Raft TCP transport and its own API listener on
// 127.0.0.1. Nothing is mocked. Helpers take testing.TB and call Helper.
//
// For tests that run `quorate serve` processes instead (deploy, devcluster),
// FreePorts finds ports to give them and Get reads their HTTP endpoints;
// CheckMetrics lints any node's /metrics.
package nodetest
