package control

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// MoveSlots, on the meta leader, starts a plan that moves the slots r names
// from one group to another (one step per contiguous range).
func (c *Controller) MoveSlots(ctx context.Context, r *quoratev1.MoveSlotsRequest) (*quoratev1.PlanResponse, error) {
	return c.startPlan(ctx, func(m shard.Map) (*raftcmdv1.Plan, error) { return planMoveSlots(m, r) })
}

// AddGroup, on the meta leader, starts a plan that adds a group on
// replicas (placed by the cluster when empty).
func (c *Controller) AddGroup(ctx context.Context, replicas []string) (*quoratev1.PlanResponse, error) {
	return c.startPlan(ctx, func(m shard.Map) (*raftcmdv1.Plan, error) {
		step, err := c.planAddGroup(ctx, m, replicas)
		if err != nil {
			return nil, err
		}
		return &raftcmdv1.Plan{Kind: "group add", Summary: fmt.Sprintf("add group %d on %v", step.GetGroup(), step.GetReplicas()),
			Steps: []*raftcmdv1.PlanStep{{Action: &raftcmdv1.PlanStep_AddGroup{AddGroup: step}}}}, nil
	})
}

// SplitGroup, on the meta leader, starts a plan that adds a group and
// moves the last half of src's slots to it.
func (c *Controller) SplitGroup(ctx context.Context, src shard.GroupID) (*quoratev1.PlanResponse, error) {
	return c.startPlan(ctx, func(m shard.Map) (*raftcmdv1.Plan, error) {
		if _, ok := m.Group(src); !ok {
			return nil, engine.BadRequest("group", "group %d is not in the shard map", src)
		}
		owned := m.GroupSlots()[src]
		if owned < 2 {
			return nil, engine.BadRequest("group", "group %d owns %d slots: nothing to split", src, owned)
		}
		add, err := c.planAddGroup(ctx, m, nil)
		if err != nil {
			return nil, err
		}
		ranges, _ := m.LastSlots(src, owned/2)
		p := &raftcmdv1.Plan{Kind: "group split",
			Summary: fmt.Sprintf("split group %d: new group %d on %v takes %d of its %d slots", src, add.GetGroup(), add.GetReplicas(), owned/2, owned),
			Steps:   []*raftcmdv1.PlanStep{{Action: &raftcmdv1.PlanStep_AddGroup{AddGroup: add}}}}
		for _, rg := range ranges {
			p.Steps = append(p.Steps, moveStep(src, add.GetGroup(), rg))
		}
		return p, nil
	})
}

// CancelPlan, on the meta leader, cancels plan id.
func (c *Controller) CancelPlan(ctx context.Context, id uint64) (*quoratev1.PlanResponse, error) {
	res, err := c.req.ProposeTo(ctx, engine.Dest{Replica: c.meta, ID: shard.MetaGroup},
		&raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_CancelPlan{CancelPlan: &raftcmdv1.CancelPlan{Id: id}}, Actor: ActorOf(ctx, "")})
	if r, ok := res.(*fsm.PlanResult); ok {
		return &quoratev1.PlanResponse{Plan: PlanStatus(r.Plan, c.req.Now())}, nil
	}
	return nil, err
}

// startPlan, on the meta leader, plans on its map (plan) and records the
// plan.
func (c *Controller) startPlan(ctx context.Context, plan func(shard.Map) (*raftcmdv1.Plan, error)) (*quoratev1.PlanResponse, error) {
	m, ok := c.meta.FSM.ShardMap()
	if !ok {
		return nil, engine.ErrNoShardMap
	}
	p, err := plan(m)
	if err != nil {
		return nil, err
	}
	res, err := c.req.ProposeTo(ctx, engine.Dest{Replica: c.meta, ID: shard.MetaGroup},
		&raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_CreatePlan{CreatePlan: &raftcmdv1.CreatePlan{Plan: p}}, Actor: ActorOf(ctx, "")})
	r, ok := res.(*fsm.PlanResult)
	if !ok {
		return nil, err
	}
	c.log.Info("plan created", "plan", r.Plan.GetId(), "summary", r.Plan.GetSummary())
	return &quoratev1.PlanResponse{Plan: PlanStatus(r.Plan, c.req.Now())}, nil
}

// planMoveSlots turns a MoveSlots request into a plan: one step per
// contiguous range.
func planMoveSlots(m shard.Map, r *quoratev1.MoveSlotsRequest) (*raftcmdv1.Plan, error) {
	from, to := shard.GroupID(r.GetFrom()), shard.GroupID(r.GetTo())
	if _, ok := m.Group(from); !ok {
		return nil, engine.BadRequest("from", "group %d is not in the shard map", from)
	}
	if _, ok := m.Group(to); !ok {
		return nil, engine.BadRequest("to", "group %d is not in the shard map", to)
	}
	if from == to {
		return nil, engine.BadRequest("to", "is group %d, the source", to)
	}
	var ranges []shard.SlotRange
	switch {
	case r.GetCount() > 0 && (r.GetStart() != 0 || r.GetEnd() != 0):
		return nil, engine.BadRequest("count", "give either count or a range (start, end), not both")
	case r.GetCount() > 0:
		owned := m.GroupSlots()[from]
		rs, ok := m.LastSlots(from, int(r.GetCount()))
		if !ok {
			return nil, engine.BadRequest("count", "is %d, but group %d owns %d slots", r.GetCount(), from, owned)
		}
		ranges = rs
	default:
		if r.GetEnd() > shard.SlotCount || r.GetStart() >= r.GetEnd() {
			return nil, engine.BadRequest("end", "[%d,%d) is not a slot range within [0,%d)", r.GetStart(), r.GetEnd(), shard.SlotCount)
		}
		rg := shard.SlotRange{Start: shard.Slot(r.GetStart()), End: shard.Slot(r.GetEnd())}
		for x := rg.Start; x < rg.End; x++ {
			if g, _, _ := m.Lookup(x); g != from {
				return nil, engine.BadRequest("start", "slot %d of [%d,%d) belongs to group %d, not %d", x, rg.Start, rg.End, g, from)
			}
		}
		ranges = []shard.SlotRange{rg}
	}
	p := &raftcmdv1.Plan{Kind: "slots move"}
	total := 0
	for _, rg := range ranges {
		p.Steps = append(p.Steps, moveStep(from, uint32(to), rg))
		total += rg.Len()
	}
	p.Summary = fmt.Sprintf("move %d slots from group %d to group %d", total, from, to)
	return p, nil
}

func moveStep(from shard.GroupID, to uint32, r shard.SlotRange) *raftcmdv1.PlanStep {
	return &raftcmdv1.PlanStep{Action: &raftcmdv1.PlanStep_MoveSlots{MoveSlots: &raftcmdv1.MoveSlotsStep{
		From: uint32(from), To: to, Start: uint32(r.Start), End: uint32(r.End)}}}
}

// planAddGroup names a new group (the next ID) and its replicas: those
// given, or the DataReplicas nodes holding the fewest replicas among those
// that joined and answer (placeableNodes).
func (c *Controller) planAddGroup(ctx context.Context, m shard.Map, replicas []string) (*raftcmdv1.AddGroupStep, error) {
	id := shard.GroupID(1)
	if len(m.Groups) > 0 {
		id = m.Groups[len(m.Groups)-1].ID + 1
	}
	var nodes []string
	for _, nd := range c.meta.FSM.Nodes() {
		nodes = append(nodes, nd.ID)
	}
	for i, r := range replicas {
		if !slices.Contains(nodes, r) {
			return nil, engine.BadRequest(fmt.Sprintf("replicas[%d]", i), "%s is not a registered node", admission.Quote(r))
		}
		if slices.Contains(replicas[:i], r) {
			return nil, engine.BadRequest(fmt.Sprintf("replicas[%d]", i), "%s appears twice", admission.Quote(r))
		}
	}
	if len(replicas) == 0 {
		// Placed by the cluster: only on nodes that joined and answer.
		live, left, err := c.placeableNodes(ctx)
		if err != nil {
			return nil, err
		}
		if replicas = m.LeastLoaded(live, DataReplicas); len(replicas) < DataReplicas && len(left) > 0 {
			return nil, engine.BadRequest("replicas", "only %d nodes may take a new group's replicas (%v), %d are needed; not candidates: %s",
				len(replicas), replicas, DataReplicas, describeLeftOut(left))
		}
	}
	return &raftcmdv1.AddGroupStep{Group: uint32(id), Replicas: replicas}, nil
}

// PlanStatus describes a plan for the admin API.
func PlanStatus(p *raftcmdv1.Plan, now time.Time) *quoratev1.PlanStatus {
	out := &quoratev1.PlanStatus{Id: p.GetId(), Kind: p.GetKind(), Summary: p.GetSummary(), State: engine.PlanStateName(p.GetState()),
		Error: p.GetError(), StepsDone: p.GetCurrent(),
		Age: durationpb.New(max(0, now.Sub(time.Unix(0, p.GetCreatedUnixNano()))))}
	for _, st := range p.GetSteps() {
		s := &quoratev1.PlanStepStatus{Phase: engine.PhaseName(st.GetPhase()), Attempt: st.GetAttempt(), Records: st.GetRecords(),
			Bytes: st.GetBytes(), Chunks: st.GetChunks(), MapEpoch: st.GetMapEpoch()}
		switch a := st.GetAction().(type) {
		case *raftcmdv1.PlanStep_AddGroup:
			s.Action = fmt.Sprintf("add group %d on %v", a.AddGroup.GetGroup(), a.AddGroup.GetReplicas())
		case *raftcmdv1.PlanStep_MoveSlots:
			mv := a.MoveSlots
			s.Action = fmt.Sprintf("move slots [%d,%d) %d→%d", mv.GetStart(), mv.GetEnd(), mv.GetFrom(), mv.GetTo())
		}
		out.Steps = append(out.Steps, s)
	}
	return out
}
