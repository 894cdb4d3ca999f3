package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

const (
	// snapshotTimeout is --timeout's default for save and restore.
	snapshotTimeout = 10 * time.Minute
	// savePageBytes is the size of a save page asked for.
	savePageBytes = 1 << 20
	// restorePageBytes bounds a RestoreSnapshot request's records (and so
	// the Raft entry each group gets), well below --max-request-bytes'
	// default.
	restorePageBytes = 256 << 10
	// restorePolicyBatch bounds the policies of one ApplyPolicies call.
	restorePolicyBatch = 500
	// saveAttempts is how many times save starts again when a group's
	// leader changed under it.
	saveAttempts = 3
)

func newAdminSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save the cluster's policies and state to a file, or restore a new cluster from one",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newSnapshotSaveCmd(), newSnapshotRestoreCmd())
	return cmd
}

// snapshotClientFlags registers the client flags with --timeout defaulting
// to snapshotTimeout.
func snapshotClientFlags(cmd *cobra.Command, client *clientOptions) {
	addClientFlags(cmd, client)
	client.timeout = snapshotTimeout
	cmd.Flags().Lookup("timeout").DefValue = snapshotTimeout.String()
}

func newSnapshotSaveCmd() *cobra.Command {
	var client clientOptions
	cmd := &cobra.Command{
		Use:   "save FILE",
		Short: "Save the policies, the shard map and every group's state to FILE",
		Long: "Save writes one file: the cluster ID, the policies and the shard map (read on the\n" +
			"meta leader), then each data group's state (buckets, leases, reservations and\n" +
			"request IDs), each group read on its leader after a read barrier, at one\n" +
			"applied index: every decision acknowledged before the save started is in it.\n" +
			"Groups are read one after another, not at one instant across the cluster. The\n" +
			"file is written to a temporary file next to FILE, synced and renamed, so FILE\n" +
			"is whole or untouched. Traffic goes on during a save.",
		Example: "  quorate admin snapshot save /backups/quorate-$(date +%F).qbak",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			admin := client.adminClient(base)
			for attempt := 1; ; attempt++ {
				err := saveBackup(ctx, cmd.OutOrStdout(), admin, base, args[0])
				if err == nil || attempt == saveAttempts || connect.CodeOf(err) != connect.CodeFailedPrecondition {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "save: %v; starting again\n", err)
			}
		},
	}
	snapshotClientFlags(cmd, &client)
	return cmd
}

// saveBackup writes a backup to path and reports it on out.
func saveBackup(ctx context.Context, out io.Writer, admin quoratev1connect.AdminServiceClient, base, path string) error {
	w, err := createBackup(path)
	if err != nil {
		return err
	}
	var sum backupSummary
	first, err := saveGroup(ctx, admin, base, w, 0, &sum)
	if err != nil {
		w.abort()
		return err
	}
	for _, g := range first.GetShardMap().GetGroups() {
		if _, err := saveGroup(ctx, admin, base, w, g.GetId(), &sum); err != nil {
			w.abort()
			return err
		}
	}
	size, err := w.commit()
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	var keys, records uint64
	var at []string
	for _, g := range sum.groups {
		keys, records = keys+g.keys, records+g.records
		at = append(at, fmt.Sprintf("group %d at index %d", g.group, g.appliedIndex))
	}
	fmt.Fprintf(out, "saved %s: cluster %s, %d policies, %d keys (%d state records) in %d data groups, %d bytes\n",
		path, first.GetClusterId(), len(sum.policies), keys, records, len(sum.groups)-1, size)
	fmt.Fprintf(out, "applied indexes: meta %s\n", strings.TrimPrefix(strings.Join(at, ", "), "group 0 "))
	return nil
}

// saveGroup writes every page of group g to w and adds the group to sum;
// it returns the first page.
func saveGroup(ctx context.Context, admin quoratev1connect.AdminServiceClient, base string, w *backupWriter, g uint32, sum *backupSummary) (*quoratev1.SaveSnapshotResponse, error) {
	req := &quoratev1.SaveSnapshotRequest{Group: g, MaxBytes: savePageBytes}
	var first *quoratev1.SaveSnapshotResponse
	gs := groupSummary{group: g}
	for {
		resp, err := admin.SaveSnapshot(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, fmt.Errorf("group %d: %w", g, wrapRPC("SaveSnapshot", base, "", err))
		}
		m := resp.Msg
		if first == nil {
			first, gs.appliedIndex = m, m.GetAppliedIndex()
		}
		if err := w.frame(m); err != nil {
			return nil, fmt.Errorf("writing %s: %w", w.path, err)
		}
		state := new(raftcmdv1.SlotState)
		if err := proto.Unmarshal(m.GetState(), state); err != nil {
			return nil, fmt.Errorf("group %d: a page's state: %w", g, err)
		}
		sum.policies = append(sum.policies, m.GetPolicies()...)
		gs.keys += uint64(len(state.GetBuckets()) + len(state.GetSemaphores()))
		gs.records += uint64(m.GetRecords()) - uint64(len(m.GetPolicies()))
		if m.GetDone() {
			sum.groups = append(sum.groups, gs)
			return first, nil
		}
		if m.GetRecords() == 0 {
			return nil, fmt.Errorf("group %d: an empty page before the last", g)
		}
		req.Session, req.Offset = m.GetSession(), req.GetOffset()+uint64(m.GetRecords())
	}
}

func newSnapshotRestoreCmd() *cobra.Command {
	var (
		client    clientOptions
		overwrite bool
	)
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Restore a backup's policies and state into a new cluster",
		Long: "Restore checks FILE whole (format version, checksum, every page) before it\n" +
			"changes anything, then applies its policies and writes each saved key's state\n" +
			"into the group that owns the key's slot in this cluster's shard map, so the new\n" +
			"cluster may have another number of groups. Run it against a freshly formed\n" +
			"cluster: one that already holds policies or state is refused, unless\n" +
			"--overwrite, which replaces the policies and keys the backup names and keeps\n" +
			"the others. Leases and reservations keep the time they had left at the save;\n" +
			"rate-limit state keeps its times, so windows that ended since the save are over.",
		Example: "  quorate admin snapshot restore /backups/quorate-2026-12-01.qbak --server new-node1:7070",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sum, err := readBackup(args[0], nil)
			if err != nil {
				return err
			}
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			admin := client.adminClient(base)
			if !overwrite {
				if err := checkFresh(ctx, admin, base); err != nil {
					return err
				}
			}
			if err := restorePolicies(ctx, admin, base, sum.policies); err != nil {
				return err
			}
			var records uint64
			_, err = readBackup(args[0], func(m *quoratev1.SaveSnapshotResponse) error {
				n, err := restorePage(ctx, admin, base, m)
				records += n
				return err
			})
			if err != nil {
				return fmt.Errorf("restoring %s (%d state records written so far): %w", args[0], records, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s (cluster %s): %d policies, %d state records\n",
				args[0], sum.clusterID, len(sum.policies), records)
			return nil
		},
	}
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "restore into a cluster that already holds policies or state")
	snapshotClientFlags(cmd, &client)
	return cmd
}

// errNotFresh is returned by restore for a cluster that holds policies or
// state already.
var errNotFresh = errors.New("the cluster is not new")

// checkFresh refuses a cluster that has policies or keys.
func checkFresh(ctx context.Context, admin quoratev1connect.AdminServiceClient, base string) error {
	pol, err := admin.ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
	if err != nil {
		return wrapRPC("ListPolicies", base, "", err)
	}
	if n := len(pol.Msg.GetPolicies()); n > 0 {
		return fmt.Errorf("%w: it has %d policies; restore into a freshly formed cluster, or pass --overwrite", errNotFresh, n)
	}
	st, err := admin.ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
	if err != nil {
		return wrapRPC("ClusterStatus", base, "", err)
	}
	for _, m := range st.Msg.GetMembers() {
		for _, g := range m.GetStatus().GetGroups() {
			if k := g.GetKeys(); k > 0 {
				return fmt.Errorf("%w: group %d holds %d keys on %s; restore into a freshly formed cluster, or pass --overwrite",
					errNotFresh, g.GetId(), k, m.GetId())
			}
		}
	}
	return nil
}

func restorePolicies(ctx context.Context, admin quoratev1connect.AdminServiceClient, base string, policies []*quoratev1.Policy) error {
	for len(policies) > 0 {
		n := min(len(policies), restorePolicyBatch)
		if _, err := admin.ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: policies[:n]})); err != nil {
			return fmt.Errorf("restoring policies: %w", wrapRPC("ApplyPolicies", base, "", err))
		}
		policies = policies[n:]
	}
	return nil
}

// restorePage writes a saved page's state records, in requests of at most
// restorePageBytes of records, and returns how many it wrote.
func restorePage(ctx context.Context, admin quoratev1connect.AdminServiceClient, base string, m *quoratev1.SaveSnapshotResponse) (uint64, error) {
	state := new(raftcmdv1.SlotState)
	if err := proto.Unmarshal(m.GetState(), state); err != nil {
		return 0, err
	}
	var written uint64
	for _, part := range splitState(state, restorePageBytes) {
		body, err := proto.Marshal(part)
		if err != nil {
			return written, err
		}
		req := &quoratev1.RestoreSnapshotRequest{State: body, SourceNowUnixNano: m.GetNowUnixNano()}
		resp, err := admin.RestoreSnapshot(ctx, connect.NewRequest(req))
		// A group without a leader yet, or behind the map, or a page that
		// ran out of the node's request time: it is sent again (it
		// overwrites what it wrote) until --timeout.
		for wait := 50 * time.Millisecond; restoreAgain(err); wait = min(2*wait, time.Second) {
			select {
			case <-ctx.Done():
				return written, fmt.Errorf("group %d's saved state: %w", m.GetGroup(), wrapRPC("RestoreSnapshot", base, "", err))
			case <-time.After(wait):
			}
			resp, err = admin.RestoreSnapshot(ctx, connect.NewRequest(req))
		}
		if err != nil {
			return written, fmt.Errorf("group %d's saved state: %w", m.GetGroup(), wrapRPC("RestoreSnapshot", base, "", err))
		}
		written += uint64(resp.Msg.GetRecords())
	}
	return written, nil
}

// restoreAgain reports whether a RestoreSnapshot call that failed with err
// may succeed if sent again.
func restoreAgain(err error) bool {
	c := connect.CodeOf(err)
	return err != nil && (c == connect.CodeUnavailable || c == connect.CodeDeadlineExceeded)
}

// splitState splits s into parts of about maxBytes of records each.
func splitState(s *raftcmdv1.SlotState, maxBytes int) []*raftcmdv1.SlotState {
	var parts []*raftcmdv1.SlotState
	cur, size := new(raftcmdv1.SlotState), 0
	add := func(rec proto.Message, put func(*raftcmdv1.SlotState)) {
		if n := proto.Size(rec); size > 0 && size+n > maxBytes {
			parts, cur, size = append(parts, cur), new(raftcmdv1.SlotState), 0
		}
		size += proto.Size(rec)
		put(cur)
	}
	for _, r := range s.GetBuckets() {
		add(r, func(c *raftcmdv1.SlotState) { c.Buckets = append(c.Buckets, r) })
	}
	for _, r := range s.GetSemaphores() {
		add(r, func(c *raftcmdv1.SlotState) { c.Semaphores = append(c.Semaphores, r) })
	}
	for _, r := range s.GetReservations() {
		add(r, func(c *raftcmdv1.SlotState) { c.Reservations = append(c.Reservations, r) })
	}
	for _, r := range s.GetDedupe() {
		add(r, func(c *raftcmdv1.SlotState) { c.Dedupe = append(c.Dedupe, r) })
	}
	if size > 0 {
		parts = append(parts, cur)
	}
	return parts
}
