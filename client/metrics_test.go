package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quorate/quorate/client"
)

// TestCollectorCountsBypass: with no server reachable, an Admit of a policy
// that allows when the cluster is unavailable is bypassed, and the
// collector, registered in a registry of the test's own, counts it and the
// attempts retried before it.
func TestCollectorCountsBypass(t *testing.T) {
	var retried int
	cl, err := client.New(client.Config{Servers: []string{"127.0.0.1:1"}, Timeout: 300 * time.Millisecond,
		Policies:       []client.Policy{{Name: "p", Limit: 4, Period: time.Hour, OnUnavailable: "allow"}},
		InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		OnRetry: func(client.RetryInfo) { retried++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(cl.Collector())
	d, err := cl.Admit(context.Background(), client.Request{Policy: "p", Key: "k"})
	if err != nil || d.Outcome != client.Bypassed || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	want := `
# HELP quorate_client_decisions_total Admit decisions this client made, by who made them: verified (the cluster), unavailable (denied without the cluster), bypassed (allowed without being counted), local (this process's bucket), grant (from a budget lease this client holds).
# TYPE quorate_client_decisions_total counter
quorate_client_decisions_total{outcome="bypassed"} 1
quorate_client_decisions_total{outcome="grant"} 0
quorate_client_decisions_total{outcome="local"} 0
quorate_client_decisions_total{outcome="unavailable"} 0
quorate_client_decisions_total{outcome="verified"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "quorate_client_decisions_total"); err != nil {
		t.Fatal(err)
	}
	if retried == 0 {
		t.Fatal("no attempt retried against an unreachable server")
	}
	if got := testutil.ToFloat64(counterOf(t, reg, "quorate_client_retries_total")); int(got) != retried {
		t.Fatalf("quorate_client_retries_total %v, want %d (OnRetry's count)", got, retried)
	}
}

// counterOf sums the series of the counter name in reg, as a collector
// testutil.ToFloat64 reads.
func counterOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name})
	c.Add(sum)
	return c
}
