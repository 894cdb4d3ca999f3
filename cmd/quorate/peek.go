package main

import (
	"context"
	"fmt"
	"strconv"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/quorate/quorate/client"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func newPeekCmd() *cobra.Command {
	var (
		api    clientOptions
		req    quoratev1.PeekRequest
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "peek --policy P --key K",
		Short: "Show a key's state under a policy without spending anything",
		Long: "Peek asks how much a key has left under a policy, and whether a request of cost 1\n" +
			"would be allowed now, without spending anything. It is linearizable: it goes\n" +
			"through the Raft log like a decision, so it sees every decision made before it.\n" +
			"Peek changes nothing, so it is retried on unavailable, a server's\n" +
			"deadline_exceeded and connection failures until --timeout.",
		Example: "  quorate peek --policy api-free --key tenant-a\n" +
			"  quorate peek --server 127.0.0.1:7071 --policy login-failures --key user:42 -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "policy", "key"); err != nil {
				return err
			}
			resp, attempts, err := invoke(cmd, &api, dataCall{procedure: "Peek", key: req.GetKey(), readOnly: true},
				func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.PeekResponse], error) {
					return s.Admission.Peek(ctx, connect.NewRequest(&req))
				})
			if err != nil {
				return err
			}
			if output.structured() {
				return output.write(cmd.OutOrStdout(), resp)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), formatPeek(resp, attempts))
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Policy, "policy", "", "policy name (required)")
	fs.StringVar(&req.Key, "key", "", "the limited identity, e.g. tenant:acme (required)")
	addServersFlags(cmd, &api)
	addOutputFlag(cmd, &output)
	return cmd
}

// formatPeek is the one-line text form of a peek, e.g.
//
//	would allow  remaining=19/20  reset_after=1s  retry_after=0s  policy_version=1  decided_at=2026-01-02T03:04:05.123456789Z
//
// "would allow" or "would deny" is for a request of cost 1; attempts=N is
// added when the answer took more than one attempt.
func formatPeek(p *quoratev1.PeekResponse, attempts int) string {
	verdict := "would allow"
	if !p.GetWouldAllow() {
		verdict = "would deny "
	}
	s := fmt.Sprintf("%s  remaining=%d/%d  reset_after=%s  retry_after=%s  policy_version=%d  decided_at=%s",
		verdict, p.GetRemaining(), p.GetLimit(), fmtDuration(p.GetResetAfter()), fmtDuration(p.GetRetryAfter()),
		p.GetPolicyVersion(), fmtTimestamp(p.GetDecidedAt()))
	if attempts > 1 {
		s += "  attempts=" + strconv.Itoa(attempts)
	}
	return s
}
