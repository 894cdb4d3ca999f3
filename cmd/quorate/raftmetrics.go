package main

import (
	"fmt"

	gometrics "github.com/hashicorp/go-metrics"

	"github.com/quorate/quorate/node"
)

// Raft's own metrics (its commit time, RPC round trips, FSM and snapshot
// timings). hashicorp/raft emits them through the process-wide go-metrics
// global of github.com/hashicorp/go-metrics, not through anything a node is
// given: a sink there sees the figures of every raft instance of the
// process, all groups together. serve runs one node per process, so it,
// and only it, makes the node's sink (node.RaftMetricsSink: Quorate's
// names, snake_case, peers as labels) that global; the library never
// touches it (several nodes of one process, as in dev and the tests, would
// share it). The per-group figures are the node's quorate_raft_*{group}
// series.

// bridgeRaftMetrics makes n's raft metrics sink the process's go-metrics
// global. The returned function puts the global back to discarding.
func bridgeRaftMetrics(n *node.Node) (stop func(), err error) {
	cfg := gometrics.DefaultConfig("")
	cfg.EnableHostname = false       // no hostname prefix on gauges
	cfg.EnableRuntimeMetrics = false // the registry has the Go collector
	if _, err := gometrics.NewGlobal(cfg, n.RaftMetricsSink()); err != nil {
		return nil, fmt.Errorf("serve: raft's metrics: %w", err)
	}
	return gometrics.Shutdown, nil
}
