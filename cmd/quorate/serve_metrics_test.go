package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serve routes raft's own go-metrics into the node's /metrics: after the
// node has led and committed, raft_* series (raft's names, no group label)
// stand beside the node's quorate_raft_*{group} ones.
func TestServeMetricsIncludeRaftsOwn(t *testing.T) {
	dir := t.TempDir()
	port := freePortRange(t, 2)
	api := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--id", "n1", "--data-dir", filepath.Join(dir, "n1"), "--bootstrap",
			"--api-addr", api, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", port+1), "--log-level", "warn"}, &lockedBuffer{}, &stderr)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v\n%s", err, stderr.String())
		}
	}()
	// raftSeries is the names of the raft_* and quorate_raft_* families
	// of the node's /metrics.
	raftSeries := func() (map[string]bool, error) {
		resp, err := http.Get("http://" + api + "/metrics")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
		}
		out := map[string]bool{}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "raft_") || strings.HasPrefix(line, "quorate_raft_") {
				name, _, _ := strings.Cut(line, "{")
				name, _, _ = strings.Cut(name, " ")
				out[name] = true
			}
		}
		return out, sc.Err()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := raftSeries()
		if err == nil && got["raft_commitTime_count"] && got["quorate_raft_commit_index"] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no raft_commitTime beside quorate_raft_commit_index in /metrics after 30s: %v, %v\n%s", got, err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
