package main

import (
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func newAdminReplicaCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replica",
		Short: "Move data group replicas between nodes",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newAdminReplicaMoveCmd())
	return cmd
}

func newAdminReplicaMoveCmd() *cobra.Command {
	var (
		client   clientOptions
		group    uint32
		from, to string
		wait     bool
	)
	cmd := &cobra.Command{
		Use:   "move --group G --from NODE --to NODE [--wait]",
		Short: "Move a data group's replica from one node to another",
		Long: "Move writes the move into the shard map; the group's leader then adds --to as a\n" +
			"non-voter, promotes it once it has caught up, and removes --from; --from closes its\n" +
			"replica afterwards. The move goes on without this command (a new leader takes it\n" +
			"up). With --wait it reports until --to votes in the group and --from is gone.",
		Example: "  quorate admin replica move --group 3 --from node1 --to node4 --wait",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "group", "from", "to"); err != nil {
				return err
			}
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			ac := newAdminClient(base)
			resp, err := ac.MoveReplica(ctx, connect.NewRequest(&quoratev1.MoveReplicaRequest{Group: group, From: from, To: to}))
			if err != nil {
				return wrapRPC("MoveReplica", base, "", err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "group %d: replica %s → %s in the shard map (epoch %d)\n", group, from, to, resp.Msg.GetMapEpoch())
			if !wait {
				return nil
			}
			wctx := cmd.Context()
			for last := ""; ; {
				st, err := ac.ClusterStatus(wctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
				if err == nil {
					state := replicaMoveState(st.Msg, group, from, to)
					if state != last {
						fmt.Fprintf(out, "%s  %s\n", time.Now().Format("15:04:05"), state)
						last = state
					}
					if state == "done" {
						return nil
					}
				}
				select {
				case <-wctx.Done():
					return wctx.Err()
				case <-time.After(500 * time.Millisecond):
				}
			}
		},
	}
	fs := cmd.Flags()
	fs.Uint32Var(&group, "group", 0, "data group ID (see quorate admin status)")
	fs.StringVar(&from, "from", "", "node ID that holds the replica now")
	fs.StringVar(&to, "to", "", "node ID to hold it instead")
	fs.BoolVar(&wait, "wait", false, "report progress until the move is done")
	addClientFlags(cmd, &client)
	return cmd
}

// replicaMoveState describes how far a move has come by each member's view
// of the group: "done" once --to leads or follows it and --from hosts none.
func replicaMoveState(s *quoratev1.ClusterStatusResponse, group uint32, from, to string) string {
	toRole, fromHosts := "", false
	for _, m := range s.GetMembers() {
		for _, g := range m.GetStatus().GetGroups() {
			if g.GetId() != group {
				continue
			}
			switch m.GetId() {
			case to:
				toRole = g.GetRole()
			case from:
				fromHosts = true
			}
		}
	}
	switch {
	case toRole == "":
		return fmt.Sprintf("waiting for %s to open its replica", to)
	case !slices.Contains([]string{"leader", "follower"}, toRole) || fromHosts:
		return fmt.Sprintf("%s is %s; %s still hosts a replica", to, toRole, from)
	}
	return "done"
}
