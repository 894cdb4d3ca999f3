package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/node"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// The lease commands speak LeaseService (proto/quorate/v1/lease.proto): a
// policy with algorithm concurrency is a semaphore of `limit` slots per key,
// and each slot taken is a lease with a fencing token that strictly increases
// per key. Acquire, renew and release change state, so each is sent with a
// request ID (--request-id, or a random one) and retried with it like admit;
// check changes nothing and is retried like peek.

func newLeaseCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lease",
		Short: "Acquire, renew, release and check concurrency leases",
		Long: "A policy with algorithm concurrency limits how much work runs at once: it is a\n" +
			"semaphore of `limit` slots per key. Acquire takes a slot and answers a lease ID and\n" +
			"a fencing token that strictly increases per key (across leader changes and\n" +
			"restarts); renew extends the lease, release frees its slot, and check asks whether\n" +
			"a token still holds one. A lease not renewed ends after its ttl (the policy's\n" +
			"lease_ttl unless --ttl says otherwise), by the cluster's log time.\n\n" +
			"Hand the fencing token to the resource the work writes to: a resource that\n" +
			"remembers the highest token it has seen can refuse a holder whose lease expired\n" +
			"while it was still working. A stale token (expired or released) is refused with\n" +
			"failed_precondition.",
		// An unknown subcommand is an error, not help and exit 0: a script
		// must not go on as if a misspelt acquire had taken a slot.
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("lease: unknown command %q; want acquire, renew, release or check", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newLeaseAcquireCmd(), newLeaseRenewCmd(), newLeaseReleaseCmd(), newLeaseCheckCmd())
	return cmd
}

func newLeaseAcquireCmd() *cobra.Command {
	var (
		api     clientOptions
		req     quoratev1.AcquireLeaseRequest
		ttl     time.Duration
		maxWait time.Duration
		output  outputFormat
	)
	cmd := &cobra.Command{
		Use:   "acquire --policy P --key K [--ttl D] [--max-wait D] [--reserve-policy P --reserve-estimate N] [--caller C] [--request-id ID]",
		Short: "Take a slot of a concurrency policy: a lease with a fencing token",
		Long: "Acquire takes one of the key's slots under a concurrency policy and prints the\n" +
			"lease ID and fencing token to renew and release it with, and when it expires\n" +
			"unless renewed. When every slot is held the answer is \"denied\" with\n" +
			"retry_after, the time until the earliest lease expires: a result, not an\n" +
			"error; it exits 2. An RPC error prints its Connect code and message and\n" +
			"exits 1; an outcome still unknown at --timeout exits 3.\n\n" +
			"Retries are exactly-once, as for admit: every attempt carries the same request ID\n" +
			"(--request-id, or a random one), so an acquire that was applied before its\n" +
			"answer was lost gets the same lease (shown as \"duplicate\") instead of a second\n" +
			"slot. Acquire retries on unavailable, a server's deadline_exceeded and\n" +
			"connection failures, rotating through the --server list, until --timeout.\n\n" +
			"--max-wait waits up to that long for a slot when every slot is held, instead of\n" +
			"answering denied at once; waiters of a key are served first come, first served.\n" +
			"The command's deadline is then --max-wait plus --timeout's default (5s) unless\n" +
			"--timeout is given, which must be longer than --max-wait.\n\n" +
			"With --reserve-policy the lease also holds --reserve-estimate units of that rate or\n" +
			"quota policy on the same key (both or neither); the answer prints its\n" +
			"reservation_id, and `lease release --actual-cost N` charges the real cost.",
		Example: "  quorate lease acquire --policy reports-active --key tenant-a\n" +
			"  quorate lease acquire --policy reports-active --key tenant-a --reserve-policy tokens --reserve-estimate 800\n" +
			"  quorate lease acquire --policy reports-active --key tenant-a --ttl 5m --request-id report-42 -o json\n" +
			"  quorate lease acquire --policy reports-active --key tenant-a --max-wait 30s\n" +
			"  quorate lease acquire --server 127.0.0.1:7070,127.0.0.1:7071 --policy reports-active --key tenant-a",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "policy", "key"); err != nil {
				return err
			}
			if cmd.Flags().Changed("ttl") {
				if err := checkTTLFlag("lease acquire", ttl); err != nil {
					return err
				}
				req.Ttl = durationpb.New(ttl)
			}
			if cmd.Flags().Changed("max-wait") {
				if err := maxWaitDeadline(cmd, &api, maxWait); err != nil {
					return err
				}
				req.MaxWait = durationpb.New(maxWait)
			}
			if req.RequestId == "" {
				req.RequestId = client.NewRequestID()
			}
			return runCall(cmd, &api, output, dataCall{procedure: "AcquireLease", key: req.GetKey(), requestID: req.GetRequestId(),
				hint: "retry with the same request ID: " + leaseAcquireCommandLine(api.server, &req)},
				func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.AcquireLeaseResponse], error) {
					res, err := s.Lease.AcquireLease(ctx, connect.NewRequest(&req))
					if err == nil {
						reportDenied(cmd, !res.Msg.GetAllowed()) // the answer: later attempts are none
					}
					return res, err
				},
				textOr(output, func(resp *quoratev1.AcquireLeaseResponse, attempts int) string {
					return formatAcquire(resp, req.GetRequestId(), attempts)
				}))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Policy, "policy", "", "name of a policy with algorithm concurrency (required)")
	fs.StringVar(&req.Key, "key", "", "the limited identity, e.g. tenant:acme (required)")
	fs.DurationVar(&ttl, "ttl", 0, "how long the lease lives unless renewed, 1s..24h (unset: the policy's lease_ttl)")
	fs.DurationVar(&maxWait, "max-wait", 0, "when every slot is held, wait up to this long for one (0s..1m) instead of being\n"+
		"denied at once; the deadline grows by as much unless --timeout is given")
	fs.StringVar(&req.ReservePolicy, "reserve-policy", "", "also hold --reserve-estimate units of this rate or quota policy on the key,\n"+
		"for as long as the lease lives; lease release --actual-cost settles them")
	fs.Int64Var(&req.ReserveEstimate, "reserve-estimate", 0, "units to hold with --reserve-policy")
	addRequestIDFlags(cmd, &req.RequestId, &req.Caller)
	addServersFlags(cmd, &api)
	addOutputFlag(cmd, &output)
	return cmd
}

func newLeaseRenewCmd() *cobra.Command {
	var (
		api    clientOptions
		req    quoratev1.RenewLeaseRequest
		token  fencingTokenFlag
		ttl    time.Duration
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "renew --lease-id ID --fencing-token N [--ttl D] [--request-id ID]",
		Short: "Extend a live lease",
		Long: "Renew extends a live lease: it then ends --ttl from now (unset: the lease's own\n" +
			"ttl). A lease that expired or was released is not renewed: the answer is\n" +
			"failed_precondition, and the work it guarded should stop.\n\n" +
			"Renew is retried like admit, with the same request ID, on unavailable, a\n" +
			"server's deadline_exceeded and connection failures, rotating through the --server\n" +
			"list, until --timeout.",
		Example: "  quorate lease renew --lease-id TA5yZXBvcnRzLWFjdGl2ZQh0ZW5hbnQtYQE3P5EMXqJ3GNRguy4J9UOKwQ --fencing-token 7\n" +
			"  quorate lease renew --lease-id TA5yZXBvcnRzLWFjdGl2ZQh0ZW5hbnQtYQE3P5EMXqJ3GNRguy4J9UOKwQ --fencing-token 7 --ttl 10m -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "lease-id", "fencing-token"); err != nil {
				return err
			}
			req.FencingToken = token.v
			if cmd.Flags().Changed("ttl") {
				if err := checkTTLFlag("lease renew", ttl); err != nil {
					return err
				}
				req.Ttl = durationpb.New(ttl)
			}
			if req.RequestId == "" {
				req.RequestId = client.NewRequestID()
			}
			return runCall(cmd, &api, output, dataCall{procedure: "RenewLease", requestID: req.GetRequestId(),
				hint: "retry with the same request ID: " + leaseRenewCommandLine(api.server, &req)},
				func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.RenewLeaseResponse], error) {
					return s.Lease.RenewLease(ctx, connect.NewRequest(&req))
				},
				textOr(output, func(resp *quoratev1.RenewLeaseResponse, attempts int) string {
					return formatRenew(resp, req.GetRequestId(), attempts)
				}))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.LeaseId, "lease-id", "", "the lease ID printed by lease acquire (required)")
	fs.Var(&token, "fencing-token", "the lease's fencing token, printed by lease acquire (required)")
	fs.DurationVar(&ttl, "ttl", 0, "new time to live from now, 1s..24h (unset: the lease's own ttl)")
	addRequestIDFlags(cmd, &req.RequestId, &req.Caller)
	addServersFlags(cmd, &api)
	addOutputFlag(cmd, &output)
	return cmd
}

func newLeaseReleaseCmd() *cobra.Command {
	var (
		api        clientOptions
		req        quoratev1.ReleaseLeaseRequest
		token      fencingTokenFlag
		output     outputFormat
		actualCost int64
	)
	cmd := &cobra.Command{
		Use:   "release --lease-id ID --fencing-token N [--request-id ID]",
		Short: "Free a live lease's slot",
		Long: "Release frees the slot of a live lease, so that another acquire can take it. A\n" +
			"lease that expired or was released already is answered failed_precondition.\n\n" +
			"Release is retried like admit, with the same request ID, on unavailable, a\n" +
			"server's deadline_exceeded and connection failures, rotating through the --server\n" +
			"list, until --timeout: a retry of a release that was applied gets its recorded\n" +
			"answer (shown as \"duplicate\"), not failed_precondition.",
		Example: "  quorate lease release --lease-id TA5yZXBvcnRzLWFjdGl2ZQh0ZW5hbnQtYQE3P5EMXqJ3GNRguy4J9UOKwQ --fencing-token 7\n" +
			"  quorate lease release --lease-id TA5yZXBvcnRzLWFjdGl2ZQh0ZW5hbnQtYQE3P5EMXqJ3GNRguy4J9UOKwQ --fencing-token 7 --request-id done-42 -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "lease-id", "fencing-token"); err != nil {
				return err
			}
			req.FencingToken = token.v
			if cmd.Flags().Changed("actual-cost") {
				if actualCost < 0 {
					return fmt.Errorf("lease release: --actual-cost: must be at least 0 (got %d)", actualCost)
				}
				req.ActualCost = &actualCost
			}
			if req.RequestId == "" {
				req.RequestId = client.NewRequestID()
			}
			return runCall(cmd, &api, output, dataCall{procedure: "ReleaseLease", requestID: req.GetRequestId(),
				hint: "retry with the same request ID: " + leaseReleaseCommandLine(api.server, &req)},
				func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.ReleaseLeaseResponse], error) {
					return s.Lease.ReleaseLease(ctx, connect.NewRequest(&req))
				},
				textOr(output, func(resp *quoratev1.ReleaseLeaseResponse, attempts int) string {
					return formatRelease(resp, &req, attempts)
				}))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.LeaseId, "lease-id", "", "the lease ID printed by lease acquire (required)")
	fs.Var(&token, "fencing-token", "the lease's fencing token, printed by lease acquire (required)")
	fs.Int64Var(&actualCost, "actual-cost", 0, "for a lease acquired with --reserve-policy: the work's real cost, charged\n"+
		"as a commit charges it (unset: the whole estimate)")
	addRequestIDFlags(cmd, &req.RequestId, &req.Caller)
	addServersFlags(cmd, &api)
	addOutputFlag(cmd, &output)
	return cmd
}

func newLeaseCheckCmd() *cobra.Command {
	var (
		api    clientOptions
		req    quoratev1.CheckFenceRequest
		token  fencingTokenFlag
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "check --lease-id ID --fencing-token N [--caller C]",
		Short: "Say whether a lease still holds its slot",
		Long: "Check asks whether a lease still holds its slot of the key, and until when.\n" +
			"It is linearizable: it goes through the Raft log, so it sees every acquire,\n" +
			"renew, release and expiry before it. Both answers are results, not errors:\n" +
			"held=true exits 0, held=false exits 2 (as a denial), so a script can test it.\n" +
			"Only the lease's holder may ask: to any other caller, or with a lease ID that is\n" +
			"not the one acquire printed, a lease is not held.\n\n" +
			"Check changes nothing, so it is retried on unavailable, a server's\n" +
			"deadline_exceeded and connection failures, rotating through the --server list,\n" +
			"until --timeout.",
		Example: "  quorate lease check --lease-id TA5yZXBvcnRzLWFjdGl2ZQh0ZW5hbnQtYQE3P5EMXqJ3GNRguy4J9UOKwQ --fencing-token 7\n" +
			"  quorate lease check --lease-id TA5yZXBvcnRzLWFjdGl2ZQh0ZW5hbnQtYQE3P5EMXqJ3GNRguy4J9UOKwQ --fencing-token 7 -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "lease-id", "fencing-token"); err != nil {
				return err
			}
			req.FencingToken = token.v
			return runCall(cmd, &api, output, dataCall{procedure: "CheckFence", readOnly: true},
				func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.CheckFenceResponse], error) {
					res, err := s.Lease.CheckFence(ctx, connect.NewRequest(&req))
					if err == nil {
						reportDenied(cmd, !res.Msg.GetHeld()) // the answer: later attempts are none
					}
					return res, err
				},
				textOr(output, func(resp *quoratev1.CheckFenceResponse, attempts int) string {
					return formatCheckFence(resp, req.GetFencingToken(), attempts)
				}))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.LeaseId, "lease-id", "", "the lease ID printed by lease acquire (required)")
	fs.Var(&token, "fencing-token", "the lease's fencing token (required)")
	fs.StringVar(&req.Caller, "caller", "", "the caller that acquired the lease, on a cluster without an access file")
	addServersFlags(cmd, &api)
	addOutputFlag(cmd, &output)
	return cmd
}

// addRequestIDFlags registers --request-id and --caller of a lease command
// that changes state.
func addRequestIDFlags(cmd *cobra.Command, requestID, caller *string) {
	fs := cmd.Flags()
	fs.StringVar(requestID, "request-id", "", "identifies the request for exactly-once retries: a repeat with the same caller\n"+
		"and request ID gets the first answer and changes nothing; default a random 128-bit hex ID")
	fs.StringVar(caller, "caller", "", "namespace of the request ID, e.g. the calling service's name (up to 128 bytes); on a\n"+
		"cluster without an access file also who holds what it takes: renew, release, check and\n"+
		"commit must name the same caller")
}

// maxWaitDeadline checks lease acquire's --max-wait against the bound the
// server enforces (node.MaxWait) and gives the command the time to wait: a
// --timeout left at its default grows by maxWait; one given must be longer.
func maxWaitDeadline(cmd *cobra.Command, api *clientOptions, maxWait time.Duration) error {
	if maxWait < 0 || maxWait > node.MaxWait {
		return fmt.Errorf("lease acquire: --max-wait: must be between 0s and %v (got %v)", node.MaxWait, maxWait)
	}
	if !cmd.Flags().Changed("timeout") {
		api.timeout += maxWait
		return nil
	}
	if api.timeout <= maxWait {
		return fmt.Errorf("lease acquire: --timeout %v must be longer than --max-wait %v: the command would give up "+
			"while the cluster may still give it a slot", api.timeout, maxWait)
	}
	return nil
}

// checkTTLFlag checks --ttl against the bounds the server enforces
// (admission.CheckLeaseTTL), naming the command and the flag.
func checkTTLFlag(command string, ttl time.Duration) error {
	if fe := admission.CheckLeaseTTL("--ttl", ttl); fe != nil {
		return fmt.Errorf("%s: %s: %s", command, fe.Field, fe.Reason)
	}
	return nil
}

// fencingTokenFlag is the value of --fencing-token: a fencing token, at least 1.
// It implements pflag.Value, so a bad value is refused while parsing flags,
// naming --fencing-token; its String is "" until set, so that requireFlags
// reports it missing. (--token is never a fencing token: on every command,
// the bearer token is --token-file's.)
type fencingTokenFlag struct {
	v   int64
	set bool
}

func (f *fencingTokenFlag) Type() string { return "N" }

func (f *fencingTokenFlag) String() string {
	if !f.set {
		return ""
	}
	return strconv.FormatInt(f.v, 10)
}

func (f *fencingTokenFlag) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("want the fencing token printed by lease acquire, an integer (got %q)", s)
	}
	if v < 1 {
		return fmt.Errorf("must be at least 1: fencing tokens start at 1 (got %d)", v)
	}
	f.v, f.set = v, true
	return nil
}

// leaseAcquireCommandLine, leaseRenewCommandLine and leaseReleaseCommandLine
// are the commands that repeat a request with its request ID, for an error
// whose outcome is unknown.
func leaseAcquireCommandLine(servers string, req *quoratev1.AcquireLeaseRequest) string {
	args := []string{"quorate", "lease", "acquire", "--server", servers, "--policy", req.GetPolicy(), "--key", req.GetKey()}
	if req.GetTtl() != nil {
		args = append(args, "--ttl", req.GetTtl().AsDuration().String())
	}
	if req.GetMaxWait() != nil {
		args = append(args, "--max-wait", req.GetMaxWait().AsDuration().String())
	}
	if req.GetReservePolicy() != "" {
		args = append(args, "--reserve-policy", req.GetReservePolicy(), "--reserve-estimate", strconv.FormatInt(req.GetReserveEstimate(), 10))
	}
	return commandLine(appendRequestID(args, req.GetCaller(), req.GetRequestId()))
}

func leaseRenewCommandLine(servers string, req *quoratev1.RenewLeaseRequest) string {
	args := []string{"quorate", "lease", "renew", "--server", servers, "--lease-id", req.GetLeaseId(),
		"--fencing-token", strconv.FormatInt(req.GetFencingToken(), 10)}
	if req.GetTtl() != nil {
		args = append(args, "--ttl", req.GetTtl().AsDuration().String())
	}
	return commandLine(appendRequestID(args, req.GetCaller(), req.GetRequestId()))
}

func leaseReleaseCommandLine(servers string, req *quoratev1.ReleaseLeaseRequest) string {
	args := []string{"quorate", "lease", "release", "--server", servers, "--lease-id", req.GetLeaseId(),
		"--fencing-token", strconv.FormatInt(req.GetFencingToken(), 10)}
	if req.ActualCost != nil {
		args = append(args, "--actual-cost", strconv.FormatInt(req.GetActualCost(), 10))
	}
	return commandLine(appendRequestID(args, req.GetCaller(), req.GetRequestId()))
}

func appendRequestID(args []string, caller, requestID string) []string {
	if caller != "" {
		args = append(args, "--caller", caller)
	}
	return append(args, "--request-id", requestID)
}

// verdict pads word (and " (duplicate)") so that the fields after it line up
// across answers: width is the longest word of the command.
func verdict(word string, width int, duplicate bool) string {
	if duplicate {
		return fmt.Sprintf("%-*s", width+len(" (duplicate)"), word+" (duplicate)")
	}
	return fmt.Sprintf("%-*s", width, word)
}

// withAttempts adds attempts=N to a line when the answer took more than one
// attempt.
func withAttempts(s string, attempts int) string {
	if attempts > 1 {
		s += "  attempts=" + strconv.Itoa(attempts)
	}
	return s
}

// formatAcquire is the one-line text form of an acquire, e.g.
//
//	allowed  lease_id=cmVw…  fencing_token=7  expires_at=2026-01-02T03:06:05Z  held=1/2  policy_version=1  decided_at=…  request_id=…
//	allowed  lease_id=cmVw…  fencing_token=8  expires_at=…  held=2/2  reservation_id=dG9r…  policy_version=1  …
//	denied   held=2/2  retry_after=1m52.5s  policy_version=1  decided_at=…  request_id=…
//
// A recorded answer to an earlier request with the same request ID reads
// "allowed (duplicate)": the same lease, no second slot.
func formatAcquire(r *quoratev1.AcquireLeaseResponse, requestID string, attempts int) string {
	var s string
	if r.GetAllowed() {
		s = fmt.Sprintf("%s  lease_id=%s  fencing_token=%d  expires_at=%s  held=%d/%d",
			verdict("allowed", len("allowed"), r.GetDuplicate()), r.GetLeaseId(), r.GetFencingToken(),
			fmtTimestamp(r.GetExpiresAt()), r.GetHeld(), r.GetLimit())
		if id := r.GetReservationId(); id != "" {
			s += "  reservation_id=" + id
		}
	} else {
		s = fmt.Sprintf("%s  held=%d/%d  retry_after=%s",
			verdict("denied", len("allowed"), r.GetDuplicate()), r.GetHeld(), r.GetLimit(), fmtDuration(r.GetRetryAfter()))
	}
	s += fmt.Sprintf("  policy_version=%d  decided_at=%s  request_id=%s", r.GetPolicyVersion(), fmtTimestamp(r.GetDecidedAt()), requestID)
	return withAttempts(s, attempts)
}

// formatRenew is the one-line text form of a renew, e.g.
//
//	renewed  lease_id=cmVw…  fencing_token=7  expires_at=…  decided_at=…  request_id=…
func formatRenew(r *quoratev1.RenewLeaseResponse, requestID string, attempts int) string {
	s := fmt.Sprintf("%s  lease_id=%s  fencing_token=%d  expires_at=%s  decided_at=%s  request_id=%s",
		verdict("renewed", len("renewed"), r.GetDuplicate()), r.GetLeaseId(), r.GetFencingToken(),
		fmtTimestamp(r.GetExpiresAt()), fmtTimestamp(r.GetDecidedAt()), requestID)
	return withAttempts(s, attempts)
}

// formatRelease is the one-line text form of a release, e.g.
//
//	released  lease_id=cmVw…  fencing_token=7  decided_at=…  request_id=…
//
// A repeat of a release that applied reads "released (duplicate)"; when this
// command made more than one attempt, an earlier attempt may be the one that
// released, and attempts=N says so.
func formatRelease(r *quoratev1.ReleaseLeaseResponse, req *quoratev1.ReleaseLeaseRequest, attempts int) string {
	s := fmt.Sprintf("%s  lease_id=%s  fencing_token=%d  decided_at=%s  request_id=%s",
		verdict("released", len("released"), r.GetDuplicate()), req.GetLeaseId(), req.GetFencingToken(),
		fmtTimestamp(r.GetDecidedAt()), req.GetRequestId())
	if r.GetCharged() != 0 || r.GetReleasedUnits() != 0 || r.GetOver() != 0 {
		s += fmt.Sprintf("  charged=%d  released_units=%d  over=%d", r.GetCharged(), r.GetReleasedUnits(), r.GetOver())
	}
	s = withAttempts(s, attempts)
	if attempts > 1 && r.GetDuplicate() {
		s += " (an earlier attempt of this command may have released it)"
	}
	return s
}

// formatCheckFence is the one-line text form of a check, e.g.
//
//	held=true   fencing_token=7  expires_at=2026-01-02T03:06:05Z  decided_at=…
//	held=false  fencing_token=7  expires_at=-  decided_at=…
func formatCheckFence(r *quoratev1.CheckFenceResponse, token int64, attempts int) string {
	held := fmt.Sprintf("%-*s", len("held=false"), "held="+strconv.FormatBool(r.GetHeld()))
	s := fmt.Sprintf("%s  fencing_token=%d  expires_at=%s  decided_at=%s",
		held, token, fmtTimestamp(r.GetExpiresAt()), fmtTimestamp(r.GetDecidedAt()))
	return withAttempts(s, attempts)
}
