package jepsen

import (
	"fmt"
	"time"
)

// CheckGrants checks the grant workload's admits: CheckFixedWindow over
// the strict and the local (from grants) admits together, against the
// policy's limit per window (no over-admission per key and window, every
// local admit counted in the window its units were granted in), and a
// "grant/decisions" verdict that sums the decisions up — local, strict
// allowed, strict denied, unknown — with the windows that filled up to the
// limit and the clients' grant counts (stats). The latter fails only when
// no admit was decided locally: the run then showed nothing of grants.
func CheckGrants(ops []Op, limit int64, window time.Duration, stats GrantStats) []Verdict {
	return checkGrants(WorkloadGrant, ops, limit, 0, window, stats)
}

// CheckGrantSync is CheckGrants for the grant-sync workload: a key may be
// over-admitted by bound per window (the policy's SyncBound), so each
// window may hold limit + bound admits, and no more.
func CheckGrantSync(ops []Op, limit, bound int64, window time.Duration, stats GrantStats) []Verdict {
	return checkGrants(WorkloadGrantSync, ops, limit, bound, window, stats)
}

func checkGrants(workload string, ops []Op, limit, bound int64, window time.Duration, stats GrantStats) []Verdict {
	v := Verdict{Checker: workload + "/decisions", OK: true}
	var local, allowed, denied, unknown int
	type keyWindow struct {
		key string
		w   int64
	}
	perWindow := map[keyWindow]int64{}
	for _, op := range ops {
		if !isAdmitOp(op) {
			continue
		}
		switch {
		case op.Outcome == OutcomeAllowed && op.Local:
			local++
		case op.Outcome == OutcomeAllowed:
			allowed++
		case op.Outcome == OutcomeDenied:
			denied++
		default:
			unknown++
		}
		if op.Outcome == OutcomeAllowed && op.Attempt == 0 && !op.Duplicate {
			perWindow[keyWindow{op.Key, windowOf(op.DecidedAt, int64(window))}]++
		}
	}
	full, over := 0, int64(0)
	for _, n := range perWindow {
		if n >= limit {
			full++
		}
		over = max(over, n-limit)
	}
	if local == 0 {
		v.violate("no admit was decided locally from a grant")
	}
	v.Summary = fmt.Sprintf("%d admits: %d local (from grants), %d strict allowed, %d strict denied, %d unknown or failed; "+
		"%d key-windows with admits, %d of them at the limit %d; %d leasing clients (%d killed, %d paused): "+
		"grants acquired %d, renewed %d, released %d; units granted %d, returned %d, wasted %d",
		local+allowed+denied+unknown, local, allowed, denied, unknown, len(perWindow), full, limit,
		stats.ClientsMade, stats.Kills, stats.Pauses, stats.Acquired, stats.Renewed, stats.Released,
		stats.UnitsGranted, stats.UnitsReturned, stats.UnitsWasted)
	if bound > 0 {
		v.Summary += fmt.Sprintf("; allowances %d, units reported %d; most over the limit in a window %d (bound %d)",
			stats.UnitsAllowed, stats.UnitsReported, max(over, 0), bound)
	}
	return []Verdict{named(CheckFixedWindow(ops, limit+bound, window), workload), v}
}
