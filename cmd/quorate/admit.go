package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func newAdmitCmd() *cobra.Command {
	var (
		client    clientOptions
		req       quoratev1.AdmitRequest
		cost      int64
		output    outputFormat
		requestID string
	)
	cmd := &cobra.Command{
		Use:   "admit --policy P --key K [--cost N]",
		Short: "Ask for one admission decision",
		Long: "Admit asks the cluster whether one request under a policy and key may proceed,\n" +
			"and spends its cost when it may. Any node answers; the decision is strict across\n" +
			"the cluster. A denial is a result, not an error: it prints \"denied\" and exits 0.\n" +
			"An RPC error prints its Connect code and message and exits 1.",
		Example: "  quorate admit --policy api-free --key tenant-a\n" +
			"  quorate admit --server 127.0.0.1:7071 --policy api-free --key tenant-a --cost 5 -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "policy", "key"); err != nil {
				return err
			}
			if cmd.Flags().Changed("cost") {
				if cost < 1 {
					return fmt.Errorf("admit: --cost: must be at least 1 (got %d)", cost)
				}
				req.Cost = &cost
			}
			req.RequestId = requestID
			if req.RequestId == "" {
				req.RequestId = newRequestID()
			}
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := newAdmissionClient(base).Admit(ctx, connect.NewRequest(&req))
			if err != nil {
				return wrapRPC("Admit", base, req.RequestId, err)
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), resp.Msg)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), formatDecision(resp.Msg, req.RequestId))
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Policy, "policy", "", "policy name (required)")
	fs.StringVar(&req.Key, "key", "", "the limited identity, e.g. tenant:acme (required)")
	fs.Int64Var(&cost, "cost", 0, "units this request spends, 1..max_cost of the policy (unset: 1)")
	fs.StringVar(&requestID, "request-id", "", "identifies the request for a retry; default a random 128-bit hex ID")
	addClientFlags(cmd, &client)
	addOutputFlag(cmd, &output)
	return cmd
}

// formatDecision is the one-line text form of a decision, e.g.
//
//	allowed  remaining=19/20  reset_after=3s  retry_after=0s  policy_version=1  decided_at=2026-01-02T03:04:05.123456789Z  request_id=…
func formatDecision(d *quoratev1.AdmitResponse, requestID string) string {
	verdict := "allowed"
	if !d.GetAllowed() {
		verdict = "denied "
	}
	decidedAt := "-"
	if d.GetDecidedAt() != nil {
		decidedAt = d.GetDecidedAt().AsTime().UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s  remaining=%d/%d  reset_after=%s  retry_after=%s  policy_version=%d  decided_at=%s  request_id=%s",
		verdict, d.GetRemaining(), d.GetLimit(), fmtDuration(d.GetResetAfter()), fmtDuration(d.GetRetryAfter()),
		d.GetPolicyVersion(), decidedAt, requestID)
}

// newRequestID returns 128 random bits in hex. (crypto/rand.Read never
// fails; it crashes the program if the system has no randomness.)
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
