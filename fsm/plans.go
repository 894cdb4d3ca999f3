package fsm

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// Plan states (raftcmdv1.Plan.state).
const (
	PlanRunning uint32 = iota + 1
	PlanDone
	PlanCancelling
	PlanCancelled
	PlanFailed
)

// Step phases (raftcmdv1.PlanStep.phase). A slot move goes Pending →
// Copying (the source froze the slots) → Flipped (the map gave them to the
// target) → Done; a cancelled one Pending or Copying → RollingBack →
// RolledBack. A group addition goes Pending → Done (the map has the group).
const (
	PhasePending uint32 = iota
	PhaseCopying
	PhaseFlipped
	PhaseDone
	PhaseRollingBack
	PhaseRolledBack
)

// KeptPlans is how many finished plans the meta group keeps.
const KeptPlans = 16

// PlanResult is the Apply result of the plan commands: the plan as it
// stands after the entry.
type PlanResult struct {
	Plan *raftcmdv1.Plan
}

// MigrationID names step step of plan plan, as the groups' migration
// entries carry it.
func MigrationID(plan uint64, step int) uint64 { return plan<<16 | uint64(step) }

func clonePlans(ps []*raftcmdv1.Plan) []*raftcmdv1.Plan {
	out := make([]*raftcmdv1.Plan, len(ps))
	for i, p := range ps {
		out[i] = proto.Clone(p).(*raftcmdv1.Plan)
	}
	return out
}

// Plans returns the plans the meta group keeps, oldest first (copies).
func (f *FSM) Plans() []*raftcmdv1.Plan {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return clonePlans(f.meta.plans)
}

// ActivePlan returns the running (or cancelling) plan, if any (a copy).
func (f *FSM) ActivePlan() (*raftcmdv1.Plan, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if p := f.meta.activePlan(); p != nil {
		return proto.Clone(p).(*raftcmdv1.Plan), true
	}
	return nil, false
}

func (m *metaState) activePlan() *raftcmdv1.Plan {
	for _, p := range m.plans {
		if p.GetState() == PlanRunning || p.GetState() == PlanCancelling {
			return p
		}
	}
	return nil
}

func (m *metaState) plan(id uint64) *raftcmdv1.Plan {
	for _, p := range m.plans {
		if p.GetId() == id {
			return p
		}
	}
	return nil
}

func planError(field, format string, args ...any) error {
	return &admission.FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Err: admission.ErrInvalidRequest}
}

// CheckPlan reports whether steps can run, one after the other, from map
// m: each group added is new and its replicas registered (registered says
// which are), each slot move's range is owned entirely by its source and
// goes to another existing group. Errors name the step's field.
func CheckPlan(m shard.Map, steps []*raftcmdv1.PlanStep, registered func(string) bool) error {
	if len(steps) == 0 {
		return planError("steps", "a plan needs at least one step")
	}
	m = m.Clone()
	for i, st := range steps {
		field := fmt.Sprintf("steps[%d]", i)
		switch a := st.GetAction().(type) {
		case *raftcmdv1.PlanStep_AddGroup:
			next, err := addGroup(m, a.AddGroup, registered)
			if err != nil {
				return planError(field+".add_group", "%v", err)
			}
			m = next
		case *raftcmdv1.PlanStep_MoveSlots:
			next, err := moveSlots(m, a.MoveSlots)
			if err != nil {
				return planError(field+".move_slots", "%v", err)
			}
			m = next
		default:
			return planError(field, "has no action")
		}
	}
	return nil
}

// addGroup returns m with the group a adds, at the next epoch.
func addGroup(m shard.Map, a *raftcmdv1.AddGroupStep, registered func(string) bool) (shard.Map, error) {
	id := shard.GroupID(a.GetGroup())
	if id == shard.MetaGroup {
		return m, errors.New("group 0 is the meta group")
	}
	if _, ok := m.Group(id); ok {
		return m, fmt.Errorf("group %d exists", id)
	}
	if len(a.GetReplicas()) == 0 {
		return m, errors.New("no replicas")
	}
	for _, n := range a.GetReplicas() {
		if !registered(n) {
			return m, fmt.Errorf("replica %s is not a registered node", admission.Quote(n))
		}
	}
	out := m.Clone()
	out.Epoch++
	out.Groups = append(out.Groups, shard.Group{ID: id, Replicas: slices.Clone(a.GetReplicas()), Founders: slices.Clone(a.GetReplicas()), Forming: true})
	slices.SortFunc(out.Groups, func(x, y shard.Group) int { return int(x.ID) - int(y.ID) })
	if err := out.Validate(); err != nil {
		return m, err
	}
	return out, nil
}

// moveSlots returns m with a's slots given to a.to, at the next epoch.
func moveSlots(m shard.Map, a *raftcmdv1.MoveSlotsStep) (shard.Map, error) {
	r, err := rangeOf(a.GetStart(), a.GetEnd())
	if err != nil {
		return m, err
	}
	from, to := shard.GroupID(a.GetFrom()), shard.GroupID(a.GetTo())
	if from == to {
		return m, fmt.Errorf("from and to are both group %d", from)
	}
	for x := r.Start; x < r.End; x++ {
		if g, _, _ := m.Lookup(x); g != from {
			return m, fmt.Errorf("slot %d belongs to group %d, not %d", x, g, from)
		}
	}
	return m.MoveSlots(r, to)
}

func (m *metaState) applyCreatePlan(c *raftcmdv1.CreatePlan, index uint64, now int64) interface{} {
	if m.shardMap == nil {
		return planError("plan", "the cluster has no shard map (no data groups)")
	}
	if p := m.activePlan(); p != nil {
		return fmt.Errorf("%w: plan %d (%s)", ErrPlanRunning, p.GetId(), p.GetSummary())
	}
	in := c.GetPlan()
	if err := CheckPlan(*m.shardMap, in.GetSteps(), func(id string) bool { _, ok := m.nodes[id]; return ok }); err != nil {
		return err
	}
	p := &raftcmdv1.Plan{Id: index, Kind: in.GetKind(), Summary: in.GetSummary(), State: PlanRunning,
		CreatedUnixNano: now, UpdatedUnixNano: now}
	for _, st := range in.GetSteps() {
		s := proto.Clone(st).(*raftcmdv1.PlanStep)
		s.Phase, s.Attempt, s.Records, s.Bytes, s.Chunks, s.MapEpoch = PhasePending, 0, 0, 0, 0, 0
		p.Steps = append(p.Steps, s)
	}
	m.plans = append(m.plans, p)
	m.trimPlans()
	return &PlanResult{Plan: proto.Clone(p).(*raftcmdv1.Plan)}
}

// trimPlans keeps the last KeptPlans finished plans, and the active one
// (always the last: none is made while one is active). It runs whenever a
// plan is made or ends.
func (m *metaState) trimPlans() {
	keep := KeptPlans
	if m.activePlan() != nil {
		keep++
	}
	if extra := len(m.plans) - keep; extra > 0 {
		m.plans = slices.Clone(m.plans[extra:])
	}
}

func (m *metaState) applyUpdatePlan(c *raftcmdv1.UpdatePlan, now int64) interface{} {
	p := m.plan(c.GetId())
	if p == nil {
		return fmt.Errorf("%w: %d", ErrNoPlan, c.GetId())
	}
	if (p.GetState() != PlanRunning && p.GetState() != PlanCancelling) || p.GetCurrent() != c.GetStep() ||
		int(c.GetStep()) >= len(p.GetSteps()) || p.GetSteps()[c.GetStep()].GetPhase() != c.GetFromPhase() {
		return fmt.Errorf("%w: plan %d is %d at step %d", ErrPlanConflict, p.GetId(), p.GetState(), p.GetCurrent())
	}
	st := p.Steps[c.GetStep()]
	if c.GetError() != "" {
		failPlan(p, st, c.GetError())
		p.UpdatedUnixNano = now
		m.trimPlans()
		return &PlanResult{Plan: proto.Clone(p).(*raftcmdv1.Plan)}
	}
	cancelling := p.GetState() == PlanCancelling
	from, to := c.GetFromPhase(), c.GetToPhase()
	switch a := st.GetAction().(type) {
	case *raftcmdv1.PlanStep_AddGroup:
		if from != PhasePending || to != PhaseDone || cancelling {
			return fmt.Errorf("%w: add-group step from phase %d to %d", ErrPlanConflict, from, to)
		}
		next, err := addGroup(*m.shardMap, a.AddGroup, func(id string) bool { _, ok := m.nodes[id]; return ok })
		if err != nil {
			failPlan(p, st, err.Error())
			break
		}
		m.shardMap = &next
		st.MapEpoch = next.Epoch
		st.Phase = PhaseDone
		p.Current++
	case *raftcmdv1.PlanStep_MoveSlots:
		switch {
		case from == PhasePending && to == PhaseCopying && !cancelling:
		case from == PhaseCopying && to == PhaseCopying && c.GetNewAttempt() && !cancelling:
			st.Attempt++
			st.Records, st.Bytes, st.Chunks = 0, 0, 0
		case from == PhaseCopying && to == PhaseCopying && c.GetAttempt() == st.GetAttempt() && !cancelling:
			st.Records, st.Bytes, st.Chunks = c.GetRecords(), c.GetBytes(), c.GetChunks()
		case from == PhaseCopying && to == PhaseFlipped && c.GetAttempt() == st.GetAttempt() && !cancelling:
			next, err := moveSlots(*m.shardMap, a.MoveSlots)
			if err != nil {
				failPlan(p, st, err.Error())
				to = st.GetPhase()
				break
			}
			m.shardMap = &next
			st.MapEpoch = next.Epoch
			st.Records, st.Bytes, st.Chunks = c.GetRecords(), c.GetBytes(), c.GetChunks()
		case from == PhaseFlipped && to == PhaseDone:
			p.Current++
		case (from == PhasePending || from == PhaseCopying) && to == PhaseRollingBack && cancelling:
		case from == PhaseRollingBack && to == PhaseRolledBack:
			p.State = PlanCancelled
			if p.GetError() != "" {
				p.State = PlanFailed
			}
		default:
			return fmt.Errorf("%w: slot-move step from phase %d to %d (attempt %d, step at attempt %d)",
				ErrPlanConflict, from, to, c.GetAttempt(), st.GetAttempt())
		}
		st.Phase = to
	}
	if p.State == PlanRunning && int(p.GetCurrent()) == len(p.GetSteps()) {
		p.State = PlanDone
	}
	p.UpdatedUnixNano = now
	m.trimPlans()
	return &PlanResult{Plan: proto.Clone(p).(*raftcmdv1.Plan)}
}

func (m *metaState) applyCancelPlan(c *raftcmdv1.CancelPlan, now int64) interface{} {
	p := m.plan(c.GetId())
	if p == nil {
		return fmt.Errorf("%w: %d", ErrNoPlan, c.GetId())
	}
	if p.GetState() == PlanCancelling {
		return &PlanResult{Plan: proto.Clone(p).(*raftcmdv1.Plan)}
	}
	if p.GetState() != PlanRunning {
		return fmt.Errorf("%w: plan %d has finished", ErrPlanNotCancellable, p.GetId())
	}
	st := p.Steps[p.GetCurrent()]
	switch {
	case st.GetPhase() == PhasePending && st.GetAddGroup() != nil:
		p.State = PlanCancelled
	case st.GetPhase() == PhasePending || st.GetPhase() == PhaseCopying:
		p.State = PlanCancelling
	default:
		return fmt.Errorf("%w: step %d of plan %d already changed the shard map (epoch %d); it will complete",
			ErrPlanNotCancellable, p.GetCurrent(), p.GetId(), st.GetMapEpoch())
	}
	p.UpdatedUnixNano = now
	m.trimPlans()
	return &PlanResult{Plan: proto.Clone(p).(*raftcmdv1.Plan)}
}

// failPlan ends p with msg: a slot move that may have frozen its source
// rolls back first, or goes on rolling back (the plan is cancelling, and
// failed once rolled back).
func failPlan(p *raftcmdv1.Plan, st *raftcmdv1.PlanStep, msg string) {
	p.Error = msg
	if st.GetMoveSlots() != nil && (st.GetPhase() == PhasePending || st.GetPhase() == PhaseCopying || st.GetPhase() == PhaseRollingBack) {
		p.State = PlanCancelling
		return
	}
	p.State = PlanFailed
}
