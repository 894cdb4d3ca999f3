package node

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorate/quorate/node/internal/replica"
	"github.com/quorate/quorate/shard"
)

// The metrics of what an operator must act on before it fails: the
// expiry of the TLS certificates the node serves and its replicas stopped
// for damaged files. Read at scrape time, so they follow a reload of the
// TLS files and a replica's damage as they happen.

var (
	descCertExpiry = prometheus.NewDesc("quorate_tls_certificate_expiry_timestamp_seconds",
		"When the TLS certificates the node serves expire (NotAfter, Unix seconds), as last loaded (the files are reloaded when they change): role=\"node\" the node's own certificate, role=\"ca\" the earliest of the CA bundle's. Absent on a node without TLS.",
		[]string{"role"}, nil)
	descReplicaDamaged = groupDesc("quorate_replica_damaged",
		"1 when this node's replica of the group is stopped because its files are damaged (its status shows the file and the recovery), else 0; one series for every group the node hosts or holds a damaged replica of.")
)

// healthCollector collects the certificate expiry and replica damage of
// m's node.
type healthCollector struct{ m *metrics }

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCertExpiry
	ch <- descReplicaDamaged
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.m.n
	if st, ok := n.tls.status(); ok {
		if !st.NotAfter.IsZero() {
			ch <- prometheus.MustNewConstMetric(descCertExpiry, prometheus.GaugeValue, float64(st.NotAfter.Unix()), "node")
		}
		if st.CACount > 0 {
			ch <- prometheus.MustNewConstMetric(descCertExpiry, prometheus.GaugeValue, float64(st.CANotAfter.Unix()), "ca")
		}
	}
	if n.meta == nil || n.meta.Raft == nil {
		return
	}
	damaged := map[shard.GroupID]bool{}
	for _, g := range n.engine.Hosted() {
		// A replica found damaged while it runs is stopped: the meta
		// group's stays hosted, shut down, a data group's leaves the
		// hosted ones for the damaged ones below.
		err, _ := g.Health.Last()
		damaged[g.ID] = damaged[g.ID] || errors.Is(err, replica.ErrDamaged)
	}
	for _, gs := range n.groups.DamagedStates() {
		damaged[shard.GroupID(gs.GetId())] = true
	}
	for id, d := range damaged {
		v := 0.0
		if d {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descReplicaDamaged, prometheus.GaugeValue, v, groupLabel(id))
	}
}
