package jepsen

import (
	"context"
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

// CheckGrantBucket checks the grant-bucket workload's admits: strict and
// local together, no key admits more distinct requests than its bucket's
// capacity (it never refills within a run), and the decisions summed up as
// by CheckGrants, with the keys that were drained to capacity.
func CheckGrantBucket(ops []Op, capacity int64, stats GrantStats) []Verdict {
	v, perKey := grantDecisions(WorkloadGrantBucket, ops, stats, func(op Op) string { return op.Key })
	drained := 0
	for _, n := range perKey {
		if n >= capacity {
			drained++
		}
	}
	v.Summary = fmt.Sprintf("%s; %d keys with admits, %d of them drained to the capacity %d", v.Summary, len(perKey), drained, capacity)
	return []Verdict{named(CheckOverAdmission(ops, capacity), WorkloadGrantBucket), v}
}

func checkGrants(workload string, ops []Op, limit, bound int64, window time.Duration, stats GrantStats) []Verdict {
	v, perWindow := grantDecisions(workload, ops, stats, func(op Op) string {
		return op.Key + "@" + fmtNanos(windowOf(op.DecidedAt, int64(window)))
	})
	full, over := 0, int64(0)
	for _, n := range perWindow {
		if n >= limit {
			full++
		}
		over = max(over, n-limit)
	}
	v.Summary = fmt.Sprintf("%s; %d key-windows with admits, %d of them at the limit %d", v.Summary, len(perWindow), full, limit)
	if bound > 0 {
		v.Summary += fmt.Sprintf("; allowances %d, units reported %d; most over the limit in a window %d (bound %d)",
			stats.UnitsAllowed, stats.UnitsReported, max(over, 0), bound)
	}
	return []Verdict{named(CheckFixedWindow(ops, limit+bound, window), workload), v}
}

// grantDecisions is a grant workload's "decisions" verdict: the decisions
// summed up — local, strict allowed, strict denied, unknown — with the
// clients' grant counts (stats), failing only when no admit was decided
// locally (the run then showed nothing of grants); and the first answers
// allowed, counted by group(op).
func grantDecisions(workload string, ops []Op, stats GrantStats, group func(Op) string) (Verdict, map[string]int64) {
	v := Verdict{Checker: workload + "/decisions", OK: true}
	var local, allowed, denied, unknown int
	per := map[string]int64{}
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
			per[group(op)]++
		}
	}
	if local == 0 {
		v.violate("no admit was decided locally from a grant")
	}
	v.Summary = fmt.Sprintf("%d admits: %d local (from grants), %d strict allowed, %d strict denied, %d unknown or failed; "+
		"%d leasing clients (%d killed, %d paused): grants acquired %d, renewed %d, released %d; units granted %d, returned %d, wasted %d",
		local+allowed+denied+unknown, local, allowed, denied, unknown,
		stats.ClientsMade, stats.Kills, stats.Pauses, stats.Acquired, stats.Renewed, stats.Released,
		stats.UnitsGranted, stats.UnitsReturned, stats.UnitsWasted)
	return v, per
}

// CheckNodeGrants sums up, from the members' status after the run, the
// budget leases the nodes held for the grant workloads' plain callers: the
// admits they decided from them, repeats answered, and the units granted,
// given back and wasted (a killed node's grants waste what they held; each
// node counts since it last started, so a node killed late shows less). It
// reports; it fails only when the status cannot be read.
func CheckNodeGrants(ctx context.Context, c *Cluster) Verdict {
	v := Verdict{Checker: "node-grants", OK: true}
	st, err := c.clusterStatus(ctx, 30*time.Second)
	if err != nil {
		v.violate("cluster status: %v", err)
		return v
	}
	var held, local, dups, granted, returned, wasted uint64
	for _, m := range st.GetMembers() {
		g := m.GetStatus().GetNodeGrants()
		held, local, dups = held+g.GetHeld(), local+g.GetLocalDecisions(), dups+g.GetDuplicates()
		granted, returned, wasted = granted+g.GetUnitsGranted(), returned+g.GetUnitsReturned(), wasted+g.GetUnitsWasted()
	}
	v.Summary = fmt.Sprintf("the nodes decided %d admits of plain callers from their grants and sync-mode allowances (%d repeats answered); "+
		"they hold %d; grant-mode units granted %d, returned %d, wasted %d (since each node last started)",
		local, dups, held, granted, returned, wasted)
	return v
}
