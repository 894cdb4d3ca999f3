package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/cenkalti/backoff/v5"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// planInterval is how often the meta leader looks for a plan to drive.
const planInterval = 100 * time.Millisecond

// planCallTimeout bounds one call of a plan step (a freeze, one import
// chunk, an update of the plan); a failed call is retried until
// planRetryFor has passed, then the step is tried again from its recorded
// phase.
const (
	planCallTimeout = 10 * time.Second
	planRetryFor    = 30 * time.Second
)

// planLoop drives the meta group's running plan while this node leads the
// meta group, one step after the other, until ctx is done. Every step
// resumes from the phase recorded in the meta group, so a new leader (or
// this one after an error) carries on where the last one stopped.
func (c *Controller) planLoop(ctx context.Context) {
	every(ctx, planInterval, func() {
		for ctx.Err() == nil && c.meta.IsLeader() {
			p, ok := c.meta.FSM.ActivePlan()
			if !ok {
				return
			}
			if err := c.driveStep(ctx, p); err != nil {
				if ctx.Err() == nil {
					c.log.Warn("plan step", "plan", p.GetId(), "step", p.GetCurrent(), "err", err)
				}
				return
			}
		}
	})
}

// driveStep moves plan p's current step on by one phase.
func (c *Controller) driveStep(ctx context.Context, p *raftcmdv1.Plan) error {
	i := p.GetCurrent()
	st := p.GetSteps()[i]
	update := func(u *raftcmdv1.UpdatePlan) (*raftcmdv1.Plan, error) {
		u.Id, u.Step, u.FromPhase = p.GetId(), i, st.GetPhase()
		var out *raftcmdv1.Plan
		err := c.retryPlanCall(ctx, func(ctx context.Context) error {
			res, err := c.req.ProposeTo(ctx, engine.Dest{Replica: c.meta, ID: shard.MetaGroup},
				&raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_UpdatePlan{UpdatePlan: u}, Actor: c.selfActor()})
			if r, ok := res.(*fsm.PlanResult); ok {
				out = r.Plan
			}
			return err
		})
		return out, err
	}
	cancelling := p.GetState() == fsm.PlanCancelling
	switch a := st.GetAction().(type) {
	case *raftcmdv1.PlanStep_AddGroup:
		_, err := update(&raftcmdv1.UpdatePlan{ToPhase: fsm.PhaseDone})
		if err == nil {
			c.log.Info("plan: group added", "plan", p.GetId(), "group", a.AddGroup.GetGroup(), "replicas", a.AddGroup.GetReplicas())
		}
		return err
	case *raftcmdv1.PlanStep_MoveSlots:
		mv := a.MoveSlots
		mig := fsm.MigrationID(p.GetId(), int(i))
		from, to := shard.GroupID(mv.GetFrom()), shard.GroupID(mv.GetTo())
		switch ph := st.GetPhase(); {
		case cancelling && (ph == fsm.PhasePending || ph == fsm.PhaseCopying):
			_, err := update(&raftcmdv1.UpdatePlan{ToPhase: fsm.PhaseRollingBack})
			return err
		case ph == fsm.PhasePending:
			if err := c.groupCall(ctx, from, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_FreezeSlots{FreezeSlots: &raftcmdv1.FreezeSlots{
				Migration: mig, Start: mv.GetStart(), End: mv.GetEnd()}}}); err != nil {
				return fmt.Errorf("freezing slots [%d,%d) of group %d: %w", mv.GetStart(), mv.GetEnd(), from, err)
			}
			_, err := update(&raftcmdv1.UpdatePlan{ToPhase: fsm.PhaseCopying})
			return err
		case ph == fsm.PhaseCopying:
			started, err := update(&raftcmdv1.UpdatePlan{ToPhase: fsm.PhaseCopying, NewAttempt: true})
			if err != nil {
				return err
			}
			attempt := started.GetSteps()[i].GetAttempt()
			st.Attempt = attempt
			records, size, chunks, err := c.copySlots(ctx, mig, mv, attempt, func(records, size, chunks uint64) error {
				_, err := update(&raftcmdv1.UpdatePlan{ToPhase: fsm.PhaseCopying, Attempt: attempt, Records: records, Bytes: size, Chunks: chunks})
				return err
			})
			if err != nil {
				err = fmt.Errorf("copying slots [%d,%d) from group %d to %d (attempt %d): %w", mv.GetStart(), mv.GetEnd(), from, to, attempt, err)
				if isClockSkew(err) {
					// Trying again cannot help while the groups' clocks
					// disagree: the plan fails and the move rolls back.
					if _, uerr := update(&raftcmdv1.UpdatePlan{Error: err.Error()}); uerr != nil {
						return fmt.Errorf("%w; failing the plan: %v", err, uerr)
					}
				}
				return err
			}
			flipped, err := update(&raftcmdv1.UpdatePlan{ToPhase: fsm.PhaseFlipped, Attempt: attempt, Records: records, Bytes: size, Chunks: chunks})
			if err == nil {
				c.log.Info("plan: slots moved", "plan", p.GetId(), "from", from, "to", to, "slots", fmt.Sprintf("[%d,%d)", mv.GetStart(), mv.GetEnd()),
					"records", records, "bytes", size, "map_epoch", flipped.GetSteps()[i].GetMapEpoch())
			}
			return err
		case ph == fsm.PhaseFlipped:
			_, err := update(&raftcmdv1.UpdatePlan{ToPhase: fsm.PhaseDone})
			return err
		case ph == fsm.PhaseRollingBack:
			if err := c.groupCall(ctx, from, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_UnfreezeSlots{UnfreezeSlots: &raftcmdv1.UnfreezeSlots{
				Migration: mig}}}); err != nil {
				return fmt.Errorf("unfreezing group %d: %w", from, err)
			}
			if err := c.groupCall(ctx, to, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_DropImport{DropImport: &raftcmdv1.DropImport{
				Migration: mig, Start: mv.GetStart(), End: mv.GetEnd()}}}); err != nil {
				return fmt.Errorf("dropping the import into group %d: %w", to, err)
			}
			_, err := update(&raftcmdv1.UpdatePlan{ToPhase: fsm.PhaseRolledBack})
			if err == nil {
				c.log.Info("plan: slot move rolled back", "plan", p.GetId(), "from", from, "to", to)
			}
			return err
		}
	}
	return fmt.Errorf("plan %d: step %d in phase %d: nothing to do", p.GetId(), i, st.GetPhase())
}

// copySlots copies migration's frozen state from group mv.from into group
// mv.to as attempt attempt: export pages read from a source replica become
// import chunks proposed to the target, in order; progress is recorded in
// the plan every Config.MigrationProgressInterval (a cancel is seen then). It returns the totals.
func (c *Controller) copySlots(ctx context.Context, mig uint64, mv *raftcmdv1.MoveSlotsStep, attempt uint64,
	progress func(records, size, chunks uint64) error) (records, size, chunks uint64, err error) {
	mapEpoch, _ := c.meta.FSM.ShardMapEpoch()
	from, to := shard.GroupID(mv.GetFrom()), shard.GroupID(mv.GetTo())
	r := shard.SlotRange{Start: shard.Slot(mv.GetStart()), End: shard.Slot(mv.GetEnd())}
	var cursor []byte
	reported := time.Now()
	for seq := uint32(0); ; seq++ {
		var page fsm.ExportPage
		err := c.retryPlanCall(ctx, func(ctx context.Context) (err error) {
			page, err = c.req.ExportPage(ctx, from, mig, r, cursor)
			return err
		})
		if err != nil {
			return records, size, chunks, fmt.Errorf("export: %w", err)
		}
		env := &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_ImportSlots{ImportSlots: &raftcmdv1.ImportSlots{
			Migration: mig, Attempt: attempt, Start: mv.GetStart(), End: mv.GetEnd(), Seq: seq, Last: page.Done,
			SourceNowUnixNano: page.SourceNow, MapEpoch: mapEpoch, State: page.State}}}
		if err := c.groupCall(ctx, to, env); err != nil {
			return records, size, chunks, fmt.Errorf("import chunk %d: %w", seq, err)
		}
		records, size, chunks = records+uint64(page.Records), size+uint64(proto.Size(page.State)), chunks+1
		if page.Done {
			return records, size, chunks, nil
		}
		if time.Since(reported) >= c.cfg.MigrationProgressInterval {
			if err := progress(records, size, chunks); err != nil {
				return records, size, chunks, err
			}
			reported = time.Now()
		}
		cursor = page.Next
	}
}

// groupCall proposes a slot-migration entry to group id, retrying while
// the answer is "not yet" (no leader, ownership lagging the map).
func (c *Controller) groupCall(ctx context.Context, id shard.GroupID, env *raftcmdv1.Envelope) error {
	return c.retryPlanCall(ctx, func(ctx context.Context) error {
		// A fresh copy each time: proposing stamps the envelope.
		return c.req.ApplyToGroup(ctx, id, proto.Clone(env).(*raftcmdv1.Envelope))
	})
}

// retryPlanCall runs call, each time within planCallTimeout, until it
// succeeds, fails for good (the request is wrong, or the plan or import
// moved on without this coordinator), or planRetryFor has passed.
func (c *Controller) retryPlanCall(ctx context.Context, call func(context.Context) error) error {
	deadline := time.Now().Add(planRetryFor)
	err, stopped := engine.Retry(ctx, engine.Doubling(20*time.Millisecond, 500*time.Millisecond), func() error {
		cctx, cancel := context.WithTimeout(ctx, planCallTimeout)
		err := call(cctx)
		cancel()
		if err == nil || !retryablePlanError(err) || time.Now().After(deadline) || !c.meta.IsLeader() {
			return backoff.Permanent(err)
		}
		return err
	})
	if stopped != nil {
		return stopped
	}
	return err
}

// retryablePlanError reports whether a plan call may succeed if tried
// again: nothing was decided against it, it just could not be done now.
func retryablePlanError(err error) bool {
	switch {
	case errors.Is(err, fsm.ErrImportRefused), errors.Is(err, fsm.ErrPlanConflict), errors.Is(err, fsm.ErrNoPlan),
		errors.Is(err, fsm.ErrPlanNotCancellable), errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, fsm.ErrNotOwnedYet), errors.Is(err, fsm.ErrNotFrozen), errors.Is(err, engine.ErrNotProposed),
		errors.Is(err, engine.ErrNotLeader), errors.Is(err, engine.ErrOutcomeUnknown), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
		return true
	}
	return false
}

// isClockSkew reports whether err (local, or a peer's Connect answer) is
// an import refused for its source time.
func isClockSkew(err error) bool {
	if errors.Is(err, fsm.ErrClockSkew) {
		return true
	}
	fv, ok := engine.ErrorDetail[*quoratev1.FieldViolation](err)
	return ok && fv.GetField() == "source_now_unix_nano"
}
