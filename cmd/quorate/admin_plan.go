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

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
	"github.com/quorate/quorate/shard"
)

// planPollInterval is how often plan watch and --wait ask for the plans.
const planPollInterval = 500 * time.Millisecond

// Plan states, as PlanStatus.state has them.
const (
	planRunning    = "running"
	planDone       = "done"
	planCancelling = "cancelling"
	planCancelled  = "cancelled"
	planFailed     = "failed"
)

func newAdminSlotsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "slots",
		Short: "Move hash slots, with their state, between data groups",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newAdminSlotsMoveCmd())
	return cmd
}

func newAdminSlotsMoveCmd() *cobra.Command {
	var (
		client    clientOptions
		output    outputFormat
		from, to  uint32
		count     uint32
		slotRange string
		wait      bool
	)
	cmd := &cobra.Command{
		Use:   "move --from G --to G (--count N | --range A-B) [--wait]",
		Short: "Move slots from one data group to another",
		Long: "Move starts a plan that moves slots, with their state (buckets, windows, leases,\n" +
			"reservations, request IDs), from group --from to group --to: --count N moves the\n" +
			"last N slots --from owns; --range A-B moves slots A to B-1, the half-open range\n" +
			"[A,B) (0-4096 is every slot). Requests for moving slots are retried by the nodes\n" +
			"meanwhile. The plan goes on without this command; with --wait it reports its\n" +
			"progress like `plan watch` until it ends or --timeout (10m by default) passes.",
		Example: "  quorate admin slots move --from 1 --to 3 --count 512 --wait\n" +
			"  quorate admin slots move --from 1 --to 3 --range 0-512   # slots 0 to 511",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := moveSlotsRequest(cmd, from, to, count, slotRange)
			if err != nil {
				return err
			}
			if err := checkWaitOutput(wait, output); err != nil {
				return err
			}
			applyWaitTimeout(cmd, &client, wait)
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			ac := client.adminClient(base)
			resp, err := ac.MoveSlots(ctx, connect.NewRequest(req))
			if err != nil {
				return wrapRPC("MoveSlots", base, "", err)
			}
			return reportPlan(ctx, cmd, ac, base, client.timeout, output, wait, resp.Msg)
		},
	}
	fs := cmd.Flags()
	fs.Uint32Var(&from, "from", 0, "data group that owns the slots now (see quorate admin status)")
	fs.Uint32Var(&to, "to", 0, "data group to own them instead")
	fs.Uint32Var(&count, "count", 0, "move the last N slots --from owns")
	fs.StringVar(&slotRange, "range", "", "move slots A to B-1: the half-open range [A,B), B at most 4096")
	fs.BoolVar(&wait, "wait", false, "report the plan's progress until it ends (within --timeout)")
	addClientFlags(cmd, &client)
	cmd.Flags().Lookup("timeout").Usage = timeoutUsageWithWait
	addOutputFlag(cmd, &output)
	return cmd
}

// moveSlotsRequest checks slots move's flags (set or not, as cmd parsed
// them) and builds its request.
func moveSlotsRequest(cmd *cobra.Command, from, to, count uint32, slotRange string) (*quoratev1.MoveSlotsRequest, error) {
	if err := requireChanged(cmd, "from", "to"); err != nil {
		return nil, err
	}
	if err := checkDataGroup("--from", from); err != nil {
		return nil, err
	}
	if err := checkDataGroup("--to", to); err != nil {
		return nil, err
	}
	if from == to {
		return nil, fmt.Errorf("--from and --to are both group %d; a move needs two groups", from)
	}
	fs := cmd.Flags()
	req := &quoratev1.MoveSlotsRequest{From: from, To: to}
	switch withCount, withRange := fs.Changed("count"), fs.Changed("range"); {
	case withCount && withRange:
		return nil, errors.New("--count and --range: give one of them, not both")
	case withCount:
		if count == 0 || count > shard.SlotCount {
			return nil, fmt.Errorf("--count: %d is not between 1 and %d (the number of slots)", count, shard.SlotCount)
		}
		req.Count = count
	case withRange:
		start, end, err := parseSlotRange(slotRange)
		if err != nil {
			return nil, fmt.Errorf("--range: %w", err)
		}
		req.Start, req.End = start, end
	default:
		return nil, fmt.Errorf("%s: --count or --range is required", cmd.Name())
	}
	return req, nil
}

// parseSlotRange parses "A-B", the half-open slot range [A,B): A < B <=
// shard.SlotCount.
func parseSlotRange(s string) (start, end uint32, _ error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not A-B (slots A to B-1, e.g. 0-512)", s)
	}
	parse := func(what, v string) (uint32, error) {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%q: %s %q is not a slot number", s, what, v)
		}
		return uint32(n), nil
	}
	start, err := parse("start", a)
	if err != nil {
		return 0, 0, err
	}
	if end, err = parse("end", b); err != nil {
		return 0, 0, err
	}
	if end > shard.SlotCount {
		return 0, 0, fmt.Errorf("%q: end %d is past the last slot (slots are 0 to %d; the end is excluded, so at most %d)",
			s, end, shard.SlotCount-1, shard.SlotCount)
	}
	if start >= end {
		return 0, 0, fmt.Errorf("%q is empty: the range is [A,B), B excluded, so A must be below B", s)
	}
	return start, end, nil
}

// checkDataGroup refuses the meta group's ID for a flag naming a data group.
func checkDataGroup(flag string, id uint32) error {
	if id == uint32(shard.MetaGroup) {
		return fmt.Errorf("%s: group %d is the meta group, which owns no slots; data groups are numbered from 1", flag, id)
	}
	return nil
}

// requireChanged fails, naming every one of the flags that was not given:
// requireFlags for flags whose zero value is not empty.
func requireChanged(cmd *cobra.Command, names ...string) error {
	var missing []string
	for _, name := range names {
		if !cmd.Flags().Changed(name) {
			missing = append(missing, "--"+name)
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: %s is required", cmd.Name(), missing[0])
	default:
		return fmt.Errorf("%s: %s are required", cmd.Name(), strings.Join(missing, " and "))
	}
}

// checkWaitOutput refuses --wait with -o json: the progress is text.
func checkWaitOutput(wait bool, output outputFormat) error {
	if wait && output.structured() {
		return errors.New("--wait reports progress as text; it does not go with --output json or yaml (follow the plan with: quorate admin plan list -o json)")
	}
	return nil
}

func newAdminGroupCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group",
		Short: "Add data groups or split one",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newAdminGroupAddCmd(), newAdminGroupSplitCmd())
	return cmd
}

func newAdminGroupAddCmd() *cobra.Command {
	var (
		client   clientOptions
		output   outputFormat
		replicas []string
		wait     bool
	)
	cmd := &cobra.Command{
		Use:   "add [--replicas n1,n2,n3] [--wait]",
		Short: "Add an empty data group",
		Long: "Add starts a plan adding a data group that owns no slots yet (move some to it\n" +
			"with `slots move`). Its replicas go to the nodes of --replicas, the first being\n" +
			"the preferred leader, or without it to the nodes holding the fewest replicas.\n" +
			"With --wait it reports the plan's progress like `plan watch` until it ends or\n" +
			"--timeout (10m by default) passes.",
		Example: "  quorate admin group add --wait\n" +
			"  quorate admin group add --replicas node2,node4,node5",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkReplicas(replicas); err != nil {
				return err
			}
			if err := checkWaitOutput(wait, output); err != nil {
				return err
			}
			applyWaitTimeout(cmd, &client, wait)
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			ac := client.adminClient(base)
			resp, err := ac.AddGroup(ctx, connect.NewRequest(&quoratev1.AddGroupRequest{Replicas: replicas}))
			if err != nil {
				return wrapRPC("AddGroup", base, "", err)
			}
			return reportPlan(ctx, cmd, ac, base, client.timeout, output, wait, resp.Msg)
		},
	}
	cmd.Flags().StringSliceVar(&replicas, "replicas", nil, "node IDs for the group's replicas, comma-separated (default: the nodes holding the fewest)")
	cmd.Flags().BoolVar(&wait, "wait", false, "report the plan's progress until it ends (within --timeout)")
	addClientFlags(cmd, &client)
	cmd.Flags().Lookup("timeout").Usage = timeoutUsageWithWait
	addOutputFlag(cmd, &output)
	return cmd
}

// checkReplicas refuses empty and repeated node IDs in --replicas.
func checkReplicas(ids []string) error {
	seen := map[string]bool{}
	for i, id := range ids {
		if strings.TrimSpace(id) == "" {
			return fmt.Errorf("--replicas: entry %d is empty", i+1)
		}
		if seen[id] {
			return fmt.Errorf("--replicas: %s is listed twice", id)
		}
		seen[id] = true
	}
	return nil
}

func newAdminGroupSplitCmd() *cobra.Command {
	var (
		client clientOptions
		output outputFormat
		wait   bool
	)
	cmd := &cobra.Command{
		Use:   "split ID [--wait]",
		Short: "Add a data group and move the upper half of a group's slots to it",
		Long: "Split starts a plan of two steps: add a data group (as `group add` does), then\n" +
			"move the upper half of group ID's slots to it (as `slots move` does). With --wait\n" +
			"it reports the plan's progress like `plan watch` until it ends or --timeout (10m by\n" +
			"default) passes.",
		Example: "  quorate admin group split 2 --wait",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group, err := parseGroupArg(args[0])
			if err != nil {
				return err
			}
			if err := checkWaitOutput(wait, output); err != nil {
				return err
			}
			applyWaitTimeout(cmd, &client, wait)
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			ac := client.adminClient(base)
			resp, err := ac.SplitGroup(ctx, connect.NewRequest(&quoratev1.SplitGroupRequest{Group: group}))
			if err != nil {
				return wrapRPC("SplitGroup", base, "", err)
			}
			return reportPlan(ctx, cmd, ac, base, client.timeout, output, wait, resp.Msg)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "report the plan's progress until it ends (within --timeout)")
	addClientFlags(cmd, &client)
	cmd.Flags().Lookup("timeout").Usage = timeoutUsageWithWait
	addOutputFlag(cmd, &output)
	return cmd
}

// parseGroupArg parses a data group ID given as the argument ID.
func parseGroupArg(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("ID: %q is not a data group ID (see quorate admin status)", s)
	}
	if err := checkDataGroup("ID", uint32(n)); err != nil {
		return 0, err
	}
	return uint32(n), nil
}

// parsePlanArg parses a plan ID given as the argument ID.
func parsePlanArg(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ID: %q is not a plan ID (see quorate admin plan list)", s)
	}
	return n, nil
}

// reportPlan prints the plan a command started and, with wait, follows it
// as plan watch does until ctx's deadline (--timeout, which is budget).
func reportPlan(ctx context.Context, cmd *cobra.Command, ac quoratev1connect.AdminServiceClient, base string, budget time.Duration,
	output outputFormat, wait bool, resp *quoratev1.PlanResponse) error {
	out := cmd.OutOrStdout()
	if output.structured() {
		return output.write(out, resp)
	}
	p := resp.GetPlan()
	fmt.Fprintf(out, "plan %d started: %s\n", p.GetId(), dash(p.GetSummary()))
	if !wait {
		fmt.Fprintf(out, "follow it with: quorate admin plan watch %d\n", p.GetId())
		return nil
	}
	return watchPlan(ctx, ac, base, out, cmd.ErrOrStderr(), &planWatcher{id: p.GetId(), chosen: true}, waitRequestTimeout, budget)
}

func newAdminPlanCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "List, follow or cancel the plans that move slots and add groups",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newAdminPlanListCmd(), newAdminPlanWatchCmd(), newAdminPlanCancelCmd())
	return cmd
}

func newAdminPlanListCmd() *cobra.Command {
	var (
		client clientOptions
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the running plan and the last finished ones, with their progress",
		Long: "List shows the plans the meta group keeps, oldest first: the running one and the\n" +
			"last finished ones. STEPS counts the steps done; under a running plan a line\n" +
			"shows its current step: phase, attempt, and the records, bytes and chunks copied.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.adminClient(base).ListPlans(ctx, connect.NewRequest(&quoratev1.ListPlansRequest{}))
			if err != nil {
				return wrapRPC("ListPlans", base, "", err)
			}
			if output.structured() {
				return output.write(cmd.OutOrStdout(), resp.Msg)
			}
			if len(resp.Msg.GetPlans()) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no plans; start one with: quorate admin slots move, group add or group split")
				return nil
			}
			return writePlans(cmd.OutOrStdout(), resp.Msg.GetPlans())
		},
	}
	addClientFlags(cmd, &client)
	addOutputFlag(cmd, &output)
	return cmd
}

func newAdminPlanWatchCmd() *cobra.Command {
	var client clientOptions
	cmd := &cobra.Command{
		Use:   "watch [ID]",
		Short: "Follow a plan until it ends",
		Long: "Watch asks for the plans every 500ms and prints a line each time plan ID's\n" +
			"progress changes (without ID: the newest plan). It exits with status 0 once the\n" +
			"plan is done, and 1 with the plan's error when it failed or was cancelled.\n" +
			"--timeout bounds each request; a node that does not answer is asked again.",
		Example: "  quorate admin plan watch\n  quorate admin plan watch 7",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w := &planWatcher{}
			if len(args) == 1 {
				id, err := parsePlanArg(args[0])
				if err != nil {
					return err
				}
				w.id, w.chosen = id, true
			}
			base, _, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			cancel() // each request gets its own --timeout
			return watchPlan(cmd.Context(), client.adminClient(base), base, cmd.OutOrStdout(), cmd.ErrOrStderr(), w, client.timeout, 0)
		},
	}
	addClientFlags(cmd, &client)
	cmd.Flags().Lookup("timeout").Usage = "deadline of each request for the plans"
	return cmd
}

func newAdminPlanCancelCmd() *cobra.Command {
	var (
		client clientOptions
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Roll the running plan back",
		Long: "Cancel rolls plan ID back: a slot move not yet flipped in the shard map is undone\n" +
			"(the source group admits its slots again, the target drops its copy). A step that\n" +
			"already changed the map is refused (failed_precondition): it completes. The plan\n" +
			"is cancelling until the rollback is done; plan watch follows it.",
		Example: "  quorate admin plan cancel 7",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parsePlanArg(args[0])
			if err != nil {
				return err
			}
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.adminClient(base).CancelPlan(ctx, connect.NewRequest(&quoratev1.CancelPlanRequest{Id: id}))
			if err != nil {
				return wrapRPC("CancelPlan", base, "", err)
			}
			if output.structured() {
				return output.write(cmd.OutOrStdout(), resp.Msg)
			}
			fmt.Fprintln(cmd.OutOrStdout(), planProgress(resp.Msg.GetPlan()))
			return nil
		},
	}
	addClientFlags(cmd, &client)
	addOutputFlag(cmd, &output)
	return cmd
}

// writePlans prints plans as a table, one row each; under a running or
// cancelling plan a line shows its current step's progress, under a failed
// one its error.
func writePlans(w io.Writer, plans []*quoratev1.PlanStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tSTATE\tSTEPS\tAGE\tSUMMARY")
	for _, p := range plans {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\t%s\n", p.GetId(), dash(p.GetKind()), dash(p.GetState()),
			p.GetStepsDone(), len(p.GetSteps()), fmtAge(p.GetAge().AsDuration(), p.GetAge() != nil), dash(p.GetSummary()))
		// Under SUMMARY, so that the rows stay one tabwriter block.
		switch i, st := currentStep(p); {
		case (p.GetState() == planRunning || p.GetState() == planCancelling) && st != nil:
			fmt.Fprintf(tw, "\t\t\t\t\t  step %d/%d %s\n", i+1, len(p.GetSteps()), stepProgress(st))
		case p.GetError() != "":
			fmt.Fprintf(tw, "\t\t\t\t\t  error: %s\n", p.GetError())
		}
	}
	return tw.Flush()
}

// writeRunningPlans prints the running and cancelling plans among plans
// after a summary line, as writePlans does; nothing when there are none.
func writeRunningPlans(w io.Writer, plans []*quoratev1.PlanStatus) error {
	var running []*quoratev1.PlanStatus
	for _, p := range plans {
		if p.GetState() == planRunning || p.GetState() == planCancelling {
			running = append(running, p)
		}
	}
	if len(running) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\n%d running %s\n", len(running), plural(len(running), "plan", "plans"))
	return writePlans(w, running)
}

// fmtAge formats an age to the second, at most two units: 45s, 3m07s,
// 2h05m, 3d04h; "-" when unset.
func fmtAge(d time.Duration, set bool) string {
	if !set {
		return "-"
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// fmtBytes formats a byte count in binary units with one decimal: 512 B,
// 1.5 KiB, 12.0 MiB.
func fmtBytes(n uint64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	for i, u := range units {
		v /= 1024
		if v < 1023.95 || i == len(units)-1 {
			return fmt.Sprintf("%.1f %s", v, u)
		}
	}
	panic("unreachable")
}
