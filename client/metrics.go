package client

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// retryCounts counts the attempts a client retried, by procedure (a
// procedure name is one of the API's RPCs: the set is bounded).
type retryCounts struct {
	mu sync.Mutex
	m  map[string]uint64
}

func (r *retryCounts) add(procedure string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]uint64{}
	}
	r.m[procedure]++
}

func (r *retryCounts) snapshot() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]uint64, len(r.m))
	for k, v := range r.m {
		out[k] = v
	}
	return out
}

var (
	descClientDecisions = prometheus.NewDesc("quorate_client_decisions_total",
		"Admit decisions this client made, by who made them: verified (the cluster), unavailable (denied without the cluster), "+
			"bypassed (allowed without being counted), local (this process's bucket), grant (from a budget lease this client holds).", []string{"outcome"}, nil)
	descClientGrants = prometheus.NewDesc("quorate_client_grants_total",
		"Budget leases (grants) of this client, by event: acquired (a grant begun), renewed, released (given back).",
		[]string{"event"}, nil)
	descClientGrantUnits = prometheus.NewDesc("quorate_client_grant_units_total",
		"Units of this client's grants, by fate: granted (added by the cluster), returned (given back by a release), "+
			"wasted (unspent when the grant's local deadline passed, it was replaced or its release failed); "+
			"for sync (local-plus-global) policies, allowed (allowances answered, each replacing the last) and "+
			"reported (units admitted locally that the cluster was told of).",
		[]string{"fate"}, nil)
	descClientRetries = prometheus.NewDesc("quorate_client_retries_total",
		"Attempts this client retried after a retryable failure, by procedure.", []string{"procedure"}, nil)
	descClientPoliciesUnknown = prometheus.NewDesc("quorate_client_policies_unknown_total",
		"Policies this client decided under but could not read (no budget leases, no on_unavailable for them), each counted once.", nil, nil)
)

// Collector returns a Prometheus collector of the client's counters (Stats
// and its retries). The client registers nothing itself: register the
// collector in the registry of your choice, once per client, e.g.
//
//	reg.MustRegister(c.Collector())
//
// Its labels are bounded (an outcome, a procedure): never a key, caller or
// request ID.
func (c *Client) Collector() prometheus.Collector { return clientCollector{c} }

type clientCollector struct{ c *Client }

func (cc clientCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descClientDecisions
	ch <- descClientGrants
	ch <- descClientGrantUnits
	ch <- descClientRetries
	ch <- descClientPoliciesUnknown
}

func (cc clientCollector) Collect(ch chan<- prometheus.Metric) {
	s := cc.c.Stats()
	for _, o := range []struct {
		name string
		v    uint64
	}{{"verified", s.Verified}, {"unavailable", s.Unavailable}, {"bypassed", s.Bypassed}, {"local", s.Local}, {"grant", s.LocalGrant}} {
		ch <- prometheus.MustNewConstMetric(descClientDecisions, prometheus.CounterValue, float64(o.v), o.name)
	}
	for _, o := range []struct {
		name string
		v    uint64
	}{{"acquired", s.GrantsAcquired}, {"renewed", s.GrantsRenewed}, {"released", s.GrantsReleased}} {
		ch <- prometheus.MustNewConstMetric(descClientGrants, prometheus.CounterValue, float64(o.v), o.name)
	}
	for _, o := range []struct {
		name string
		v    uint64
	}{{"granted", s.UnitsGranted}, {"returned", s.UnitsReturned}, {"wasted", s.UnitsWasted},
		{"allowed", s.UnitsAllowed}, {"reported", s.UnitsReported}} {
		ch <- prometheus.MustNewConstMetric(descClientGrantUnits, prometheus.CounterValue, float64(o.v), o.name)
	}
	ch <- prometheus.MustNewConstMetric(descClientPoliciesUnknown, prometheus.CounterValue, float64(s.PoliciesUnknown))
	for p, v := range cc.c.retries.snapshot() {
		ch <- prometheus.MustNewConstMetric(descClientRetries, prometheus.CounterValue, float64(v), p)
	}
}
