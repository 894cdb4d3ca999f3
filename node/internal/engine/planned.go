package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// A group's leader accepts a slot-migration entry, and a replica an
// export, only when it fits the plan step the meta leader drives now
// (package control's plans.go): so a coordinator that lost the meta
// leadership, or a call of an earlier attempt, changes nothing.

// ErrUnplanned is returned for a slot-migration entry or an export that
// belongs to no current step of a plan the meta group keeps: its migration
// ID names no slot-move step being driven now, or the group, range, attempt
// or phase do not fit that step.
var ErrUnplanned = errors.New("not a step of a running plan")

// MigrationCall is what a slot-migration entry or an export asks of a
// group, as checked against the plans.
type MigrationCall struct {
	Kind      string // "freeze", "unfreeze", "import", "drop", "export"
	Group     shard.GroupID
	Migration uint64
	Range     shard.SlotRange // not for unfreeze
	Attempt   uint64          // imports only
}

// MigrationCallOf describes env, a slot-migration entry for group g.
func MigrationCallOf(g shard.GroupID, env *raftcmdv1.Envelope) MigrationCall {
	rng := func(start, end uint32) shard.SlotRange {
		return shard.SlotRange{Start: shard.Slot(min(start, shard.SlotCount)), End: shard.Slot(min(end, shard.SlotCount))}
	}
	switch b := env.GetBody().(type) {
	case *raftcmdv1.Envelope_FreezeSlots:
		c := b.FreezeSlots
		return MigrationCall{Kind: "freeze", Group: g, Migration: c.GetMigration(), Range: rng(c.GetStart(), c.GetEnd())}
	case *raftcmdv1.Envelope_UnfreezeSlots:
		return MigrationCall{Kind: "unfreeze", Group: g, Migration: b.UnfreezeSlots.GetMigration()}
	case *raftcmdv1.Envelope_ImportSlots:
		c := b.ImportSlots
		return MigrationCall{Kind: "import", Group: g, Migration: c.GetMigration(), Range: rng(c.GetStart(), c.GetEnd()), Attempt: c.GetAttempt()}
	case *raftcmdv1.Envelope_DropImport:
		c := b.DropImport
		return MigrationCall{Kind: "drop", Group: g, Migration: c.GetMigration(), Range: rng(c.GetStart(), c.GetEnd())}
	}
	return MigrationCall{Kind: "unknown", Group: g}
}

// fitsPlan reports whether c belongs to the step of plans that is being
// driven now: the plan running (rolling back, for an unfreeze or a drop)
// at that slot-move step, in the phase that makes such calls, with c's
// group as the step's source (freeze, export, unfreeze) or target (import,
// drop), its range, and for an import the step's current attempt.
func fitsPlan(plans []*raftcmdv1.Plan, c MigrationCall) error {
	planID, step := c.Migration>>16, int(c.Migration&0xffff)
	i := slices.IndexFunc(plans, func(p *raftcmdv1.Plan) bool { return p.GetId() == planID })
	if i < 0 {
		return fmt.Errorf("%w: %s for migration %d: the meta group keeps no plan %d", ErrUnplanned, c.Kind, c.Migration, planID)
	}
	p := plans[i]
	if step >= len(p.GetSteps()) || p.GetSteps()[step].GetMoveSlots() == nil {
		return fmt.Errorf("%w: %s for migration %d: plan %d has no slot-move step %d", ErrUnplanned, c.Kind, c.Migration, planID, step)
	}
	st := p.GetSteps()[step]
	mv := st.GetMoveSlots()
	if int(p.GetCurrent()) != step {
		return fmt.Errorf("%w: %s for migration %d: plan %d is at step %d, not %d", ErrUnplanned, c.Kind, c.Migration, planID, p.GetCurrent(), step)
	}
	source := c.Kind == "freeze" || c.Kind == "export" || c.Kind == "unfreeze"
	want, wantState, wantPhase := shard.GroupID(mv.GetTo()), fsm.PlanRunning, fsm.PhaseCopying
	if source {
		want = shard.GroupID(mv.GetFrom())
	}
	switch c.Kind {
	case "freeze":
		wantPhase = fsm.PhasePending
	case "unfreeze", "drop":
		wantState, wantPhase = fsm.PlanCancelling, fsm.PhaseRollingBack
	}
	r := shard.SlotRange{Start: shard.Slot(mv.GetStart()), End: shard.Slot(mv.GetEnd())}
	switch {
	case c.Group != want:
		return fmt.Errorf("%w: %s for migration %d: group %d is not the step's %s (group %d)", ErrUnplanned, c.Kind, c.Migration, c.Group,
			map[bool]string{true: "source", false: "target"}[source], want)
	case c.Kind != "unfreeze" && c.Range != r:
		return fmt.Errorf("%w: %s for migration %d: slots %v are not the step's %v", ErrUnplanned, c.Kind, c.Migration, c.Range, r)
	case p.GetState() != wantState || st.GetPhase() != wantPhase:
		return fmt.Errorf("%w: %s for migration %d: plan %d is %s with step %d %s (a %s needs it %s with the step %s)", ErrUnplanned, c.Kind, c.Migration,
			planID, PlanStateName(p.GetState()), step, PhaseName(st.GetPhase()), c.Kind, PlanStateName(wantState), PhaseName(wantPhase))
	case c.Kind == "import" && c.Attempt != st.GetAttempt():
		return fmt.Errorf("%w: import for migration %d: attempt %d, the step is at attempt %d", ErrUnplanned, c.Migration, c.Attempt, st.GetAttempt())
	}
	return nil
}

// CheckPlanned refuses c unless it fits a plan step of this node's meta
// replica, caught up with the meta leader first when it does not: the
// coordinator records each phase before it makes the phase's calls, so a
// replica behind it may not know the step yet.
func (n *Engine) CheckPlanned(ctx context.Context, c MigrationCall) error {
	if fitsPlan(n.meta.FSM.Plans(), c) == nil {
		return nil
	}
	if err := n.CatchUpMeta(ctx); err != nil {
		return fmt.Errorf("%w: catching up with the meta group to check a %s for migration %d: %v", ErrNotProposed, c.Kind, c.Migration, err)
	}
	return fitsPlan(n.meta.FSM.Plans(), c)
}

// PlanStateName is a plan state's name as the API, the CLI and the logs
// show it.
func PlanStateName(s uint32) string { return nameOf(planStates, s, "state") }

// PhaseName is a plan step's phase's name, as PlanStateName.
func PhaseName(p uint32) string { return nameOf(phases, p, "phase") }

var (
	planStates = map[uint32]string{fsm.PlanRunning: "running", fsm.PlanDone: "done",
		fsm.PlanCancelling: "cancelling", fsm.PlanCancelled: "cancelled", fsm.PlanFailed: "failed"}
	phases = map[uint32]string{fsm.PhasePending: "pending", fsm.PhaseCopying: "copying", fsm.PhaseFlipped: "flipped",
		fsm.PhaseDone: "done", fsm.PhaseRollingBack: "rolling back", fsm.PhaseRolledBack: "rolled back"}
)

// nameOf is v's name in names, or what and the number.
func nameOf(names map[uint32]string, v uint32, what string) string {
	if n, ok := names[v]; ok {
		return n
	}
	return fmt.Sprintf("%s %d", what, v)
}
