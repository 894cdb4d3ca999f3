//go:build quorate_planted_overspend

package client

// plantedOverspend, set only with -tags quorate_planted_overspend, breaks
// local decisions on purpose: a client whose grant cannot cover a request
// admits it locally anyway, up to plantedOverdraft units past the grant
// after each answer, and never tells the cluster (the units it reports
// used stay within the grant). The fault-injection harness, whose clients
// run in its own process, is built with this tag to prove that its
// no-over-admission checker catches a client that spends past its grant.
// Never ship it.
const plantedOverspend = true

// plantedOverdraft is how many units past its grant the client spends
// after each answer.
const plantedOverdraft = 5

// plantedOverdraw takes cost from g's overdraft: true when it is not used
// up (the request is admitted though the grant cannot cover it).
func plantedOverdraw(g *grantState, cost int64) bool {
	for {
		o := g.overdrawn.Load()
		if o+cost > plantedOverdraft {
			return false
		}
		if g.overdrawn.CompareAndSwap(o, o+cost) {
			return true
		}
	}
}
