package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// hotKeysListed is how many hot keys admin status lists, all groups
// together.
const hotKeysListed = 10

// writeHotKeys prints the heaviest (policy, key) pairs of the groups: each
// member counts the decisions of the groups it led since it started
// (GroupState.hot_keys), and the members' counts of a pair add up. GRANTS
// and GRANTED are the pair's budget leases: live holders, and the units
// granted to them not yet reported spent ("-" for none), which every
// replica of the group reports from its state; a pair that holds grants is
// listed after the heaviest even with no decisions counted (its group's
// leader changed since it was hot, say). Nothing when no pair is.
func writeHotKeys(w io.Writer, s *quoratev1.ClusterStatusResponse) error {
	type id struct {
		group       uint32
		policy, key string
	}
	type row struct {
		id
		count, err uint64
		holders    uint32
		granted    int64
	}
	sum := map[id]*row{}
	for _, m := range s.GetMembers() {
		for _, g := range m.GetStatus().GetGroups() {
			for _, h := range g.GetHotKeys() {
				k := id{g.GetId(), h.GetPolicy(), h.GetKey()}
				r := sum[k]
				if r == nil {
					r = &row{id: k}
					sum[k] = r
				}
				r.count += h.GetCount()
				r.err += h.GetError()
				// Grants are the group's state: every member that reports
				// the pair reads the same replica state (the leader's).
				r.holders = max(r.holders, h.GetGrantHolders())
				r.granted = max(r.granted, h.GetGrantedUnspent())
			}
		}
	}
	if len(sum) == 0 {
		return nil
	}
	rows := make([]*row, 0, len(sum))
	for _, r := range sum {
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b *row) int {
		return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.group, b.group), cmp.Compare(a.policy, b.policy), cmp.Compare(a.key, b.key))
	})
	rest := rows[min(len(rows), hotKeysListed):]
	rows = rows[:min(len(rows), hotKeysListed)]
	for _, r := range rest {
		if r.holders > 0 && len(rows) < 2*hotKeysListed {
			rows = append(rows, r)
		}
	}
	fmt.Fprintln(w, "\nhot keys (decisions counted by the groups' leaders since they started; a count is at most ERROR above the truth; keys holding grants too)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tPOLICY\tKEY\tDECISIONS\tERROR\tGRANTS\tGRANTED")
	for _, r := range rows {
		grants, granted := "-", "-"
		if r.holders > 0 {
			grants, granted = strconv.FormatUint(uint64(r.holders), 10), strconv.FormatInt(r.granted, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\n", r.group, r.policy, strconv.Quote(r.key), r.count, r.err, grants, granted)
	}
	return tw.Flush()
}
