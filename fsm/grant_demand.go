package fsm

import (
	"math/bits"
	"time"
)

// A holder's demand sizes its share of a key's grants, but a claim costs
// nothing: the demand a call counts is bounded by what the group saw the
// holder spend. The holder's spend rate is observed from the used its calls
// report (reserve: units of its grant it spent; sync: units it admitted),
// over observations of at least spendWindow of log time, so that calls in
// quick succession cannot make a few units look like a high rate. The
// counted demand is the claimed one, at most spendMultiple times the
// larger of the last complete observation's rate and the current one's so
// far, and at least demandFloorMilli. A holder that spends its whole grant
// sees its counted demand grow by up to spendMultiple each observation; a
// holder that claims without spending keeps the floor, a negligible share
// beside holders that spend.
const (
	// spendWindow is the shortest observation of a holder's spending.
	spendWindow = int64(time.Second)
	// spendMultiple is how far a counted demand may exceed the rate the
	// holder was seen spending.
	spendMultiple = 4
	// demandFloorMilli is what a holder counts at most before it was seen
	// spending: 1 unit per second.
	demandFloorMilli = 1000
)

// observeSpend moves g's observation of its holder's spending to (used,
// now) and returns g with the demand the call counts, from the claimed
// demand_milli. A fresh record (new, or replacing an expired one) starts
// an observation at used.
func observeSpend(g grant, fresh bool, used, claimed, now int64) grant {
	claimed = min(max(claimed, 0), maxDemandMilli)
	if fresh {
		g.spendRate, g.obsAt, g.obsUsed = 0, now, used
		g.demand = min(claimed, demandFloorMilli)
		return g
	}
	elapsed := now - g.obsAt
	current := spendRateMilli(used-g.obsUsed, max(elapsed, spendWindow))
	rate := max(g.spendRate, current)
	if elapsed >= spendWindow {
		g.spendRate, g.obsAt, g.obsUsed = current, now, used
	}
	g.demand = min(claimed, max(demandFloorMilli, min(rate, maxDemandMilli/spendMultiple)*spendMultiple))
	return g
}

// spendRateMilli is units spent over nanos (> 0), in milli-units per
// second, in 128-bit arithmetic, saturating at maxDemandMilli.
func spendRateMilli(units, nanos int64) int64 {
	if units <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(units), 1_000_000_000_000)
	if hi >= uint64(nanos) {
		return maxDemandMilli
	}
	q, _ := bits.Div64(hi, lo, uint64(nanos))
	return int64(min(q, maxDemandMilli))
}
