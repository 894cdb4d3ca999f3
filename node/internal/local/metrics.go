package local

import "github.com/prometheus/client_golang/prometheus"

var (
	descHeld = prometheus.NewDesc("quorate_node_grants_held",
		"Budget leases (grants, or sync-mode allowances) this node holds now for the callers it answers.", nil, nil)
	descDecisions = prometheus.NewDesc("quorate_node_local_decisions_total",
		"Requests this node allowed from the grants it holds, without a log entry each (a multi-check request counts once).", nil, nil)
	descDuplicates = prometheus.NewDesc("quorate_node_local_duplicates_total",
		"Repeats of requests this node decided from its grants, answered with the first answer.", nil, nil)
	descEvents = prometheus.NewDesc("quorate_node_grants_total",
		"The grants this node held, by event: acquired (a grant begun), renewed, released (given back).", []string{"event"}, nil)
	descUnits = prometheus.NewDesc("quorate_node_grant_units_total",
		"Units of the grants this node held, by fate: granted (added by the cluster), returned (given back by a release), "+
			"wasted (unspent when a grant's local deadline passed, it was replaced or its release failed); "+
			"for sync (local-plus-global) policies, allowed (allowances answered) and reported (units admitted here that the cluster was told of).",
		[]string{"fate"}, nil)
)

// Collector returns a Prometheus collector of d's counters; every series
// is there from the start.
func (d *Decider) Collector() prometheus.Collector { return collector{d} }

type collector struct{ d *Decider }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHeld, descDecisions, descDuplicates, descEvents, descUnits} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.d.Stats()
	ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(s.GrantsHeld))
	ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(s.LocalGrant))
	ch <- prometheus.MustNewConstMetric(descDuplicates, prometheus.CounterValue, float64(s.Duplicates))
	for _, e := range []struct {
		name string
		v    uint64
	}{{"acquired", s.GrantsAcquired}, {"renewed", s.GrantsRenewed}, {"released", s.GrantsReleased}} {
		ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(e.v), e.name)
	}
	for _, u := range []struct {
		name string
		v    uint64
	}{{"granted", s.UnitsGranted}, {"returned", s.UnitsReturned}, {"wasted", s.UnitsWasted},
		{"allowed", s.UnitsAllowed}, {"reported", s.UnitsReported}} {
		ch <- prometheus.MustNewConstMetric(descUnits, prometheus.CounterValue, float64(u.v), u.name)
	}
}
