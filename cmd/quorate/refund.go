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

func newRefundCmd() *cobra.Command {
	var (
		api    clientOptions
		req    quoratev1.RefundRequest
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "refund --key KEY --request-id ID [--caller C]",
		Short: "Give back what an admitted request spent",
		Long: "Refund gives back what an earlier admitted request spent (every check of a\n" +
			"multi-check request), e.g. because the work it guarded failed. The request is\n" +
			"named by what it was admitted with: its --key, --request-id and --caller (all\n" +
			"three, as given to admit; --caller may be empty). --key is required: it routes\n" +
			"the refund to the key's data group and is part of the request's identity. The\n" +
			"request must still be remembered (within its policy's dedupe_retention);\n" +
			"otherwise the answer is not_found.\n\n" +
			"A refund happens at most once: a repeat prints \"already refunded\" and changes\n" +
			"nothing. So refund retries like admit, with the same request ID, on\n" +
			"unavailable, a server's deadline_exceeded and connection failures, rotating\n" +
			"through the --server list, until --timeout.",
		Example: "  quorate refund --caller billing --request-id invoice-42 --key tenant-a\n" +
			"  quorate refund --server 127.0.0.1:7070,127.0.0.1:7071 --request-id 5f0c... --key tenant-a -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "key", "request-id"); err != nil {
				return fmt.Errorf("%w (a request is named by the --key, --request-id and --caller it was admitted with)", err)
			}
			return runCall(cmd, &api, output, dataCall{procedure: "Refund", key: req.GetKey(), requestID: req.GetRequestId(),
				hint: "retry with the same request ID: " + refundCommandLine(api.server, &req)},
				func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.RefundResponse], error) {
					return s.Admission.Refund(ctx, connect.NewRequest(&req))
				},
				textOr(output, func(resp *quoratev1.RefundResponse, attempts int) string {
					return formatRefund(resp, req.GetRequestId(), attempts)
				}))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.RequestId, "request-id", "", "the request ID of the admitted request to refund (required)")
	fs.StringVar(&req.Caller, "caller", "", "the caller the request was admitted with (its request ID's namespace)")
	fs.StringVar(&req.Key, "key", "", "the key the request was admitted for (required: it routes the refund and is part of the request's identity)")
	addServersFlags(cmd, &api)
	addOutputFlag(cmd, &output)
	return cmd
}

// refundCommandLine is the command that repeats req, for an error whose
// outcome is unknown.
func refundCommandLine(servers string, req *quoratev1.RefundRequest) string {
	args := []string{"quorate", "refund", "--server", servers}
	if req.GetCaller() != "" {
		args = append(args, "--caller", req.GetCaller())
	}
	if req.GetKey() != "" {
		args = append(args, "--key", req.GetKey())
	}
	return commandLine(append(args, "--request-id", req.GetRequestId()))
}

// formatRefund is the one-line text form of a refund, e.g.
//
//	refunded  cost=3  refunded_at=2026-01-02T03:04:05.123456789Z  request_id=invoice-42
//
// A repeat reads "already refunded (nothing changed now)"; when this command
// made more than one attempt, an earlier attempt may be the one that
// refunded, and attempts=N says so.
func formatRefund(r *quoratev1.RefundResponse, requestID string, attempts int) string {
	verdict := "refunded"
	if !r.GetRefunded() {
		verdict = "already refunded (nothing changed now)"
	}
	s := fmt.Sprintf("%s  cost=%d  refunded_at=%s  request_id=%s", verdict, r.GetCost(), fmtTimestamp(r.GetRefundedAt()), requestID)
	if attempts > 1 {
		s += "  attempts=" + strconv.Itoa(attempts)
		if !r.GetRefunded() {
			s += " (an earlier attempt of this command may have refunded it)"
		}
	}
	return s
}
