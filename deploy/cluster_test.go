package deploy

import (
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/node/nodetest"
)

// exported is what a cluster's /metrics pages hold: for each sample name
// (a histogram's _bucket, _sum and _count apart), its label names and the
// values each takes.
type exported map[string]map[string]map[string]bool

// The cluster of `quorate serve` processes the package's tests scrape,
// started once (exportedMetrics) and stopped by TestMain.
var (
	clusterOnce   sync.Once
	clusterProcs  []*exec.Cmd
	clusterLogs   []*lockedBuffer
	clusterMet    exported
	clusterClient *http.Client // trusts the cluster's CA
	clusterError  string
)

// exportedMetrics starts three `quorate serve` processes of the built
// binary on loopback, with TLS from a development CA, as in production
// (the first bootstraps with two data groups, the others join it), applies examples/policies.yaml (every algorithm, a
// concurrency policy among them), and returns the union of the three
// nodes' /metrics once each shows the policies' series and the data
// groups' replicas. Being one process per node, as in production, each
// node also exports raft's own figures (quorate_raft_*_seconds).
func exportedMetrics(t *testing.T) exported {
	t.Helper()
	bin := quorateBinary(t)
	clusterOnce.Do(func() {
		clusterMet, clusterError = startCluster(bin)
	})
	if clusterError != "" {
		t.Fatal(clusterError)
	}
	return clusterMet
}

func startCluster(bin string) (exported, string) {
	base, err := nodetest.FreePorts(6)
	if err != nil {
		return nil, err.Error()
	}
	ca, err := certs.NewDevCA(filepath.Join(binDir, "tls"), []string{"n1", "n2", "n3"}, nil)
	if err != nil {
		return nil, err.Error()
	}
	src, err := certs.NewSource(certs.Options{CertFile: ca.Admin.CertFile, KeyFile: ca.Admin.KeyFile, CAFile: ca.CAFile, Interval: -1})
	if err != nil {
		return nil, err.Error()
	}
	tlsCfg, err := src.ClientConfig(certs.ClientOptions{ServerName: "127.0.0.1"})
	if err != nil {
		return nil, err.Error()
	}
	clusterClient = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}}
	api := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", base+i) }
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		args := []string{"serve", "--id", id, "--data-dir", filepath.Join(binDir, id),
			"--api-addr", api(i), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", base+3+i), "--groups", "2", "--expect-nodes", "3",
			"--tls-cert", ca.Nodes[id].CertFile, "--tls-key", ca.Nodes[id].KeyFile, "--tls-ca", ca.CAFile, "--log-level", "warn"}
		if i == 0 {
			args = append(args, "--bootstrap")
		} else {
			args = append(args, "--join", api(0))
		}
		cmd := exec.Command(bin, args...)
		logs := new(lockedBuffer)
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			return nil, fmt.Sprintf("starting node %d: %v", i+1, err)
		}
		clusterProcs, clusterLogs = append(clusterProcs, cmd), append(clusterLogs, logs)
		if i == 0 {
			if err := waitFor(30*time.Second, func() error { return ready(api(0)) }); err != nil {
				return nil, "node 1 not ready: " + err.Error() + "\n" + logs.String()
			}
		}
	}
	if out, err := runErr("..", bin, "policy", "apply", "-f", "examples/policies.yaml", "--server", api(0),
		"--tls-ca", ca.CAFile, "--tls-cert", ca.Admin.CertFile, "--tls-key", ca.Admin.KeyFile); err != nil {
		return nil, fmt.Sprintf("quorate policy apply: %v\n%s", err, out)
	}
	all := exported{}
	for i := range 3 {
		var page exported
		err := waitFor(60*time.Second, func() error {
			if err := ready(api(i)); err != nil {
				return err
			}
			text, err := nodetest.Get(clusterClient, "https://"+api(i)+"/metrics")
			if err != nil {
				return err
			}
			// The policies and the data groups reach every node through the log.
			for _, want := range []string{`quorate_decisions_total{policy="reports-active",result="denied"} 0`, `quorate_raft_state{group="2",state="leader"}`} {
				if !strings.Contains(text, want) {
					return fmt.Errorf("no %s yet", want)
				}
			}
			page, err = parseMetrics(text)
			return err
		})
		if err != nil {
			return nil, fmt.Sprintf("node %d's /metrics: %v\n%s", i+1, err, clusterLogs[i].String())
		}
		for name, labels := range page {
			if all[name] == nil {
				all[name] = map[string]map[string]bool{}
			}
			for l, values := range labels {
				if all[name][l] == nil {
					all[name][l] = map[string]bool{}
				}
				for v := range values {
					all[name][l][v] = true
				}
			}
		}
	}
	return all, ""
}

// stopCluster stops the cluster's processes, if it was started.
func stopCluster() {
	for _, cmd := range clusterProcs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range clusterProcs {
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// parseMetrics reads an exposition text into its sample names and labels.
func parseMetrics(text string) (exported, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("not Prometheus' text format: %w", err)
	}
	out := exported{}
	add := func(name string, m *dto.Metric, extra ...string) {
		if out[name] == nil {
			out[name] = map[string]map[string]bool{}
		}
		for _, lp := range m.GetLabel() {
			if out[name][lp.GetName()] == nil {
				out[name][lp.GetName()] = map[string]bool{}
			}
			out[name][lp.GetName()][lp.GetValue()] = true
		}
		for _, l := range extra {
			if out[name][l] == nil {
				out[name][l] = map[string]bool{}
			}
		}
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				add(name+"_bucket", m, "le")
				add(name+"_sum", m)
				add(name+"_count", m)
			case dto.MetricType_SUMMARY:
				add(name, m, "quantile")
				add(name+"_sum", m)
				add(name+"_count", m)
			default:
				add(name, m)
			}
		}
	}
	return out, nil
}

func ready(addr string) error {
	_, err := nodetest.Get(clusterClient, "https://"+addr+"/readyz")
	return err
}

// waitFor polls cond until it returns nil or a stopWaiting, or timeout
// passes, and returns its last error then.
func waitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) || errors.As(err, new(stopWaiting)) {
			return err
		}
		time.Sleep(50 * time.Millisecond) // polling, not synchronisation
	}
}

// stopWaiting is an error of waitFor's condition that waiting cannot mend.
type stopWaiting struct{ error }
