package node_test

import (
	"context"
	"testing"

	"github.com/quorate/quorate/node/nodetest"
)

// spendCheck admits units of one policy one at a time, round robin over
// the nodes given, and checks every answer: the remaining it reports is the
// policy's limit less every unit spent on that key so far, so no
// acknowledged decision was lost or applied twice.
type spendCheck struct {
	tb     testing.TB
	ctx    context.Context
	c      *nodetest.Cluster
	policy string
	limit  int64
	spent  map[string]int64
}

func newSpendCheck(ctx context.Context, tb testing.TB, c *nodetest.Cluster, policy string, limit int64) *spendCheck {
	return &spendCheck{tb: tb, ctx: ctx, c: c, policy: policy, limit: limit, spent: map[string]int64{}}
}

// admit spends n units of key through the nodes on (node 0 when none).
func (s *spendCheck) admit(key string, n int, on ...int) {
	s.tb.Helper()
	if len(on) == 0 {
		on = []int{0}
	}
	for k := range n {
		resp, err := admit(s.ctx, s.c, on[k%len(on)], s.policy, key, 1)
		if err != nil {
			s.tb.Fatal(err)
		}
		if s.spent[key]++; resp.GetRemaining() != s.limit-s.spent[key] {
			s.tb.Fatalf("%s: remaining %d, want %d", key, resp.GetRemaining(), s.limit-s.spent[key])
		}
	}
}
