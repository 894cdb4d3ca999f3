package node_test

import (
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestMetricsCountEnvoyDecisions: each ShouldRateLimit that decides is
// counted once in quorate_decisions_total, at the node asked, under the
// policy the configuration made of its descriptor; a call that decides
// nothing (only unknown descriptors) is not.
func TestMetricsCountEnvoyDecisions(t *testing.T) {
	c, _, cls := envoyCluster(t)
	for i := range 3 { // 4 + 4 of 10 allowed, then 4 more denied
		d := desc("bulk", "b")
		d.HitsAddend = wrapperspb.UInt64(4)
		want := rlOK
		if i == 2 {
			want = rlOver
		}
		wantCodes(t, "bulk", shouldRateLimit(t, cls[i], rlRequest("edge", d)), want, want)
	}
	wantCodes(t, "unknown", shouldRateLimit(t, cls[0], rlRequest("edge", desc("nope", "1"))), rlOK, rlOK)
	byResult := map[string]float64{}
	policies := map[string]bool{}
	for i := range c.Len() {
		for _, m := range scrape(t, c, i)["quorate_decisions_total"].GetMetric() {
			if m.GetCounter().GetValue() == 0 { // a policy's series before its first decision
				continue
			}
			l := labelsOf(m)
			byResult[l["result"]] += m.GetCounter().GetValue()
			policies[l["policy"]] = true
		}
	}
	if byResult["allowed"] != 2 || byResult["denied"] != 1 || len(byResult) != 2 {
		t.Errorf("quorate_decisions_total by result %v, want 2 allowed and 1 denied", byResult)
	}
	if len(policies) != 1 || policies["(unknown)"] || policies["(other)"] {
		t.Errorf("policy labels %v, want the configuration's one policy", policies)
	}
}
