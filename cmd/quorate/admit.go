package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
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
			"An RPC error prints its Connect code and message and exits 1.\n\n" +
			"Retries are exactly-once: every attempt carries the same request ID (--request-id,\n" +
			"or a random one) and payload, so a request that was applied before its answer was\n" +
			"lost gets the recorded answer (shown as \"duplicate\") and spends nothing again.\n" +
			"Admit retries on unavailable, a server's deadline_exceeded and connection\n" +
			"failures, rotating through the --server list, until --timeout. If the deadline\n" +
			"passes while the outcome is unknown, the error prints the command to retry with.",
		Example: "  quorate admit --policy api-free --key tenant-a\n" +
			"  quorate admit --server 127.0.0.1:7071 --policy api-free --key tenant-a --cost 5 -o json\n" +
			"  quorate admit --server 127.0.0.1:7070,127.0.0.1:7071,127.0.0.1:7072 --caller billing \\\n" +
			"      --request-id invoice-42 --policy api-paid --key tenant-a",
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
			servers, ctx, cancel, err := client.beginServers(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			r := retrier{
				servers:   servers,
				backoff:   defaultBackoff,
				retryHint: "retry with the same request ID: " + admitCommandLine(client.server, &req),
				onRetry: func(attempt int, server string, err error, wait time.Duration) {
					fmt.Fprintf(cmd.ErrOrStderr(), "quorate: attempt %d failed: %v; retrying in %v\n", attempt, err, wait.Round(time.Millisecond))
				},
			}
			resp, attempts, err := admitWithRetries(ctx, r, &req, newAdmissionClient)
			if err != nil {
				return err
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), formatDecision(resp, req.GetRequestId(), attempts))
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Policy, "policy", "", "policy name (required)")
	fs.StringVar(&req.Key, "key", "", "the limited identity, e.g. tenant:acme (required)")
	fs.Int64Var(&cost, "cost", 0, "units this request spends, 1..max_cost of the policy (unset: 1)")
	fs.StringVar(&requestID, "request-id", "", "identifies the request for exactly-once retries: a repeat with the same caller\n"+
		"and request ID gets the first answer and spends nothing; default a random 128-bit hex ID")
	fs.StringVar(&req.Caller, "caller", "", "namespace of the request ID, e.g. the calling service's name (up to 128 bytes);\n"+
		"taken as given for now, it will be derived by the server from the caller's identity\n"+
		"once Quorate authenticates callers")
	addServersFlags(cmd, &client)
	addOutputFlag(cmd, &output)
	return cmd
}

// admitWithRetries sends req through r until it is answered. req is built
// once, before the first attempt, and never changed: every attempt sends the
// same request ID and payload. newClient makes the client of one server.
func admitWithRetries(ctx context.Context, r retrier, req *quoratev1.AdmitRequest,
	newClient func(baseURL string) quoratev1connect.AdmissionServiceClient,
) (_ *quoratev1.AdmitResponse, attempts int, _ error) {
	clients := make(map[string]quoratev1connect.AdmissionServiceClient, len(r.servers))
	var resp *quoratev1.AdmitResponse
	attempts, err := r.do(ctx, func(ctx context.Context, server string) error {
		c, ok := clients[server]
		if !ok {
			c = newClient(server)
			clients[server] = c
		}
		res, err := c.Admit(ctx, connect.NewRequest(req))
		if err != nil {
			return wrapRPC("Admit", server, req.GetRequestId(), err)
		}
		resp = res.Msg
		return nil
	})
	if err != nil {
		return nil, attempts, err
	}
	return resp, attempts, nil
}

// admitCommandLine is the command that repeats req with its request ID, for
// an error whose outcome is unknown.
func admitCommandLine(servers string, req *quoratev1.AdmitRequest) string {
	args := []string{"quorate", "admit", "--server", servers, "--policy", req.GetPolicy(), "--key", req.GetKey()}
	if req.Cost != nil {
		args = append(args, "--cost", strconv.FormatInt(req.GetCost(), 10))
	}
	if req.GetCaller() != "" {
		args = append(args, "--caller", req.GetCaller())
	}
	args = append(args, "--request-id", req.GetRequestId())
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return strings.Join(args, " ")
}

// shellQuote returns s as one POSIX shell word.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.,:/@%+=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// formatDecision is the one-line text form of a decision, e.g.
//
//	allowed  remaining=19/20  reset_after=3s  retry_after=0s  policy_version=1  decided_at=2026-01-02T03:04:05.123456789Z  request_id=…
//
// A recorded answer to an earlier request with the same request ID reads
// "allowed (duplicate)" or "denied (duplicate)", and attempts=N is added when
// the answer took more than one attempt.
func formatDecision(d *quoratev1.AdmitResponse, requestID string, attempts int) string {
	verdict := "allowed"
	if !d.GetAllowed() {
		verdict = "denied"
	}
	width := len("allowed")
	if d.GetDuplicate() {
		verdict += " (duplicate)"
		width = len("allowed (duplicate)")
	}
	decidedAt := "-"
	if d.GetDecidedAt() != nil {
		decidedAt = d.GetDecidedAt().AsTime().UTC().Format(time.RFC3339Nano)
	}
	s := fmt.Sprintf("%-*s  remaining=%d/%d  reset_after=%s  retry_after=%s  policy_version=%d  decided_at=%s  request_id=%s",
		width, verdict, d.GetRemaining(), d.GetLimit(), fmtDuration(d.GetResetAfter()), fmtDuration(d.GetRetryAfter()),
		d.GetPolicyVersion(), decidedAt, requestID)
	if attempts > 1 {
		s += "  attempts=" + strconv.Itoa(attempts)
	}
	return s
}

// newRequestID returns 128 random bits in hex. (crypto/rand.Read never
// fails; it crashes the program if the system has no randomness.)
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
