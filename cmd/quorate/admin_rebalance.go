package main

import (
	"fmt"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func newAdminRebalanceCmd() *cobra.Command {
	var (
		client clientOptions
		dryRun bool
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "rebalance [--dry-run]",
		Short: "Even data group replicas and leaders across the nodes",
		Long: "Rebalance writes one shard map change that moves replicas from the nodes holding the\n" +
			"most to those holding the fewest (until counts differ by at most one), then makes each\n" +
			"group's preferred leader (its first replica) spread the same way. The groups' leaders carry\n" +
			"the moves out as for `replica move` and hand leadership to their preferred leaders.\n" +
			"--dry-run prints the plan and changes nothing. The candidates are the registered nodes\n" +
			"that joined the cluster and answer: replicas on a dead node stay there (take it out with\n" +
			"`node remove --force`), and a pre-registered node takes none until it has started.",
		Example: "  quorate admin rebalance --dry-run\n  quorate admin rebalance",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.adminClient(base).Rebalance(ctx, connect.NewRequest(&quoratev1.RebalanceRequest{DryRun: dryRun}))
			if err != nil {
				return wrapRPC("Rebalance", base, "", err)
			}
			out := cmd.OutOrStdout()
			if output.structured() {
				return output.write(out, resp.Msg)
			}
			fmt.Fprint(out, rebalanceText(resp.Msg, dryRun))
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the changes without making them")
	addOutputFlag(cmd, &output)
	addClientFlags(cmd, &client)
	return cmd
}

// rebalanceText describes a Rebalance answer.
func rebalanceText(r *quoratev1.RebalanceResponse, dryRun bool) string {
	if len(r.GetChanges()) == 0 {
		return fmt.Sprintf("balanced already: nothing to change (shard map epoch %d)\n", r.GetMapEpoch())
	}
	head := fmt.Sprintf("%d %s (shard map epoch %d):\n", len(r.GetChanges()), plural(len(r.GetChanges()), "change", "changes"), r.GetMapEpoch())
	if dryRun {
		head = fmt.Sprintf("would make %d %s (dry run; shard map still at epoch %d):\n", len(r.GetChanges()),
			plural(len(r.GetChanges()), "change", "changes"), r.GetMapEpoch())
	}
	for _, c := range r.GetChanges() {
		head += "  " + c + "\n"
	}
	return head
}
