package main

import (
	"fmt"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	gometricsprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// Raft's own metrics (raft_commitTime, raft_apply, raft_rpc_*, ...).
// hashicorp/raft emits them through the process-wide go-metrics global of
// github.com/hashicorp/go-metrics, not through anything a node is given: a
// sink there sees the figures of every raft instance of the process, all
// groups together, with no group or node label. serve runs one node per
// process, so it, and only it, routes them into that node's registry; the
// library never touches the global (several nodes of one process, as in
// the tests, would share it). The per-group figures are the node's
// quorate_raft_*{group} series.

// raftMetricsExpiry drops a raft metric not emitted for this long (a
// timer of a group that no longer leads here).
const raftMetricsExpiry = 2 * time.Minute

// bridgeRaftMetrics installs a go-metrics Prometheus sink registered in
// reg as the process's go-metrics global. The returned function puts the
// global back to discarding.
func bridgeRaftMetrics(reg prometheus.Registerer) (stop func(), err error) {
	sink, err := gometricsprom.NewPrometheusSinkFrom(gometricsprom.PrometheusOpts{
		Name: "quorate_raft_go_metrics_sink", Registerer: reg, Expiration: raftMetricsExpiry})
	if err != nil {
		return nil, fmt.Errorf("serve: raft's metrics: %w", err)
	}
	cfg := gometrics.DefaultConfig("")
	cfg.EnableHostname = false       // no hostname prefix on gauges
	cfg.EnableRuntimeMetrics = false // the registry has the Go collector
	if _, err := gometrics.NewGlobal(cfg, sink); err != nil {
		return nil, fmt.Errorf("serve: raft's metrics: %w", err)
	}
	return gometrics.Shutdown, nil
}
