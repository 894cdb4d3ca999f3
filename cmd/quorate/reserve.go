package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// reserve and commit speak AdmissionService's Reserve and Commit: for work
// whose cost is known only afterwards (LLM tokens), reserve holds an
// estimate of a rate or quota policy and commit charges the real cost. Both
// change state, so each is sent with a request ID (--request-id, or a random
// one) and retried with it like admit.

func newReserveCmd() *cobra.Command {
	var (
		api    clientOptions
		req    quoratev1.ReserveRequest
		ttl    time.Duration
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "reserve --policy P --key K --estimate N [--ttl D] [--caller C] [--request-id ID]",
		Short: "Hold an estimate of a rate or quota policy until commit settles the real cost",
		Long: "Reserve holds --estimate units of a rate or quota policy (not concurrency) on a key\n" +
			"for work whose cost is known only afterwards, such as LLM tokens: the units are\n" +
			"spent now, so ordinary admissions count them, and `quorate commit` with the\n" +
			"printed reservation ID charges the real cost and gives back the rest. A\n" +
			"reservation not committed within --ttl (default 10m) gives all its units back.\n" +
			"When the estimate does not fit, the answer is \"denied\" with retry_after: a\n" +
			"result, not an error; it exits 2 (an outcome unknown at --timeout exits 3).\n\n" +
			"Retries are exactly-once, as for admit: every attempt carries the same request ID\n" +
			"(--request-id, or a random one), so a retry gets the same reservation. Reserve\n" +
			"retries on unavailable, a server's deadline_exceeded and connection failures,\n" +
			"rotating through the --server list, until --timeout.",
		Example: "  quorate reserve --policy tokens --key tenant-a --estimate 800\n" +
			"  quorate reserve --policy tokens --key tenant-a --estimate 800 --ttl 2m --request-id call-42 -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "policy", "key"); err != nil {
				return err
			}
			if !cmd.Flags().Changed("estimate") {
				return fmt.Errorf("reserve: --estimate is required (the units to hold)")
			}
			if req.Estimate < 1 {
				return fmt.Errorf("reserve: --estimate: must be at least 1 (got %d)", req.Estimate)
			}
			if cmd.Flags().Changed("ttl") {
				if err := checkTTLFlag("reserve", ttl); err != nil {
					return err
				}
				req.Ttl = durationpb.New(ttl)
			}
			if req.RequestId == "" {
				req.RequestId = client.NewRequestID()
			}
			return runCall(cmd, &api, output, dataCall{procedure: "Reserve", key: req.GetKey(), requestID: req.GetRequestId(),
				hint: "retry with the same request ID: " + reserveCommandLine(api.server, &req)},
				func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.ReserveResponse], error) {
					res, err := s.Admission.Reserve(ctx, connect.NewRequest(&req))
					if err == nil {
						reportDenied(cmd, !res.Msg.GetAllowed()) // the answer: later attempts are none
					}
					return res, err
				},
				textOr(output, func(resp *quoratev1.ReserveResponse, attempts int) string {
					return formatReserve(resp, req.GetRequestId(), attempts)
				}))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Policy, "policy", "", "name of a rate or quota policy (required)")
	fs.StringVar(&req.Key, "key", "", "the limited identity, e.g. tenant:acme (required)")
	fs.Int64Var(&req.Estimate, "estimate", 0, "units to hold, 1..max_cost of the policy (required)")
	fs.DurationVar(&ttl, "ttl", 0, "how long the reservation holds its units without a commit, 1s..24h (unset: 10m)")
	addRequestIDFlags(cmd, &req.RequestId, &req.Caller)
	addServersFlags(cmd, &api)
	addOutputFlag(cmd, &output)
	return cmd
}

func newCommitCmd() *cobra.Command {
	var (
		api    clientOptions
		req    quoratev1.CommitRequest
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "commit --reservation-id ID --actual N [--caller C] [--request-id ID]",
		Short: "Charge the real cost of a reservation and give back the rest",
		Long: "Commit settles a reservation made by `quorate reserve`: it charges --actual units\n" +
			"and gives back the rest of the estimate. A cost above the estimate is charged as\n" +
			"far as the limit allows; the part that could not be is reported as over. A\n" +
			"reservation that is unknown, already committed or expired is not_found (exit 1),\n" +
			"and so is one another caller reserved: only the caller that reserved, with the\n" +
			"reservation ID it was given, can commit it.\n\n" +
			"Commit is retried like admit, with the same request ID, on unavailable, a\n" +
			"server's deadline_exceeded and connection failures, rotating through the --server\n" +
			"list, until --timeout: a retry of a commit that was applied gets its recorded\n" +
			"answer (shown as \"duplicate\"), not not_found.",
		Example: "  quorate commit --reservation-id UgZ0b2tlbnMIdGVuYW50LWEGMTc5NkAyP5EMXqJ3GNRguy4J9UOKwQ --actual 312",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "reservation-id"); err != nil {
				return err
			}
			if !cmd.Flags().Changed("actual") {
				return fmt.Errorf("commit: --actual is required (the work's real cost; 0 gives the whole estimate back)")
			}
			if req.Actual < 0 {
				return fmt.Errorf("commit: --actual: must be at least 0 (got %d)", req.Actual)
			}
			if req.RequestId == "" {
				req.RequestId = client.NewRequestID()
			}
			return runCall(cmd, &api, output, dataCall{procedure: "Commit", requestID: req.GetRequestId(),
				hint: "retry with the same request ID: " + commitCommandLine(api.server, &req)},
				func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.CommitResponse], error) {
					return s.Admission.Commit(ctx, connect.NewRequest(&req))
				},
				textOr(output, func(resp *quoratev1.CommitResponse, attempts int) string {
					return formatCommit(resp, req.GetRequestId(), attempts)
				}))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.ReservationId, "reservation-id", "", "the reservation ID printed by reserve (or by lease acquire --reserve-policy) (required)")
	fs.Int64Var(&req.Actual, "actual", 0, "the work's real cost, at least 0 (required)")
	addRequestIDFlags(cmd, &req.RequestId, &req.Caller)
	addServersFlags(cmd, &api)
	addOutputFlag(cmd, &output)
	return cmd
}

// reserveCommandLine and commitCommandLine are the commands that repeat a
// request with its request ID, for an error whose outcome is unknown.
func reserveCommandLine(servers string, req *quoratev1.ReserveRequest) string {
	args := []string{"quorate", "reserve", "--server", servers, "--policy", req.GetPolicy(), "--key", req.GetKey(),
		"--estimate", strconv.FormatInt(req.GetEstimate(), 10)}
	if req.GetTtl() != nil {
		args = append(args, "--ttl", req.GetTtl().AsDuration().String())
	}
	return commandLine(appendRequestID(args, req.GetCaller(), req.GetRequestId()))
}

func commitCommandLine(servers string, req *quoratev1.CommitRequest) string {
	args := []string{"quorate", "commit", "--server", servers, "--reservation-id", req.GetReservationId(),
		"--actual", strconv.FormatInt(req.GetActual(), 10)}
	return commandLine(appendRequestID(args, req.GetCaller(), req.GetRequestId()))
}

// formatReserve is the one-line text form of a reservation, e.g.
//
//	allowed  reservation_id=dG9r…  remaining=19200/20000  expires_at=…  policy_version=1  decided_at=…  request_id=…
//	denied   remaining=300/20000  retry_after=2.1s  policy_version=1  decided_at=…  request_id=…
func formatReserve(r *quoratev1.ReserveResponse, requestID string, attempts int) string {
	var s string
	if r.GetAllowed() {
		s = fmt.Sprintf("%s  reservation_id=%s  remaining=%d/%d  expires_at=%s",
			verdict("allowed", len("allowed"), r.GetDuplicate()), r.GetReservationId(), r.GetRemaining(), r.GetLimit(),
			fmtTimestamp(r.GetExpiresAt()))
	} else {
		s = fmt.Sprintf("%s  remaining=%d/%d  retry_after=%s",
			verdict("denied", len("allowed"), r.GetDuplicate()), r.GetRemaining(), r.GetLimit(), fmtDuration(r.GetRetryAfter()))
	}
	s += fmt.Sprintf("  policy_version=%d  decided_at=%s  request_id=%s", r.GetPolicyVersion(), fmtTimestamp(r.GetDecidedAt()), requestID)
	return withAttempts(s, attempts)
}

// formatCommit is the one-line text form of a commit, e.g.
//
//	committed  charged=312  released=488  over=0  decided_at=…  request_id=…
func formatCommit(r *quoratev1.CommitResponse, requestID string, attempts int) string {
	s := fmt.Sprintf("%s  charged=%d  released=%d  over=%d  decided_at=%s  request_id=%s",
		verdict("committed", len("committed"), r.GetDuplicate()), r.GetCharged(), r.GetReleased(), r.GetOver(),
		fmtTimestamp(r.GetDecidedAt()), requestID)
	return withAttempts(s, attempts)
}
