package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/devcluster"
	"github.com/quorate/quorate/node/nodetest"
)

// serve routes raft's own go-metrics into the node's /metrics under
// Quorate's names: after the node has led and committed, its
// quorate_raft_commit_seconds stands beside quorate_raft_commit_index, no
// raft_* name is left, and `promtool check metrics` finds nothing to say.
func TestServeMetricsPassPromtoolCheck(t *testing.T) {
	dir := t.TempDir()
	port := freePortRange(t, 2)
	api := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr devcluster.Output
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--id", "n1", "--data-dir", filepath.Join(dir, "n1"), "--bootstrap",
			"--api-addr", api, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", port+1), "--log-level", "warn"}, &devcluster.Output{}, &stderr)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v\n%s", err, stderr.String())
		}
	}()
	url := "http://" + api + "/metrics"
	nodetest.Eventually(t, 30*time.Second, "raft's commit time in serve's /metrics", func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		text := string(b)
		if !strings.Contains(text, "\nquorate_raft_commit_seconds_count ") || strings.Contains(text, "\nquorate_raft_commit_seconds_count 0\n") ||
			!strings.Contains(text, "\nquorate_raft_commit_index{") {
			return fmt.Errorf("no quorate_raft_commit_seconds with samples beside quorate_raft_commit_index")
		}
		return nil
	})
	if text := nodetest.CheckMetrics(t, http.DefaultClient, url); strings.Contains(text, "\nraft_") {
		t.Errorf("raft's own names in /metrics:\n%s", text)
	}
}

// Every node of `quorate dev` serves a /metrics that promtool's check
// passes.
func TestDevMetricsPassPromtoolCheck(t *testing.T) {
	apiPort := freePortRange(t, 3)
	raftPort := freePortRange(t, 3, apiPort, apiPort+1, apiPort+2)
	dev := startDev(t, []string{"dev", "--dir", t.TempDir(), "--policies", "../../examples/policies.yaml",
		"--api-port", fmt.Sprint(apiPort), "--raft-port", fmt.Sprint(raftPort)})
	for i := range 3 {
		url := fmt.Sprintf("http://127.0.0.1:%d/metrics", apiPort+i)
		// The policies reach each node's replica through the log.
		nodetest.Eventually(t, 10*time.Second, fmt.Sprintf("node%d's zero decisions of api-free", i+1), func() error {
			if text := nodetest.CheckMetrics(t, http.DefaultClient, url); !strings.Contains(text, `quorate_decisions_total{policy="api-free",result="allowed"} 0`) {
				return fmt.Errorf("no zero quorate_decisions_total of api-free before its first decision")
			}
			return nil
		})
	}
	dev.stop(t)
}
