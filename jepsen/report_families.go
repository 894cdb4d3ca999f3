package jepsen

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// FamilyScale names the scale scenario's steps (scale-join, scale-split,
// scale-move-replica, scale-drain, scale-remove, scale-stop) in a report's
// fault families; the scenario is Options.Scale, not a nemesis family.
const FamilyScale = "scale"

// familyOther is the family of a fault kind no family claims.
const familyOther = "other"

// The grant workload's own faults (RunGrantWorkload), of its leasing
// clients rather than of servers; they run whenever the workload does.
const (
	FamilyClientKill  = "client-kill"
	FamilyClientPause = "client-pause"
)

// faultFamily maps a recorded fault kind to its family, a rank that orders
// the families in a report, and what the family does.
func faultFamily(kind string) (family string, rank int, what string) {
	switch {
	case strings.HasPrefix(kind, FamilyKill):
		return FamilyKill, 0, "kill -9 a node, restart it from the same data dir"
	case strings.HasPrefix(kind, FamilyPause):
		return FamilyPause, 1, "SIGSTOP a node, then SIGCONT"
	case strings.HasPrefix(kind, FamilyClock):
		return FamilyClock, 2, "jump a node's clock ±1..5 s, then back"
	case strings.HasPrefix(kind, FamilyPartition):
		return FamilyPartition, 3, "cut the network between nodes, then heal"
	case kind == "rolling-restart" || strings.HasPrefix(kind, FamilyRestart):
		return FamilyRestart, 4, "restart every node in turn"
	case strings.HasPrefix(kind, "move-replica") || strings.HasPrefix(kind, FamilyMove):
		return FamilyMove, 5, "move a data group's replica to another node"
	case strings.HasPrefix(kind, FamilySlots):
		return FamilySlots, 6, "move slots with their state between groups, cancel a move, split a group"
	case strings.HasPrefix(kind, FamilyScale):
		return FamilyScale, 7, "scale scenario: join, split, move, drain, remove, stop"
	case strings.HasPrefix(kind, FamilyClientKill):
		return FamilyClientKill, 8, "kill a budget-leasing client: its calls fail for ever, its grants expire; a fresh client replaces it"
	case strings.HasPrefix(kind, FamilyClientPause):
		return FamilyClientPause, 9, "pause a budget-leasing client: its admits and calls block, then go on"
	}
	return familyOther, 10, "a fault of an unknown kind"
}

// FamilyCount is how many faults of one family a run injected, counted
// from the recorded faults (what ran, not what was configured).
type FamilyCount struct {
	Family string
	What   string        // what the family does
	Count  int           // faults recorded
	Errors int           // of which recorded an error
	Total  time.Duration // summed from each fault's start to its end
	Kinds  []KindCount   // the recorded kinds, by count then name
}

// KindCount is how many faults of one recorded kind ran.
type KindCount struct {
	Kind  string
	Count int
}

// FaultFamilies counts faults by family, in the families' order.
func FaultFamilies(faults []Fault) []FamilyCount {
	byFamily := map[string]*FamilyCount{}
	ranks := map[string]int{}
	kinds := map[string]map[string]int{}
	for _, f := range faults {
		fam, rank, what := faultFamily(f.Kind)
		c := byFamily[fam]
		if c == nil {
			c = &FamilyCount{Family: fam, What: what}
			byFamily[fam], ranks[fam], kinds[fam] = c, rank, map[string]int{}
		}
		c.Count++
		if f.Error != "" {
			c.Errors++
		}
		if d := f.End.Sub(f.Start); !f.End.IsZero() && d > 0 {
			c.Total += d
		}
		kinds[fam][f.Kind]++
	}
	out := make([]FamilyCount, 0, len(byFamily))
	for fam, c := range byFamily {
		for k, n := range kinds[fam] {
			c.Kinds = append(c.Kinds, KindCount{Kind: k, Count: n})
		}
		slices.SortFunc(c.Kinds, func(a, b KindCount) int {
			if a.Count != b.Count {
				return b.Count - a.Count
			}
			return strings.Compare(a.Kind, b.Kind)
		})
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b FamilyCount) int { return ranks[a.Family] - ranks[b.Family] })
	return out
}

// KindsString renders the kinds as "kill-leader×2 kill×1".
func (c FamilyCount) KindsString() string {
	parts := make([]string, len(c.Kinds))
	for i, k := range c.Kinds {
		parts[i] = fmt.Sprintf("%s×%d", k.Kind, k.Count)
	}
	return strings.Join(parts, " ")
}

// faultCounts summarises faults by family, e.g. "kill×3 pause×2".
func faultCounts(faults []Fault) string {
	fams := FaultFamilies(faults)
	if len(fams) == 0 {
		return "none"
	}
	parts := make([]string, len(fams))
	for i, c := range fams {
		parts[i] = fmt.Sprintf("%s×%d", c.Family, c.Count)
	}
	return strings.Join(parts, " ")
}

// Outcome is the run's verdict for the banner and summary.txt's first
// line: ok when every checker passed and the run completed (runErr, Run's
// error — healing or the final read — is nil), with a one-line reason.
func (r *Report) Outcome(runErr error) (ok bool, reason string) {
	var failed []string
	for _, v := range r.Verdicts {
		if !v.OK {
			failed = append(failed, v.Checker)
		}
	}
	switch {
	case len(failed) > 0:
		return false, oneLine(fmt.Sprintf("%d of %d checkers failed: %s", len(failed), len(r.Verdicts), strings.Join(failed, ", ")))
	case len(r.Verdicts) == 0:
		return false, "no checker ran"
	case runErr != nil:
		return false, oneLine("every checker passed, but the run did not complete: " + runErr.Error())
	}
	return true, fmt.Sprintf("all %d checkers passed; %d ops, %d faults injected (%s)", len(r.Verdicts), len(r.Ops),
		len(r.Faults), faultCounts(r.Faults))
}

// oneLine folds s onto one line of at most 300 characters.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 300 {
		s = string(r[:299]) + "…"
	}
	return s
}
