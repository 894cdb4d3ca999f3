package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/node"
)

func newAdminRecoverCmd() *cobra.Command {
	var (
		dataDir string
		yes     bool
	)
	cmd := &cobra.Command{
		Use:   "recover --data-dir DIR",
		Short: "Make a stopped node the only voter of its groups, after its cluster lost a majority for good",
		Long: "Recover is for a cluster that lost a majority of its nodes for good: their groups can\n" +
			"never elect a leader again. Run it offline, on the data directory (--data-dir) of a\n" +
			"stopped surviving node: it rewrites the Raft membership of the meta group and of every\n" +
			"data group whose replica the directory holds to this node alone. Then start the node\n" +
			"again with the same flags, without --bootstrap or --join: it leads each of those groups\n" +
			"alone and serves; join new nodes to it, and remove the lost ones with\n" +
			"`quorate admin node remove ID --force`.\n\n" +
			"What can be lost: entries this node never received (decisions, policy and map changes\n" +
			"the lost nodes committed and acknowledged but had not replicated here) are gone, so a\n" +
			"key may admit again what those decisions had spent. Entries this node received but that\n" +
			"were never committed become committed. It prints what it found and asks before it\n" +
			"changes anything, unless --yes. It refuses while a node runs on the directory.\n" +
			"Never run it on more than one node of a cluster: recover one survivor, and start every\n" +
			"other survivor afresh (empty data directory, --join to the recovered node).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return fmt.Errorf("--data-dir: required: the data directory of the stopped node to recover")
			}
			out := cmd.OutOrStdout()
			in := bufio.NewReader(cmd.InOrStdin())
			plan, err := node.Recover(dataDir, func(p *node.RecoveryPlan) bool {
				writeRecoveryPlan(out, dataDir, p)
				if yes {
					return true
				}
				fmt.Fprint(out, "Type yes to rewrite these groups' membership: ")
				line, _ := in.ReadString('\n')
				return strings.TrimSpace(line) == "yes"
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "Recovered: node %s is the only voter of %d group(s). Start it again on %s with the same flags,\n"+
				"without --bootstrap or --join; join new nodes to it, then remove each lost node with\n"+
				"`quorate admin node remove ID --force`.\n", plan.NodeID, recovered(plan), dataDir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "data directory of the stopped node to recover (required)")
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	return cmd
}

func recovered(p *node.RecoveryPlan) int {
	n := 0
	for _, g := range p.Groups {
		if g.Skipped == "" {
			n++
		}
	}
	return n
}

// writeRecoveryPlan says what recovering p does and what can be lost.
func writeRecoveryPlan(w io.Writer, dir string, p *node.RecoveryPlan) {
	fmt.Fprintf(w, "Data directory %s: node %s, Raft address %s.\n", dir, p.NodeID, p.RaftAddr)
	fmt.Fprintln(w, "Each group below becomes a group of one voter, this node, with the entries this node holds:")
	for _, g := range p.Groups {
		name := fmt.Sprintf("data group %d", g.ID)
		if g.ID == 0 {
			name = "meta group"
		}
		fmt.Fprintf(w, "  %s: last entry %d (term %d), snapshot at %d; voters %s", name, g.LastIndex, g.LastTerm, g.SnapshotIndex,
			strings.Join(g.Voters, ", "))
		switch {
		case g.Skipped != "":
			fmt.Fprintf(w, "; skipped: %s\n", g.Skipped)
		case len(g.Lost) > 0:
			fmt.Fprintf(w, "; drops %s\n", strings.Join(g.Lost, ", "))
		default:
			fmt.Fprintln(w)
		}
		if g.Skipped == "" && g.Suffrage != "voter" {
			fmt.Fprintf(w, "    this node is a %s of it: its replica may be far behind what the group committed\n", g.Suffrage)
		}
	}
	for _, id := range p.Unhosted {
		fmt.Fprintf(w, "  data group %d: no replica here; the shard map places it on other nodes only, and it stays without a leader\n", id)
	}
	fmt.Fprintln(w, "What can be lost: every entry the lost nodes committed but never sent to this node —\n"+
		"decisions acknowledged to clients (a key may admit again what they spent), policy and\n"+
		"shard map changes. Entries this node holds that were never committed become committed.\n"+
		"Run this on one surviving node only; the node must stay stopped meanwhile.")
}
