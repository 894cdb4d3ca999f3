package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/node"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func newAdmitCmd() *cobra.Command {
	var (
		api       clientOptions
		req       quoratev1.AdmitRequest
		cost      int64
		also      checksFlag
		maxWait   time.Duration
		output    outputFormat
		requestID string
	)
	cmd := &cobra.Command{
		Use:   "admit --policy P --key K [--cost N] [--also P[@N]:K]... [--max-wait D]",
		Short: "Ask for one admission decision",
		Long: "Admit asks the cluster whether one request under a policy and key may proceed,\n" +
			"and spends its cost when it may. Any node answers; the decision is strict across\n" +
			"the cluster. A denial is a result, not an error: it prints \"denied\" (or the\n" +
			"-o json/yaml answer) and exits 2. An RPC error prints its Connect code and\n" +
			"message and exits 1; an outcome still unknown at --timeout exits 3.\n\n" +
			"Retries are exactly-once: every attempt carries the same request ID (--request-id,\n" +
			"or a random one) and payload, so a request that was applied before its answer was\n" +
			"lost gets the recorded answer (shown as \"duplicate\") and spends nothing again.\n" +
			"Admit retries on unavailable, a server's deadline_exceeded and connection\n" +
			"failures, rotating through the --server list, until --timeout (-v reports each\n" +
			"retried attempt). If the deadline passes while the outcome is unknown, the error\n" +
			"prints the command to retry with.\n\n" +
			"--also adds checks decided atomically with the first: either every check is\n" +
			"admitted and charged, or none is charged and the answer says which check denied.\n" +
			"All keys of one request must share a hash tag, the part in {...}, e.g.\n" +
			"{tenant:acme}:api and {tenant:acme}:ip:1.2.3.4. The value is policy[@cost]:key:\n" +
			"the key is everything after the first ':' (api@3:{t}:user:42 costs 3 on key\n" +
			"{t}:user:42). The text output has one line per check.\n\n" +
			"--max-wait paces instead of denying (token_bucket only): a request that would\n" +
			"conform within the wait is admitted at its earliest slot, which is reserved, and\n" +
			"the answer's wait=... says how long to wait before proceeding. Admit itself does\n" +
			"not wait.",
		Example: "  quorate admit --policy api-free --key tenant-a\n" +
			"  quorate admit --server 127.0.0.1:7071 --policy api-free --key tenant-a --cost 5 -o json\n" +
			"  quorate admit --server 127.0.0.1:7070,127.0.0.1:7071,127.0.0.1:7072 --caller billing \\\n" +
			"      --request-id invoice-42 --policy api-paid --key tenant-a\n" +
			"  quorate admit --policy api-free --key '{tenant:acme}:api' --also 'login-failures:{tenant:acme}:ip:1.2.3.4'\n" +
			"  quorate admit --policy provider-webhooks --key acme --max-wait 2s",
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
			req.Also = also.checks
			if cmd.Flags().Changed("max-wait") {
				if maxWait < 0 || maxWait > node.MaxWait {
					return fmt.Errorf("admit: --max-wait: must be between 0s and %v (got %v)", node.MaxWait, maxWait)
				}
				req.MaxWait = durationpb.New(maxWait)
			}
			req.RequestId = requestID
			if req.RequestId == "" {
				req.RequestId = client.NewRequestID()
			}
			// Decided through the key's log on whichever node answers: a
			// retry rotates through --server with the same request ID,
			// which a node's budget lease would not know (AdmitRequest.strict).
			req.Strict = true
			resp, attempts, err := invoke(cmd, &api, dataCall{procedure: "Admit", key: req.GetKey(), requestID: req.GetRequestId(),
				hint: "retry with the same request ID: " + admitCommandLine(api.server, &req)},
				func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.AdmitResponse], error) {
					return s.Admission.Admit(ctx, connect.NewRequest(&req))
				})
			if err != nil {
				return err
			}
			reportDenied(cmd, !resp.GetAllowed())
			if output.structured() {
				return output.writeWithRequestID(cmd.OutOrStdout(), resp, req.GetRequestId())
			}
			return writeDecision(cmd.OutOrStdout(), resp, req.GetRequestId(), attempts)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Policy, "policy", "", "policy name (required)")
	fs.StringVar(&req.Key, "key", "", "the limited identity, e.g. tenant:acme (required)")
	fs.Int64Var(&cost, "cost", 0, "units this request spends, 1..max_cost of the policy (unset: 1)")
	fs.Var(&also, "also", "another check decided atomically with the first, as policy[@cost]:key; repeatable\n"+
		"(up to 8 checks in all). Every key must share the first key's hash tag, e.g. {tenant:acme}:api")
	fs.DurationVar(&maxWait, "max-wait", 0, "pacing (token_bucket only): admit at the earliest slot within this wait instead\n"+
		"of denying; the answer's wait says how long to wait before proceeding (0s..1m)")
	fs.StringVar(&requestID, "request-id", "", "identifies the request for exactly-once retries: a repeat with the same caller\n"+
		"and request ID gets the first answer and spends nothing; default a random 128-bit hex ID")
	fs.StringVar(&req.Caller, "caller", "", "namespace of the request ID (up to 128 bytes): on a node with an access file, the\n"+
		"authenticated caller's own (the default; naming another is refused); on an open node,\n"+
		"as given, e.g. the calling service's name")
	addServersFlags(cmd, &api)
	addOutputFlag(cmd, &output)
	return cmd
}

// admitCommandLine is the command that repeats req with its request ID, for
// an error whose outcome is unknown.
func admitCommandLine(servers string, req *quoratev1.AdmitRequest) string {
	args := []string{"quorate", "admit", "--server", servers, "--policy", req.GetPolicy(), "--key", req.GetKey()}
	if req.Cost != nil {
		args = append(args, "--cost", strconv.FormatInt(req.GetCost(), 10))
	}
	for _, c := range req.GetAlso() {
		args = append(args, "--also", formatCheck(c))
	}
	if req.GetMaxWait() != nil {
		args = append(args, "--max-wait", req.GetMaxWait().AsDuration().String())
	}
	if req.GetCaller() != "" {
		args = append(args, "--caller", req.GetCaller())
	}
	args = append(args, "--request-id", req.GetRequestId())
	return commandLine(args)
}

// commandLine quotes args for a POSIX shell and joins them.
func commandLine(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	return strings.Join(quoted, " ")
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
// the answer took more than one attempt. wait=D (pacing: proceed only after
// D) and shadow_denied (a shadow policy would have denied) are shown when
// set.
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
	decidedAt := fmtTimestamp(d.GetDecidedAt())
	var extra strings.Builder
	if d.GetWait().AsDuration() > 0 {
		extra.WriteString("  wait=" + fmtDuration(d.GetWait()))
	}
	if d.GetShadowDenied() {
		extra.WriteString("  shadow_denied")
	}
	s := fmt.Sprintf("%-*s  remaining=%d/%d  reset_after=%s  retry_after=%s%s  policy_version=%d  decided_at=%s  request_id=%s",
		width, verdict, d.GetRemaining(), d.GetLimit(), fmtDuration(d.GetResetAfter()), fmtDuration(d.GetRetryAfter()),
		extra.String(), d.GetPolicyVersion(), decidedAt, requestID)
	if attempts > 1 {
		s += "  attempts=" + strconv.Itoa(attempts)
	}
	return s
}

// writeDecision writes the text form of an Admit answer: the formatDecision
// line and, for a multi-check request, one line per check and which check
// denied.
func writeDecision(w io.Writer, d *quoratev1.AdmitResponse, requestID string, attempts int) error {
	var b strings.Builder
	b.WriteString(formatDecision(d, requestID, attempts) + "\n")
	if checks := d.GetChecks(); len(checks) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for i, c := range checks {
			verdict := "allowed"
			if !c.GetAllowed() {
				verdict = "denied"
			}
			line := fmt.Sprintf("  checks[%d]\t%s\t%s\t%s\tremaining=%d/%d\tretry_after=%s\tpolicy_version=%d",
				i, verdict, c.GetPolicy(), displayKey(c.GetKey()), c.GetRemaining(), c.GetLimit(),
				fmtDuration(c.GetRetryAfter()), c.GetPolicyVersion())
			if c.GetShadowDenied() {
				line += "\tshadow_denied"
			}
			fmt.Fprintln(tw, line)
		}
		_ = tw.Flush() // writes to a strings.Builder
		if d.DeniedCheck != nil {
			i := int(d.GetDeniedCheck())
			if i >= 0 && i < len(checks) {
				fmt.Fprintf(&b, "denied by checks[%d]: policy %s, key %s; no check was charged\n",
					i, checks[i].GetPolicy(), displayKey(checks[i].GetKey()))
			} else {
				fmt.Fprintf(&b, "denied by checks[%d]; no check was charged\n", i)
			}
		} else if d.GetAllowed() {
			fmt.Fprintf(&b, "all %d checks allowed and charged\n", len(checks))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// displayKey prints a key as it is, or Go-quoted when it has spaces or
// characters that would garble a line.
func displayKey(k string) string {
	if k == "" || strings.IndexFunc(k, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(k)
	}
	return k
}

// checksFlag is the value of the repeatable --also flag: the extra checks of
// a multi-check Admit, in order. It implements pflag.Value, so a bad value
// is refused while parsing flags, naming --also.
type checksFlag struct {
	checks []*quoratev1.Check
}

func (f *checksFlag) Type() string { return "policy[@cost]:key" }

func (f *checksFlag) String() string {
	s := make([]string, len(f.checks))
	for i, c := range f.checks {
		s[i] = formatCheck(c)
	}
	return strings.Join(s, " ")
}

func (f *checksFlag) Set(v string) error {
	c, err := parseCheck(v)
	if err != nil {
		return err
	}
	f.checks = append(f.checks, c)
	return nil
}

// parseCheck parses policy[@cost]:key. Policy names hold neither '@' nor
// ':', so the policy (and its optional cost) ends at the first ':' and the
// key is everything after it, colons included: {t}:user:42 is a key.
func parseCheck(v string) (*quoratev1.Check, error) {
	head, key, ok := strings.Cut(v, ":")
	if !ok || key == "" {
		return nil, errors.New("missing key: want policy[@cost]:key")
	}
	policy, costText, hasCost := strings.Cut(head, "@")
	if policy == "" {
		return nil, errors.New("missing policy: want policy[@cost]:key")
	}
	c := &quoratev1.Check{Policy: policy, Key: key}
	if hasCost {
		cost, err := strconv.ParseInt(costText, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad cost %q: want an integer, as in policy@3:key", costText)
		}
		if cost < 1 {
			return nil, fmt.Errorf("bad cost %d: must be at least 1", cost)
		}
		c.Cost = &cost
	}
	return c, nil
}

// formatCheck is the --also value that parseCheck reads back as c.
func formatCheck(c *quoratev1.Check) string {
	if c.Cost != nil {
		return c.GetPolicy() + "@" + strconv.FormatInt(c.GetCost(), 10) + ":" + c.GetKey()
	}
	return c.GetPolicy() + ":" + c.GetKey()
}
