package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/cenkalti/backoff/v5"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/fsm"
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

// progressEvery is how often a copy records its progress in the plan.
const progressEvery = 500 * time.Millisecond

// planLoop drives the meta group's running plan while this node leads the
// meta group, one step after the other, until ctx is done. Every step
// resumes from the phase recorded in the meta group, so a new leader (or
// this one after an error) carries on where the last one stopped.
func (n *Node) planLoop(ctx context.Context) {
	every(ctx, planInterval, func() {
		for ctx.Err() == nil && n.meta.isLeader() {
			p, ok := n.meta.fsm.ActivePlan()
			if !ok {
				return
			}
			if err := n.driveStep(ctx, p); err != nil {
				if ctx.Err() == nil {
					n.log.Warn("plan step", "plan", p.GetId(), "step", p.GetCurrent(), "err", err)
				}
				return
			}
		}
	})
}

// driveStep moves plan p's current step on by one phase.
func (n *Node) driveStep(ctx context.Context, p *raftcmdv1.Plan) error {
	i := p.GetCurrent()
	st := p.GetSteps()[i]
	update := func(u *raftcmdv1.UpdatePlan) (*raftcmdv1.Plan, error) {
		u.Id, u.Step, u.FromPhase = p.GetId(), i, st.GetPhase()
		var out *raftcmdv1.Plan
		err := n.retryPlanCall(ctx, func(ctx context.Context) error {
			res, err := n.proposeTo(ctx, dest{g: n.meta, id: shard.MetaGroup},
				&raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_UpdatePlan{UpdatePlan: u}})
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
			n.log.Info("plan: group added", "plan", p.GetId(), "group", a.AddGroup.GetGroup(), "replicas", a.AddGroup.GetReplicas())
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
			if err := n.groupCall(ctx, from, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_FreezeSlots{FreezeSlots: &raftcmdv1.FreezeSlots{
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
			records, size, chunks, err := n.copySlots(ctx, mig, mv, attempt, func(records, size, chunks uint64) error {
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
				n.log.Info("plan: slots moved", "plan", p.GetId(), "from", from, "to", to, "slots", fmt.Sprintf("[%d,%d)", mv.GetStart(), mv.GetEnd()),
					"records", records, "bytes", size, "map_epoch", flipped.GetSteps()[i].GetMapEpoch())
			}
			return err
		case ph == fsm.PhaseFlipped:
			_, err := update(&raftcmdv1.UpdatePlan{ToPhase: fsm.PhaseDone})
			return err
		case ph == fsm.PhaseRollingBack:
			if err := n.groupCall(ctx, from, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_UnfreezeSlots{UnfreezeSlots: &raftcmdv1.UnfreezeSlots{
				Migration: mig}}}); err != nil {
				return fmt.Errorf("unfreezing group %d: %w", from, err)
			}
			if err := n.groupCall(ctx, to, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_DropImport{DropImport: &raftcmdv1.DropImport{
				Migration: mig, Start: mv.GetStart(), End: mv.GetEnd()}}}); err != nil {
				return fmt.Errorf("dropping the import into group %d: %w", to, err)
			}
			_, err := update(&raftcmdv1.UpdatePlan{ToPhase: fsm.PhaseRolledBack})
			if err == nil {
				n.log.Info("plan: slot move rolled back", "plan", p.GetId(), "from", from, "to", to)
			}
			return err
		}
	}
	return fmt.Errorf("plan %d: step %d in phase %d: nothing to do", p.GetId(), i, st.GetPhase())
}

// copySlots copies migration's frozen state from group mv.from into group
// mv.to as attempt attempt: export pages read from a source replica become
// import chunks proposed to the target, in order; progress is recorded in
// the plan every progressEvery (a cancel is seen then). It returns the totals.
func (n *Node) copySlots(ctx context.Context, mig uint64, mv *raftcmdv1.MoveSlotsStep, attempt uint64,
	progress func(records, size, chunks uint64) error) (records, size, chunks uint64, err error) {
	mapEpoch, _ := n.meta.fsm.ShardMapEpoch()
	from, to := shard.GroupID(mv.GetFrom()), shard.GroupID(mv.GetTo())
	r := shard.SlotRange{Start: shard.Slot(mv.GetStart()), End: shard.Slot(mv.GetEnd())}
	var cursor []byte
	reported := time.Now()
	for seq := uint32(0); ; seq++ {
		var page fsm.ExportPage
		err := n.retryPlanCall(ctx, func(ctx context.Context) (err error) {
			page, err = n.exportPage(ctx, from, mig, r, cursor)
			return err
		})
		if err != nil {
			return records, size, chunks, fmt.Errorf("export: %w", err)
		}
		env := &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_ImportSlots{ImportSlots: &raftcmdv1.ImportSlots{
			Migration: mig, Attempt: attempt, Start: mv.GetStart(), End: mv.GetEnd(), Seq: seq, Last: page.Done,
			SourceNowUnixNano: page.SourceNow, MapEpoch: mapEpoch, State: page.State}}}
		if err := n.groupCall(ctx, to, env); err != nil {
			return records, size, chunks, fmt.Errorf("import chunk %d: %w", seq, err)
		}
		records, size, chunks = records+uint64(page.Records), size+uint64(proto.Size(page.State)), chunks+1
		if page.Done {
			return records, size, chunks, nil
		}
		every := progressEvery
		if n.cfg.progressEvery > 0 {
			every = n.cfg.progressEvery
		}
		if time.Since(reported) >= every {
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
func (n *Node) groupCall(ctx context.Context, id shard.GroupID, env *raftcmdv1.Envelope) error {
	return n.retryPlanCall(ctx, func(ctx context.Context) error {
		// A fresh copy each time: proposing stamps the envelope.
		return n.applyToGroup(ctx, id, proto.Clone(env).(*raftcmdv1.Envelope))
	})
}

// retryPlanCall runs call, each time within planCallTimeout, until it
// succeeds, fails for good (the request is wrong, or the plan or import
// moved on without this coordinator), or planRetryFor has passed.
func (n *Node) retryPlanCall(ctx context.Context, call func(context.Context) error) error {
	deadline := time.Now().Add(planRetryFor)
	err, stopped := retry(ctx, doubling(20*time.Millisecond, 500*time.Millisecond), func() error {
		cctx, cancel := context.WithTimeout(ctx, planCallTimeout)
		err := call(cctx)
		cancel()
		if err == nil || !retryablePlanError(err) || time.Now().After(deadline) || !n.meta.isLeader() {
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
	case errors.Is(err, fsm.ErrNotOwnedYet), errors.Is(err, fsm.ErrNotFrozen), errors.Is(err, ErrNotProposed),
		errors.Is(err, ErrNotLeader), errors.Is(err, ErrOutcomeUnknown), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
		return true
	}
	return false
}

// ErrUnplanned is returned for a slot-migration entry or an export that
// belongs to no current step of a plan the meta group keeps: its migration
// ID names no slot-move step being driven now, or the group, range, attempt
// or phase do not fit that step.
var ErrUnplanned = errors.New("node: not a step of a running plan")

// migrationCall is what a slot-migration entry or an export asks of a
// group, as checked against the plans.
type migrationCall struct {
	kind      string // "freeze", "unfreeze", "import", "drop", "export"
	group     shard.GroupID
	migration uint64
	r         shard.SlotRange // not for unfreeze
	attempt   uint64          // imports only
}

// migrationCallOf describes env, a slot-migration entry for group g.
func migrationCallOf(g shard.GroupID, env *raftcmdv1.Envelope) migrationCall {
	rng := func(start, end uint32) shard.SlotRange {
		return shard.SlotRange{Start: shard.Slot(min(start, shard.SlotCount)), End: shard.Slot(min(end, shard.SlotCount))}
	}
	switch b := env.GetBody().(type) {
	case *raftcmdv1.Envelope_FreezeSlots:
		c := b.FreezeSlots
		return migrationCall{kind: "freeze", group: g, migration: c.GetMigration(), r: rng(c.GetStart(), c.GetEnd())}
	case *raftcmdv1.Envelope_UnfreezeSlots:
		return migrationCall{kind: "unfreeze", group: g, migration: b.UnfreezeSlots.GetMigration()}
	case *raftcmdv1.Envelope_ImportSlots:
		c := b.ImportSlots
		return migrationCall{kind: "import", group: g, migration: c.GetMigration(), r: rng(c.GetStart(), c.GetEnd()), attempt: c.GetAttempt()}
	case *raftcmdv1.Envelope_DropImport:
		c := b.DropImport
		return migrationCall{kind: "drop", group: g, migration: c.GetMigration(), r: rng(c.GetStart(), c.GetEnd())}
	}
	return migrationCall{kind: "unknown", group: g}
}

// fitsPlan reports whether c belongs to the step of plans that is being
// driven now: the plan running (rolling back, for an unfreeze or a drop)
// at that slot-move step, in the phase that makes such calls, with c's
// group as the step's source (freeze, export, unfreeze) or target (import,
// drop), its range, and for an import the step's current attempt.
func fitsPlan(plans []*raftcmdv1.Plan, c migrationCall) error {
	planID, step := c.migration>>16, int(c.migration&0xffff)
	i := slices.IndexFunc(plans, func(p *raftcmdv1.Plan) bool { return p.GetId() == planID })
	if i < 0 {
		return fmt.Errorf("%w: %s for migration %d: the meta group keeps no plan %d", ErrUnplanned, c.kind, c.migration, planID)
	}
	p := plans[i]
	if step >= len(p.GetSteps()) || p.GetSteps()[step].GetMoveSlots() == nil {
		return fmt.Errorf("%w: %s for migration %d: plan %d has no slot-move step %d", ErrUnplanned, c.kind, c.migration, planID, step)
	}
	st := p.GetSteps()[step]
	mv := st.GetMoveSlots()
	if int(p.GetCurrent()) != step {
		return fmt.Errorf("%w: %s for migration %d: plan %d is at step %d, not %d", ErrUnplanned, c.kind, c.migration, planID, p.GetCurrent(), step)
	}
	source := c.kind == "freeze" || c.kind == "export" || c.kind == "unfreeze"
	want, wantState, wantPhase := shard.GroupID(mv.GetTo()), fsm.PlanRunning, fsm.PhaseCopying
	if source {
		want = shard.GroupID(mv.GetFrom())
	}
	switch c.kind {
	case "freeze":
		wantPhase = fsm.PhasePending
	case "unfreeze", "drop":
		wantState, wantPhase = fsm.PlanCancelling, fsm.PhaseRollingBack
	}
	r := shard.SlotRange{Start: shard.Slot(mv.GetStart()), End: shard.Slot(mv.GetEnd())}
	switch {
	case c.group != want:
		return fmt.Errorf("%w: %s for migration %d: group %d is not the step's %s (group %d)", ErrUnplanned, c.kind, c.migration, c.group,
			map[bool]string{true: "source", false: "target"}[source], want)
	case c.kind != "unfreeze" && c.r != r:
		return fmt.Errorf("%w: %s for migration %d: slots %v are not the step's %v", ErrUnplanned, c.kind, c.migration, c.r, r)
	case p.GetState() != wantState || st.GetPhase() != wantPhase:
		return fmt.Errorf("%w: %s for migration %d: plan %d is %s with step %d %s (a %s needs it %s with the step %s)", ErrUnplanned, c.kind, c.migration,
			planID, planStateName(p.GetState()), step, phaseName(st.GetPhase()), c.kind, planStateName(wantState), phaseName(wantPhase))
	case c.kind == "import" && c.attempt != st.GetAttempt():
		return fmt.Errorf("%w: import for migration %d: attempt %d, the step is at attempt %d", ErrUnplanned, c.migration, c.attempt, st.GetAttempt())
	}
	return nil
}

// checkPlanned refuses c unless it fits a plan step of this node's meta
// replica, caught up with the meta leader first when it does not: the
// coordinator records each phase before it makes the phase's calls, so a
// replica behind it may not know the step yet.
func (n *Node) checkPlanned(ctx context.Context, c migrationCall) error {
	if fitsPlan(n.meta.fsm.Plans(), c) == nil {
		return nil
	}
	if err := n.catchUpMeta(ctx); err != nil {
		return fmt.Errorf("%w: catching up with the meta group to check a %s for migration %d: %v", ErrNotProposed, c.kind, c.migration, err)
	}
	return fitsPlan(n.meta.fsm.Plans(), c)
}

// isClockSkew reports whether err (local, or a peer's Connect answer) is
// an import refused for its source time.
func isClockSkew(err error) bool {
	if errors.Is(err, fsm.ErrClockSkew) {
		return true
	}
	fv, ok := errorDetail[*quoratev1.FieldViolation](err)
	return ok && fv.GetField() == "source_now_unix_nano"
}
