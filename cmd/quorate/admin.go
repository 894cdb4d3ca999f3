package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func newAdminCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Operate the cluster",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newAdminStatusCmd(), newAdminReplicaCmd(), newAdminNodeCmd(),
		newAdminSlotsCmd(), newAdminGroupCmd(), newAdminPlanCmd(), newAdminRebalanceCmd(), newAdminAuditCmd(), newAdminRecoverCmd(), newAdminSnapshotCmd())
	return cmd
}

func newAdminStatusCmd() *cobra.Command {
	var (
		client clientOptions
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every member's role, term and log indexes",
		Long: "Status asks one node (--server) for the cluster's status; that node asks every\n" +
			"member for its own view. An unreachable member is listed with the error. Slot\n" +
			"ranges frozen by a slot move are listed with their plan, as each group's leader\n" +
			"reports them. The groups' hot keys follow (the heaviest policy and key pairs\n" +
			"by decisions), then running plans (slot moves, group additions), with their\n" +
			"current step's progress.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			ac := client.adminClient(base)
			resp, err := ac.ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
			if err != nil {
				return wrapRPC("ClusterStatus", base, "", err)
			}
			if output.structured() {
				return output.write(cmd.OutOrStdout(), resp.Msg)
			}
			if err := writeClusterStatus(cmd.OutOrStdout(), resp.Msg); err != nil {
				return err
			}
			plans, err := ac.ListPlans(ctx, connect.NewRequest(&quoratev1.ListPlansRequest{}))
			switch {
			case connect.CodeOf(err) == connect.CodeUnimplemented:
				return nil // a node without plans
			case err != nil:
				fmt.Fprintf(cmd.ErrOrStderr(), "quorate: not listing plans: %v\n", wrapRPC("ListPlans", base, "", err))
				return nil
			}
			return writeRunningPlans(cmd.OutOrStdout(), plans.Msg.GetPlans())
		},
	}
	addClientFlags(cmd, &client)
	addOutputFlag(cmd, &output)
	return cmd
}

// writeClusterStatus prints a summary line and one table row per member; the
// leader is marked with "*".
func writeClusterStatus(w io.Writer, s *quoratev1.ClusterStatusResponse) error {
	leader := s.GetLeaderId()
	if leader == "" {
		leader = "unknown (no leader)"
	}
	cluster := ""
	if id := s.GetClusterId(); id != "" {
		cluster = "; cluster ID " + id
	}
	fmt.Fprintf(w, "answered by %s; leader %s; %d %s%s\n", s.GetAnsweredBy(), leader,
		len(s.GetMembers()), plural(len(s.GetMembers()), "member", "members"), cluster)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tLEADER\tRAFT ADDR\tAPI ADDR\tTERM\tAPPLIED\tCOMMIT\tBUCKETS\tREQUEST IDS\tFORWARDED\tSUFFRAGE\tERROR")
	for _, m := range s.GetMembers() {
		marker := ""
		if m.GetId() != "" && m.GetId() == s.GetLeaderId() {
			marker = "*"
		}
		role, term, applied, commit, buckets, ids, fwd := "unreachable", "-", "-", "-", "-", "-", "-"
		if st := m.GetStatus(); st != nil {
			role = st.GetRole()
			term = strconv.FormatUint(st.GetTerm(), 10)
			applied = strconv.FormatUint(st.GetLastAppliedIndex(), 10)
			commit = strconv.FormatUint(st.GetCommitIndex(), 10)
			buckets = strconv.FormatUint(st.GetBuckets(), 10)
			ids = fmt.Sprintf("%d (%d KiB)", st.GetDedupeEntries(), (st.GetDedupeBytes()+1023)/1024)
			fwd = strconv.FormatUint(st.GetForwardedCalls(), 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			m.GetId(), role, marker, dash(m.GetRaftAddr()), dash(m.GetApiAddr()),
			term, applied, commit, buckets, ids, fwd, dash(m.GetSuffrage()), m.GetError())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeGroups(w, s); err != nil {
		return err
	}
	if err := writeNodeGrants(w, s); err != nil {
		return err
	}
	writeStorageErrors(w, s)
	return writeHotKeys(w, s) // admin_hotkeys.go
}

// writeNodeGrants lists, per node, the budget leases it holds for callers
// without the Go client and what it decided from them, once some node
// decided anything so.
func writeNodeGrants(w io.Writer, s *quoratev1.ClusterStatusResponse) error {
	decided := false
	for _, m := range s.GetMembers() {
		if g := m.GetStatus().GetNodeGrants(); g.GetUnitsGranted() > 0 || g.GetHeld() > 0 {
			decided = true
		}
	}
	if !decided {
		return nil
	}
	fmt.Fprintln(w, "\nbudget leases the nodes hold for their callers:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tGRANTS HELD\tDECIDED LOCALLY\tREPEATS ANSWERED\tUNITS GRANTED\tRETURNED\tWASTED")
	for _, m := range s.GetMembers() {
		g := m.GetStatus().GetNodeGrants()
		if m.GetStatus() == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\n", m.GetId())
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", m.GetId(), g.GetHeld(), g.GetLocalDecisions(), g.GetDuplicates(),
			g.GetUnitsGranted(), g.GetUnitsReturned(), g.GetUnitsWasted())
	}
	return tw.Flush()
}

// writeStorageErrors lists the replicas whose node reports a storage error
// (a failed write, a full disk, damaged files) with when it happened; a
// replica "damaged" is not running and its error says how to recover.
func writeStorageErrors(w io.Writer, s *quoratev1.ClusterStatusResponse) {
	header := false
	for _, m := range s.GetMembers() {
		for _, g := range m.GetStatus().GetGroups() {
			if g.GetStorageError() == "" {
				continue
			}
			if !header {
				fmt.Fprintln(w, "\nstorage errors:")
				header = true
			}
			fmt.Fprintf(w, "  %s, group %d (%s), %s: %s\n", m.GetId(), g.GetId(), g.GetRole(),
				g.GetStorageErrorAt().AsTime().UTC().Format(time.RFC3339), g.GetStorageError())
		}
	}
}

// writeGroups prints the shard map's data groups: replicas (the first is the
// preferred leader), the leader as its replicas report it, slots, and the
// keys and applied index of the leader's replica.
func writeGroups(w io.Writer, s *quoratev1.ClusterStatusResponse) error {
	sm := s.GetShardMap()
	if sm == nil {
		return nil
	}
	type seen struct {
		leader        string
		keys, applied uint64
		hosts         []string // members that report a replica
	}
	state := map[uint32]*seen{}
	for _, m := range s.GetMembers() {
		for _, g := range m.GetStatus().GetGroups() {
			if state[g.GetId()] == nil {
				state[g.GetId()] = &seen{}
			}
			st := state[g.GetId()]
			st.hosts = append(st.hosts, m.GetId())
			if g.GetRole() == "leader" {
				st.leader, st.keys, st.applied = m.GetId(), g.GetKeys(), g.GetLastAppliedIndex()
			}
		}
	}
	cordoned := ""
	if len(sm.GetCordoned()) > 0 {
		cordoned = "; cordoned (drained): " + strings.Join(sm.GetCordoned(), ",")
	}
	fmt.Fprintf(w, "\nshard map epoch %d; %d data %s%s\n", sm.GetEpoch(), len(sm.GetGroups()), plural(len(sm.GetGroups()), "group", "groups"), cordoned)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tLEADER\tREPLICAS\tSLOTS\tKEYS\tAPPLIED\tMOVING")
	for _, g := range sm.GetGroups() {
		st := state[g.GetId()]
		if st == nil {
			st = &seen{}
		}
		keys, applied := "-", "-"
		if st.leader != "" {
			keys, applied = strconv.FormatUint(st.keys, 10), strconv.FormatUint(st.applied, 10)
		}
		moving := movingReplicas(g.GetReplicas(), st.hosts, s.GetMembers())
		if g.GetForming() {
			moving = strings.TrimSpace("forming " + moving)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", g.GetId(), dash(st.leader), strings.Join(g.GetReplicas(), ","), g.GetSlots(), keys, applied,
			dash(moving))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeFrozen(w, s)
}

// writeFrozen prints the slot ranges frozen by slot moves, as each group's
// leader reports them (another replica when no leader answered), by group
// and migration; nothing when none is frozen.
func writeFrozen(w io.Writer, s *quoratev1.ClusterStatusResponse) error {
	type row struct {
		group uint32
		f     *quoratev1.FrozenSlots
	}
	var rows []row
	reported := map[uint32]bool{}
	for _, leaders := range []bool{true, false} {
		for _, m := range s.GetMembers() {
			for _, g := range m.GetStatus().GetGroups() {
				if (g.GetRole() == "leader") != leaders || reported[g.GetId()] {
					continue
				}
				reported[g.GetId()] = true
				for _, f := range g.GetFrozen() {
					rows = append(rows, row{g.GetId(), f})
				}
			}
		}
	}
	if len(rows) == 0 {
		return nil
	}
	slices.SortStableFunc(rows, func(a, b row) int { return int(a.group) - int(b.group) })
	fmt.Fprintln(w, "\nfrozen slots (data commands on them answer unavailable until the move flips or rolls back)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSLOTS\tPLAN\tSTEP\tMIGRATION\tPLAN STATE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t[%d,%d)\t%d\t%d\t%d\t%s\n", r.group, r.f.GetStart(), r.f.GetEnd(), r.f.GetPlan(), r.f.GetStep(), r.f.GetMigration(), r.f.GetPlanState())
	}
	return tw.Flush()
}

// movingReplicas describes a replica move in progress: "+n" for a replica
// of the map that its node does not report yet, "-n" for a node that still
// reports one the map no longer lists ("" when they agree). Unreachable
// members count as agreeing.
func movingReplicas(want, hosts []string, members []*quoratev1.MemberStatus) string {
	reachable := map[string]bool{}
	for _, m := range members {
		reachable[m.GetId()] = m.GetStatus() != nil
	}
	var out []string
	for _, r := range want {
		if reachable[r] && !slices.Contains(hosts, r) {
			out = append(out, "+"+r)
		}
	}
	for _, h := range hosts {
		if !slices.Contains(want, h) {
			out = append(out, "-"+h)
		}
	}
	return strings.Join(out, " ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
