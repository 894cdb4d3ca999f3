package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// maxAuditLimit is the most records one ListAudit page holds.
const maxAuditLimit = 1000

func newAdminAuditCmd() *cobra.Command {
	var (
		client clientOptions
		output outputFormat
		since  uint64
		limit  uint32
	)
	cmd := &cobra.Command{
		Use:   "audit [--since N] [--limit N]",
		Short: "List the admin changes recorded in the meta group's log",
		Long: "Audit lists the admin changes the meta group recorded (policies applied or\n" +
			"deleted, nodes added, removed, drained or uncordoned, replicas moved, rebalances,\n" +
			"plans started, cancelled and finished), oldest first: the log index of each, its\n" +
			"time in the log, who asked (the authenticated caller, \"-\" when anonymous, or\n" +
			"node:<id> for a change the cluster made on its own), the change and what it\n" +
			"named. The meta group keeps the last 10,000. --since N lists records after log\n" +
			"index N; --limit bounds a page (at most 1000); the next page starts after the\n" +
			"last index shown.",
		Example: "  quorate admin audit\n" +
			"  quorate admin audit --since 1200 --limit 50 -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit > maxAuditLimit {
				return fmt.Errorf("--limit: %d is above %d", limit, maxAuditLimit)
			}
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.adminClient(base).ListAudit(ctx, connect.NewRequest(&quoratev1.ListAuditRequest{Since: since, Limit: limit}))
			if err != nil {
				return wrapRPC("ListAudit", base, "", err)
			}
			if output.structured() {
				return output.write(cmd.OutOrStdout(), resp.Msg)
			}
			return writeAudit(cmd.OutOrStdout(), resp.Msg)
		},
	}
	cmd.Flags().Uint64Var(&since, "since", 0, "list records after this log index")
	cmd.Flags().Uint32Var(&limit, "limit", 0, "list at most this many records (default 100, at most 1000)")
	addClientFlags(cmd, &client)
	addOutputFlag(cmd, &output)
	return cmd
}

// writeAudit prints one table row per record and, when more follow, how
// to list them.
func writeAudit(w io.Writer, r *quoratev1.ListAuditResponse) error {
	if len(r.GetEntries()) == 0 {
		_, err := fmt.Fprintln(w, "no audit records")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tTIME\tACTOR\tACTION\tSUMMARY")
	for _, e := range r.GetEntries() {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.GetIndex(), fmtTimestamp(e.GetTime()), auditActor(e), e.GetAction(), dash(e.GetSummary()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.GetMore() {
		last := r.GetEntries()[len(r.GetEntries())-1].GetIndex()
		_, err := fmt.Fprintf(w, "more records follow: quorate admin audit --since %d\n", last)
		return err
	}
	return nil
}

// auditActor is who asked, as the table shows it: the caller with how it
// was authenticated, "-" for an anonymous request.
func auditActor(e *quoratev1.AuditEntry) string {
	switch {
	case e.GetCaller() == "":
		return "-"
	case e.GetSource() == "" || e.GetSource() == "node":
		return e.GetCaller()
	}
	return e.GetCaller() + " (" + e.GetSource() + ")"
}
