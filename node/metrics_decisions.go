package node

import "github.com/prometheus/client_golang/prometheus"

// The decisions this node made as the leader of its groups, and their hot
// keys, read at scrape time from the node's decisionStats (decisions.go):
// the counts the status page and NodeState.policy_decisions show. They
// differ from quorate_decisions_total, counted by the API at the node asked
// (metrics.go): a leader counts each check of an Admit it decided, under
// the check's policy, and neither errors nor repeats of a request ID; the
// node asked counts each request once, under the policy of the check that
// denied it (else its first), errors and repeats included. Summed over the
// members, each counts every decision once.

var (
	descLeaderDecisions = prometheus.NewDesc("quorate_leader_decisions_total",
		"Checks this node decided as the leader of their group since it started, by policy and result (allowed, denied, shadow_denied): the counts of the status page. Errors and repeats of a request ID are not decisions here; quorate_decisions_total counts requests at the node asked.",
		[]string{"policy", "result"}, nil)
	descHotKeys = prometheus.NewDesc("quorate_hot_keys",
		"Keys of the policy whose share of their group's decisions on this node (as leader, since it started) surely exceeds 1/64: the hot keys of admin status and the status page, counted, never named.",
		[]string{"policy"}, nil)
	descHotKeyShare = prometheus.NewDesc("quorate_hot_key_share",
		"Share of the policy's decisions on this node (as leader, since it started) taken by its heaviest key, at least (0 when no key is hot): near 1, one key carries the policy.",
		[]string{"policy"}, nil)
)

// decisionsCollector collects the leader's decision counts and hot keys.
type decisionsCollector struct{ m *metrics }

func (c decisionsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLeaderDecisions
	ch <- descHotKeys
	ch <- descHotKeyShare
}

func (c decisionsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.n.meta == nil || c.m.n.meta.FSM == nil {
		return
	}
	// Every policy of the table (as many as quorate_policy_info shows) has
	// its series from the start, on every node, whether it leads or not.
	byLabel := map[string]policySummary{}
	for i, pv := range c.m.n.meta.FSM.Policies() {
		if i == maxPolicyLabels {
			break
		}
		byLabel[c.m.policyLabel(pv.Policy.Name)] = policySummary{}
	}
	for name, s := range c.m.n.decisions.summary() {
		l := c.m.policyLabel(name)
		t := byLabel[l]
		t.decisions += s.decisions
		t.denied += s.denied
		t.shadowDenied += s.shadowDenied
		t.heavyKeys += s.heavyKeys
		t.heaviest = max(t.heaviest, s.heaviest)
		byLabel[l] = t
	}
	for l, s := range byLabel {
		counter := func(result string, v uint64) {
			ch <- prometheus.MustNewConstMetric(descLeaderDecisions, prometheus.CounterValue, float64(v), l, result)
		}
		counter(resultAllowed, s.decisions-min(s.decisions, s.denied+s.shadowDenied))
		counter(resultDenied, s.denied)
		counter(resultShadowDenied, s.shadowDenied)
		ch <- prometheus.MustNewConstMetric(descHotKeys, prometheus.GaugeValue, float64(s.heavyKeys), l)
		share := 0.0
		if s.decisions > 0 {
			share = min(1, float64(s.heaviest)/float64(s.decisions))
		}
		ch <- prometheus.MustNewConstMetric(descHotKeyShare, prometheus.GaugeValue, share, l)
	}
}
