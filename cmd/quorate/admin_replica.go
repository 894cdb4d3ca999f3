package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

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
			"up). With --wait it reports until --to votes in the group and --from is gone, or\n" +
			"--timeout (10m by default) passes.",
		Example: "  quorate admin replica move --group 3 --from node1 --to node4 --wait",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "group", "from", "to"); err != nil {
				return err
			}
			applyWaitTimeout(cmd, &client, wait)
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			ac := client.adminClient(base)
			resp, err := ac.MoveReplica(ctx, connect.NewRequest(&quoratev1.MoveReplicaRequest{Group: group, From: from, To: to}))
			if err != nil {
				return wrapRPC("MoveReplica", base, "", err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "group %d: replica %s → %s in the shard map (epoch %d)\n", group, from, to, resp.Msg.GetMapEpoch())
			if !wait {
				return nil
			}
			w := &waiter{what: fmt.Sprintf("%s to vote in group %d and %s to close its replica", to, group, from),
				budget: client.timeout, perTry: waitRequestTimeout, out: out, errOut: cmd.ErrOrStderr(),
				after: "the move goes on without this command: follow it with quorate admin status --server " + base}
			return w.run(ctx, func(attempt context.Context) (string, bool, error) {
				st, err := ac.ClusterStatus(attempt, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
				if err != nil {
					return "", false, wrapRPC("ClusterStatus", base, "", err)
				}
				state := replicaMoveState(st.Msg, group, from, to)
				return state, state == "done", nil
			})
		},
	}
	fs := cmd.Flags()
	fs.Uint32Var(&group, "group", 0, "data group ID (see quorate admin status)")
	fs.StringVar(&from, "from", "", "node ID that holds the replica now")
	fs.StringVar(&to, "to", "", "node ID to hold it instead")
	fs.BoolVar(&wait, "wait", false, "report progress until the move is done (within --timeout)")
	addClientFlags(cmd, &client)
	cmd.Flags().Lookup("timeout").Usage = timeoutUsageWithWait
	return cmd
}

// replicaMoveState describes how far a move has come by each member's view
// of the group: "done" once --to leads or follows it and --from hosts none.
// When --to cannot take part (it never joined, or does not answer), it says
// so.
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
		if why := memberTrouble(s, to); why != "" {
			return fmt.Sprintf("waiting for %s to open its replica, but %s", to, why)
		}
		return fmt.Sprintf("waiting for %s to open its replica", to)
	case !slices.Contains([]string{"leader", "follower"}, toRole) || fromHosts:
		return fmt.Sprintf("%s is %s; %s still hosts a replica", to, toRole, from)
	}
	return "done"
}

// memberTrouble says why node id cannot take part in a move: it is not a
// member of the cluster (pre-registered, never started), or it does not
// answer; "" when it answers.
func memberTrouble(s *quoratev1.ClusterStatusResponse, id string) string {
	for _, m := range s.GetMembers() {
		if m.GetId() != id {
			continue
		}
		if m.GetStatus() == nil {
			return fmt.Sprintf("%s does not answer (%s)", id, dash(m.GetError()))
		}
		return ""
	}
	return fmt.Sprintf("%s has not joined the cluster (start it with quorate serve --id %s --join ADDR)", id, id)
}

func newAdminNodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Operate on one node of the cluster",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newAdminNodeAddCmd(), newAdminNodeDrainCmd(), newAdminNodeUncordonCmd(), newAdminNodeRemoveCmd())
	return cmd
}

func newAdminNodeUncordonCmd() *cobra.Command {
	var client clientOptions
	cmd := &cobra.Command{
		Use:   "uncordon ID",
		Short: "Let plans place replicas on a drained node again",
		Long: "Drain cordons the node it drains: no later drain, rebalance or new group puts a replica\n" +
			"on it. Uncordon lifts that (remove lifts it too). Running it again is harmless.",
		Example: "  quorate admin node uncordon node3 && quorate admin rebalance",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.adminClient(base).UncordonNode(ctx, connect.NewRequest(&quoratev1.UncordonNodeRequest{Id: args[0]}))
			if err != nil {
				return wrapRPC("UncordonNode", base, "", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s may take replicas again (shard map epoch %d)\n", args[0], resp.Msg.GetMapEpoch())
			return nil
		},
	}
	addClientFlags(cmd, &client)
	return cmd
}

func newAdminNodeAddCmd() *cobra.Command {
	var (
		client            clientOptions
		raftAddr, apiAddr string
	)
	cmd := &cobra.Command{
		Use:   "add ID --raft-addr HOST:PORT --api-addr HOST:PORT",
		Short: "Pre-register a node that will join later",
		Long: "Add records a node's ID and addresses in the cluster's registry before it runs, so that\n" +
			"`group add --replicas` and `replica move --to` may name it; start it later with\n" +
			"`quorate serve --id ID --join ...` and the same addresses. Until it has joined and\n" +
			"answers, drains, rebalances and groups placed by the cluster leave it out. A node that\n" +
			"starts with --join registers itself anyway: pre-registering is only needed to plan\n" +
			"ahead. Running it again is harmless; other addresses for a registered ID are refused.",
		Example: "  quorate admin node add node4 --raft-addr 10.0.0.4:7170 --api-addr 10.0.0.4:7070",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if raftAddr == "" {
				return errors.New("--raft-addr: required (the address the node's Raft port will listen on)")
			}
			if apiAddr == "" {
				return errors.New("--api-addr: required (the address the node's API will listen on)")
			}
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			_, err = client.adminClient(base).AddNode(ctx, connect.NewRequest(&quoratev1.AddNodeRequest{Id: args[0], RaftAddr: raftAddr, ApiAddr: apiAddr}))
			if err != nil {
				return wrapRPC("AddNode", base, "", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s registered (raft %s, API %s): start it with --join\n", args[0], raftAddr, apiAddr)
			return nil
		},
	}
	cmd.Flags().StringVar(&raftAddr, "raft-addr", "", "host:port the node's Raft (peer) port will listen on")
	cmd.Flags().StringVar(&apiAddr, "api-addr", "", "host:port the node's API will listen on")
	addClientFlags(cmd, &client)
	return cmd
}

func newAdminNodeRemoveCmd() *cobra.Command {
	var (
		client clientOptions
		force  bool
	)
	cmd := &cobra.Command{
		Use:   "remove ID [--force]",
		Short: "Take a node out of the cluster",
		Long: "Remove takes a node out of the meta group (a non-voter takes its vote when it had\n" +
			"one) and out of the registry. A node that still holds data group replicas is\n" +
			"refused unless --force, which first moves them to the other nodes (for a dead\n" +
			"node: its groups get new replicas from the survivors). Running it again finishes\n" +
			"an interrupted removal.",
		Example: "  quorate admin node drain node3 --wait && quorate admin node remove node3\n" +
			"  quorate admin node remove node3 --force   # node3 is dead",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			if _, err := client.adminClient(base).RemoveNode(ctx, connect.NewRequest(&quoratev1.RemoveNodeRequest{Id: args[0], Force: force})); err != nil {
				return wrapRPC("RemoveNode", base, "", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s removed from the cluster\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "move the node's data group replicas away first (needed for a dead node)")
	addClientFlags(cmd, &client)
	return cmd
}

func newAdminNodeDrainCmd() *cobra.Command {
	var (
		client clientOptions
		wait   bool
		remove bool
	)
	cmd := &cobra.Command{
		Use:   "drain ID [--wait] [--remove]",
		Short: "Move every data group replica off a node",
		Long: "Drain writes one shard map change that moves each of the node's data group\n" +
			"replicas to the node outside that group holding the fewest (among the nodes that joined\n" +
			"the cluster and answer: a pre-registered node that never started is left out), and\n" +
			"cordons the node (no later plan places a replica on it until `node uncordon`); the\n" +
			"groups' leaders carry the moves out as for `replica move`. Running it again is\n" +
			"harmless (0 moves). With --wait it reports until the node hosts no data group replica,\n" +
			"saying on stderr what it waits for, and gives up at --timeout (10m by default); the\n" +
			"node stays a member of the cluster (its meta group seat is not changed) unless\n" +
			"--remove is given: then, once it hosts nothing, it is removed from the cluster as by\n" +
			"`node remove`, and can be stopped.",
		Example: "  quorate admin node drain node3 --wait\n  quorate admin node drain node3 --remove",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			applyWaitTimeout(cmd, &client, wait || remove)
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			ac := client.adminClient(base)
			resp, err := ac.DrainNode(ctx, connect.NewRequest(&quoratev1.DrainNodeRequest{Id: id}))
			if err != nil {
				return wrapRPC("DrainNode", base, "", err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: %d %s to move (shard map epoch %d)\n", id, resp.Msg.GetMoves(),
				plural(int(resp.Msg.GetMoves()), "replica", "replicas"), resp.Msg.GetMapEpoch())
			if !wait && !remove {
				return nil
			}
			w := &waiter{what: id + " to host no data group replica", budget: client.timeout, perTry: waitRequestTimeout,
				out: out, errOut: cmd.ErrOrStderr(),
				after: "the drain goes on without this command: follow it with quorate admin status --server " + base}
			err = w.run(ctx, func(attempt context.Context) (string, bool, error) {
				st, err := ac.ClusterStatus(attempt, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
				if err != nil {
					return "", false, wrapRPC("ClusterStatus", base, "", err)
				}
				return drainState(st.Msg, id), hostedReplicas(st.Msg, id) == 0, nil
			})
			if err != nil || !remove {
				return err
			}
			rctx, rcancel := context.WithTimeout(ctx, waitRequestTimeout)
			_, err = ac.RemoveNode(rctx, connect.NewRequest(&quoratev1.RemoveNodeRequest{Id: id}))
			rcancel()
			if err != nil {
				return wrapRPC("RemoveNode", base, "", err)
			}
			fmt.Fprintf(out, "%s removed from the cluster: it can be stopped\n", id)
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "report progress until the node hosts no replica (within --timeout)")
	cmd.Flags().BoolVar(&remove, "remove", false, "once the node hosts no replica, remove it from the cluster (implies --wait)")
	addClientFlags(cmd, &client)
	cmd.Flags().Lookup("timeout").Usage = timeoutUsageWithWait
	return cmd
}

// hostedReplicas counts the data group replicas node id reports hosting
// (-1 when it did not answer).
func hostedReplicas(s *quoratev1.ClusterStatusResponse, id string) int {
	for _, m := range s.GetMembers() {
		if m.GetId() != id {
			continue
		}
		if m.GetStatus() == nil {
			return -1
		}
		n := 0
		for _, g := range m.GetStatus().GetGroups() {
			if g.GetId() != 0 {
				n++
			}
		}
		return n
	}
	return -1
}

// drainState describes a drain's progress: how many data group replicas
// node id still hosts and, for each of those groups, which node of the
// shard map has yet to take its replica and, when that node cannot (never
// joined, does not answer), why.
func drainState(s *quoratev1.ClusterStatusResponse, id string) string {
	left := hostedReplicas(s, id)
	if left < 0 {
		return fmt.Sprintf("cannot tell what %s hosts: %s (a dead node is taken out with: quorate admin node remove %s --force)",
			id, memberTrouble(s, id), id)
	}
	head := fmt.Sprintf("%s hosts %d data group %s", id, left, plural(left, "replica", "replicas"))
	if left == 0 {
		return head
	}
	hosts := map[uint32][]string{} // group → members reporting a replica
	var mine []uint32
	for _, m := range s.GetMembers() {
		for _, g := range m.GetStatus().GetGroups() {
			if g.GetId() == 0 {
				continue
			}
			hosts[g.GetId()] = append(hosts[g.GetId()], m.GetId())
			if m.GetId() == id {
				mine = append(mine, g.GetId())
			}
		}
	}
	slices.Sort(mine)
	var parts []string
	for _, gid := range mine {
		var to []string // replicas of the map not open yet
		for _, g := range s.GetShardMap().GetGroups() {
			if g.GetId() != gid {
				continue
			}
			for _, r := range g.GetReplicas() {
				if slices.Contains(hosts[gid], r) {
					continue
				}
				if why := memberTrouble(s, r); why != "" {
					r += " (" + why + ")"
				}
				to = append(to, r)
			}
		}
		part := fmt.Sprintf("group %d", gid)
		if len(to) > 0 {
			part += " → " + strings.Join(to, ", ")
		}
		parts = append(parts, part)
	}
	return head + ": " + strings.Join(parts, "; ")
}
