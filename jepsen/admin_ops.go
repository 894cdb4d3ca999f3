package jepsen

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// retryable reports whether an admin call may succeed when tried again,
// on another node or later: no leader, an election, a deadline, a node
// down.
func retryable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeAborted, connect.CodeUnknown:
		return true
	}
	return false
}

// adminRetry calls call on the members in turn (3 s each; nextMember)
// until it succeeds, fails with an error that is not retryable, or d has
// passed (then it returns the last error). It ends early only when ctx
// does.
func (c *Cluster) adminRetry(ctx context.Context, d time.Duration, call func(context.Context, quoratev1connect.AdminServiceClient) error) error {
	deadline := time.Now().Add(d)
	for i := 1; ; i++ {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := call(cctx, c.Admin(c.nextMember()))
		cancel()
		if err == nil || !retryable(err) {
			return err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		if i%len(c.Live()) == 0 { // every member tried: let an election end
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
}

// clusterStatus asks the members in turn, for up to d, for ClusterStatus.
func (c *Cluster) clusterStatus(ctx context.Context, d time.Duration) (*quoratev1.ClusterStatusResponse, error) {
	var st *quoratev1.ClusterStatusResponse
	err := c.adminRetry(ctx, d, func(ctx context.Context, a quoratev1connect.AdminServiceClient) error {
		resp, err := a.ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err == nil {
			st = resp.Msg
		}
		return err
	})
	return st, err
}

// listPlans asks the members in turn, for up to d, for ListPlans.
func (c *Cluster) listPlans(ctx context.Context, d time.Duration) ([]*quoratev1.PlanStatus, error) {
	var plans []*quoratev1.PlanStatus
	err := c.adminRetry(ctx, d, func(ctx context.Context, a quoratev1connect.AdminServiceClient) error {
		resp, err := a.ListPlans(ctx, connect.NewRequest(&quoratev1.ListPlansRequest{}))
		if err == nil {
			plans = resp.Msg.GetPlans()
		}
		return err
	})
	return plans, err
}

// planActive reports whether a plan in this state may still change the map.
func planActive(state string) bool { return state == "running" || state == "cancelling" }

// startPlan calls start (MoveSlots, SplitGroup, AddGroup) until the cluster
// records the plan, for up to d. Its answer may be lost after the plan was
// recorded (then the retry finds a plan running): a running plan whose
// summary begins with summary is taken as this one. Another plan running
// is waited for. It returns the plan as recorded.
func (c *Cluster) startPlan(ctx context.Context, d time.Duration, summary string,
	start func(context.Context, quoratev1connect.AdminServiceClient) (*connect.Response[quoratev1.PlanResponse], error)) (*quoratev1.PlanStatus, error) {
	deadline := time.Now().Add(d)
	for {
		var p *quoratev1.PlanStatus
		err := c.adminRetry(ctx, time.Until(deadline), func(ctx context.Context, a quoratev1connect.AdminServiceClient) error {
			resp, err := start(ctx, a)
			if err == nil {
				p = resp.Msg.GetPlan()
			}
			return err
		})
		if err == nil {
			return p, nil
		}
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			return nil, err
		}
		// Another plan runs: ours, if an earlier answer was lost, or not.
		plans, lerr := c.listPlans(ctx, time.Until(deadline))
		if lerr != nil {
			return nil, errors.Join(err, lerr)
		}
		for _, q := range plans {
			if planActive(q.GetState()) && strings.HasPrefix(q.GetSummary(), summary) {
				return q, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, err
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// waitPlan polls ListPlans until plan id is no longer running or
// cancelling, for up to d, and returns it as last seen.
func (c *Cluster) waitPlan(ctx context.Context, id uint64, d time.Duration) (*quoratev1.PlanStatus, error) {
	deadline := time.Now().Add(d)
	var last *quoratev1.PlanStatus
	for {
		plans, err := c.listPlans(ctx, time.Until(deadline))
		for _, p := range plans {
			if p.GetId() == id {
				last = p
			}
		}
		switch {
		case last != nil && !planActive(last.GetState()):
			return last, nil
		case time.Now().After(deadline) || ctx.Err() != nil:
			if err == nil {
				err = fmt.Errorf("plan %d still %s after %v", id, last.GetState(), d)
			}
			return last, err
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// PlanOutcome is how a plan a fault started ended.
type PlanOutcome struct {
	ID      uint64 `json:"id"`
	Summary string `json:"summary"`
	State   string `json:"state"` // done, cancelled or failed; running when the wait gave up
	Error   string `json:"error,omitempty"`
	Slots   int    `json:"slots"` // slots the plan's moves changed the owner of (steps flipped or done)
	Records uint64 `json:"records"`
	Bytes   uint64 `json:"bytes"`
	Chunks  uint64 `json:"chunks"`
	// Attempt is the highest copy attempt of a step: above 1 when a new
	// coordinator (meta leader) started a step's copy again.
	Attempt uint64 `json:"attempt"`
	// Cancel: "" (not asked), "cancelled" (asked and accepted) or
	// "refused" (asked after the map changed: the plan completes).
	Cancel string `json:"cancel,omitempty"`
}

// outcomeOf summarises p's steps.
func outcomeOf(p *quoratev1.PlanStatus) *PlanOutcome {
	o := &PlanOutcome{ID: p.GetId(), Summary: p.GetSummary(), State: p.GetState(), Error: p.GetError()}
	for _, st := range p.GetSteps() {
		o.Records += st.GetRecords()
		o.Bytes += st.GetBytes()
		o.Chunks += st.GetChunks()
		o.Attempt = max(o.Attempt, st.GetAttempt())
		if mv, ok := parseMoveAction(st.GetAction()); ok && (st.GetPhase() == "flipped" || st.GetPhase() == "done") {
			o.Slots += int(mv.end - mv.start)
		}
	}
	return o
}

func (o *PlanOutcome) String() string {
	s := fmt.Sprintf("plan %d %s: %d slots, %d records, %d bytes, %d chunks", o.ID, o.State, o.Slots, o.Records, o.Bytes, o.Chunks)
	if o.Attempt > 1 {
		s += fmt.Sprintf(", attempt %d", o.Attempt)
	}
	if o.Cancel != "" {
		s += ", cancel " + o.Cancel
	}
	return s
}

// moveAction is a slot move step: [start, end) from group from to group to.
type moveAction struct{ start, end, from, to uint32 }

// parseMoveAction reads a step's action, "move slots [0,512) 1→3".
func parseMoveAction(s string) (moveAction, bool) {
	var m moveAction
	if _, err := fmt.Sscanf(s, "move slots [%d,%d) %d→%d", &m.start, &m.end, &m.from, &m.to); err != nil || m.start >= m.end {
		return moveAction{}, false
	}
	return m, true
}

// PlanStats adds up the plans faults started.
type PlanStats struct {
	Plans                   int    // plans started
	Done, Cancelled, Failed int    // how they ended (the others did not end in time)
	CancelRefused           int    // cancels refused: the map had flipped
	Slots                   int    // slots that changed group
	Records, Bytes, Chunks  uint64 // copied by the plans done
	Restarted               int    // plans with a step copied again by a new coordinator
}

// PlanTotals adds up the plans of faults.
func PlanTotals(faults []Fault) PlanStats {
	var s PlanStats
	for _, f := range faults {
		p := f.Plan
		if p == nil {
			continue
		}
		s.Plans++
		switch p.State {
		case "done":
			s.Done++
		case "cancelled":
			s.Cancelled++
		case "failed":
			s.Failed++
		}
		if p.Cancel == "refused" {
			s.CancelRefused++
		}
		if p.Attempt > 1 {
			s.Restarted++
		}
		s.Slots += p.Slots
		if p.State == "done" {
			s.Records += p.Records
			s.Bytes += p.Bytes
			s.Chunks += p.Chunks
		}
	}
	return s
}

func (s PlanStats) String() string {
	return fmt.Sprintf("%d (done %d, cancelled %d, failed %d; %d cancels refused after the flip; %d copies restarted by a new coordinator); "+
		"%d slots moved; plans done copied %d records, %d bytes in %d chunks", s.Plans, s.Done, s.Cancelled, s.Failed, s.CancelRefused, s.Restarted,
		s.Slots, s.Records, s.Bytes, s.Chunks)
}
