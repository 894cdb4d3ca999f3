package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/devcluster"
)

// Nodes started with the same settings, all but --id (a StatefulSet's pods),
// form a cluster with --bootstrap-id: the node it names bootstraps, the
// other joins --join. --print-config shows what each does; a node that is
// not the one named is refused with --bootstrap, or without --join.
func TestServeBootstrapID(t *testing.T) {
	dir := t.TempDir()
	port := freePortRange(t, 4)
	shared := writeTestFile(t, dir, "quorate.yaml", fmt.Sprintf(`# every node's settings
bootstrap-id: n1
join: 127.0.0.1:%d
log-level: error
heartbeat-timeout: 300ms
election-timeout: 300ms
leader-lease-timeout: 300ms
`, port))
	nodeArgs := func(i int) []string {
		return []string{"serve", "--config", shared, "--id", fmt.Sprintf("n%d", i+1),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"--api-addr", fmt.Sprintf("127.0.0.1:%d", port+2*i), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", port+2*i+1)}
	}

	_, first := printedConfig(t, nodeArgs(0)[1:]...)
	if first["bootstrap"] != true || first["join"] != "" {
		t.Errorf("n1, the node --bootstrap-id names: bootstrap %v, join %q; want true and none", first["bootstrap"], first["join"])
	}
	_, second := printedConfig(t, nodeArgs(1)[1:]...)
	if second["bootstrap"] != false || second["join"] != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Errorf("n2: bootstrap %v, join %q; want false and 127.0.0.1:%d", second["bootstrap"], second["join"], port)
	}

	_, _, err := runCLI(t, append(nodeArgs(1), "--bootstrap")...)
	wantErrNaming(t, err, "--bootstrap", "--bootstrap-id", "n2")
	_, _, err = runCLI(t, "serve", "--id", "n2", "--data-dir", filepath.Join(dir, "n2"), "--bootstrap-id", "n1")
	wantErrNaming(t, err, "--join", "--bootstrap-id", "n2")

	// Both nodes start at once, as a StatefulSet's pods do: n2's join is
	// retried until n1 has bootstrapped, and each becomes ready only once
	// registered in the one cluster.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make([]chan error, 2)
	stderr := make([]*devcluster.Output, 2)
	for i := range done {
		done[i], stderr[i] = make(chan error, 1), &devcluster.Output{}
		go func() { done[i] <- run(ctx, nodeArgs(i), &devcluster.Output{}, stderr[i]) }()
	}
	for i := range done {
		url := fmt.Sprintf("http://127.0.0.1:%d/readyz", port+2*i)
		deadline := time.Now().Add(60 * time.Second)
		for {
			resp, err := http.Get(url)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				err = errors.New(resp.Status)
			}
			if time.Now().After(deadline) {
				t.Fatalf("n%d: %s not ready after 60s: %v\n%s", i+1, url, err, stderr[i].String())
			}
			select {
			case err := <-done[i]:
				t.Fatalf("n%d returned before it was ready: %v\n%s", i+1, err, stderr[i].String())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	out, errOut, err := runCLI(t, "admin", "status", "--server", fmt.Sprintf("127.0.0.1:%d", port+2))
	if err != nil {
		t.Fatalf("admin status: %v\n%s", err, errOut)
	}
	for _, id := range []string{"n1", "n2"} {
		if !strings.Contains(out, id) {
			t.Errorf("admin status on n2 does not list %s:\n%s", id, out)
		}
	}
	cancel()
	for i := range done {
		if err := <-done[i]; err != nil {
			t.Errorf("n%d: %v after a cancel\n%s", i+1, err, stderr[i].String())
		}
	}
}
