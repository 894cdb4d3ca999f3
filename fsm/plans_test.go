package fsm_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

func addGroupStep(group uint32, replicas ...string) *raftcmdv1.PlanStep {
	return &raftcmdv1.PlanStep{Action: &raftcmdv1.PlanStep_AddGroup{AddGroup: &raftcmdv1.AddGroupStep{Group: group, Replicas: replicas}}}
}

func moveStep(from, to, start, end uint32) *raftcmdv1.PlanStep {
	return &raftcmdv1.PlanStep{Action: &raftcmdv1.PlanStep_MoveSlots{MoveSlots: &raftcmdv1.MoveSlotsStep{From: from, To: to, Start: start, End: end}}}
}

func createPlanEnv(now int64, steps ...*raftcmdv1.PlanStep) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_CreatePlan{CreatePlan: &raftcmdv1.CreatePlan{
		Plan: &raftcmdv1.Plan{Kind: "test", Summary: fmt.Sprintf("%d steps", len(steps)), Steps: steps}}}}
}

func updatePlanEnv(now int64, u *raftcmdv1.UpdatePlan) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_UpdatePlan{UpdatePlan: u}}
}

func cancelPlanEnv(now int64, id uint64) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_CancelPlan{CancelPlan: &raftcmdv1.CancelPlan{Id: id}}}
}

func setShardMapEnv(now int64, expect uint64, m shard.Map) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_SetShardMap{SetShardMap: &raftcmdv1.SetShardMap{
		ExpectEpoch: expect, Map: fsm.ShardMapToProto(m)}}}
}

// planMeta drives a meta group's plans, each entry a second after the last.
type planMeta struct {
	*logRec
	now int64
}

func newPlanMeta(tb testing.TB) *planMeta {
	m := &planMeta{logRec: newLogRec(tb, fsm.Options{}), now: t0}
	m.setup()
	return m
}

func (m *planMeta) tick() int64 { m.now += sec; return m.now }

// initialMap is two groups of n1..n3 at epoch 1: group 1 owns the low half.
func initialMap(tb testing.TB) shard.Map {
	sm, err := shard.InitialMap([]string{"n1", "n2", "n3"}, 2, 3)
	if err != nil {
		tb.Fatal(err)
	}
	return sm
}

// setup registers n1..n4 and sets initialMap.
func (m *planMeta) setup() {
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		m.must(registerNodeEnv(m.tick(), n, n+":7000", n+":8000"))
	}
	m.must(setShardMapEnv(m.tick(), 0, initialMap(m.tb)))
}

func (m *planMeta) plan(what string, res any) *raftcmdv1.Plan {
	m.tb.Helper()
	return resultAs[*fsm.PlanResult](m.tb, what, res).Plan
}

// create applies a CreatePlan that must succeed and returns the plan's ID.
func (m *planMeta) create(steps ...*raftcmdv1.PlanStep) uint64 {
	m.tb.Helper()
	return m.plan("CreatePlan", m.apply(createPlanEnv(m.tick(), steps...))).GetId()
}

// update applies an UpdatePlan that must succeed.
func (m *planMeta) update(id uint64, step, from, to uint32, attempt uint64) *raftcmdv1.Plan {
	m.tb.Helper()
	return m.plan(fmt.Sprintf("UpdatePlan %d→%d", from, to), m.apply(updatePlanEnv(m.tick(), &raftcmdv1.UpdatePlan{
		Id: id, Step: step, FromPhase: from, ToPhase: to, Attempt: attempt})))
}

// newAttempt starts the next copy attempt of a copying step.
func (m *planMeta) newAttempt(id uint64, step uint32) uint64 {
	m.tb.Helper()
	p := m.plan("new attempt", m.apply(updatePlanEnv(m.tick(), &raftcmdv1.UpdatePlan{
		Id: id, Step: step, FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseCopying, NewAttempt: true})))
	return p.GetSteps()[step].GetAttempt()
}

// move runs slot-move step step from Pending to Done.
func (m *planMeta) move(id uint64, step uint32) {
	m.tb.Helper()
	m.update(id, step, fsm.PhasePending, fsm.PhaseCopying, 0)
	a := m.newAttempt(id, step)
	m.update(id, step, fsm.PhaseCopying, fsm.PhaseFlipped, a)
	m.update(id, step, fsm.PhaseFlipped, fsm.PhaseDone, 0)
}

// refused applies env, which must be refused with target and change
// nothing.
func (m *planMeta) refused(what string, env *raftcmdv1.Envelope, target error) error {
	m.tb.Helper()
	before := snapshotBytes(m.tb, m.f)
	env.NowUnixNano = m.f.LastNow()
	err := wantErr(m.tb, what, m.apply(env), target)
	if !slices.Equal(before, snapshotBytes(m.tb, m.f)) {
		m.tb.Fatalf("%s: a refused command changed the state", what)
	}
	return err
}

func (m *planMeta) shardMap() shard.Map {
	m.tb.Helper()
	sm, ok := m.f.ShardMap()
	if !ok {
		m.tb.Fatal("no shard map")
	}
	return sm
}

func TestCreatePlanChecksEveryStep(t *testing.T) {
	bare := &planMeta{logRec: newLogRec(t, fsm.Options{}), now: t0}
	bare.must(registerNodeEnv(bare.tick(), "n1", "n1:7000", "n1:8000"))
	if fieldOf(bare.refused("no map", createPlanEnv(t0, moveStep(1, 2, 0, 10)), admission.ErrInvalidRequest)) != "plan" {
		t.Fatal("a plan without a shard map is not refused on field plan")
	}
	m := newPlanMeta(t)
	for _, c := range []struct {
		name  string
		steps []*raftcmdv1.PlanStep
		field string
	}{
		{"no steps", nil, "steps"},
		{"no action", []*raftcmdv1.PlanStep{{}}, "steps[0]"},
		{"slots of two groups", []*raftcmdv1.PlanStep{moveStep(1, 2, 2000, 2100)}, "steps[0].move_slots"},
		{"slots of another group", []*raftcmdv1.PlanStep{moveStep(1, 2, 3000, 3100)}, "steps[0].move_slots"},
		{"from is to", []*raftcmdv1.PlanStep{moveStep(1, 1, 0, 10)}, "steps[0].move_slots"},
		{"unknown to", []*raftcmdv1.PlanStep{moveStep(1, 9, 0, 10)}, "steps[0].move_slots"},
		{"unknown from", []*raftcmdv1.PlanStep{moveStep(9, 2, 0, 10)}, "steps[0].move_slots"},
		{"to the meta group", []*raftcmdv1.PlanStep{moveStep(1, 0, 0, 10)}, "steps[0].move_slots"},
		{"empty range", []*raftcmdv1.PlanStep{moveStep(1, 2, 10, 10)}, "steps[0].move_slots"},
		{"past the last slot", []*raftcmdv1.PlanStep{moveStep(2, 1, 4000, 5000)}, "steps[0].move_slots"},
		{"existing group", []*raftcmdv1.PlanStep{addGroupStep(2, "n1")}, "steps[0].add_group"},
		{"meta group", []*raftcmdv1.PlanStep{addGroupStep(0, "n1")}, "steps[0].add_group"},
		{"unregistered replica", []*raftcmdv1.PlanStep{addGroupStep(3, "n1", "n9")}, "steps[0].add_group"},
		{"no replicas", []*raftcmdv1.PlanStep{addGroupStep(3)}, "steps[0].add_group"},
		{"a replica twice", []*raftcmdv1.PlanStep{addGroupStep(3, "n1", "n1")}, "steps[0].add_group"},
		{"group added twice", []*raftcmdv1.PlanStep{addGroupStep(3, "n1"), addGroupStep(3, "n2")}, "steps[1].add_group"},
		{"slots moved away by step 0", []*raftcmdv1.PlanStep{moveStep(1, 2, 0, 100), moveStep(1, 2, 50, 60)}, "steps[1].move_slots"},
		{"to a group added later", []*raftcmdv1.PlanStep{moveStep(1, 3, 0, 100), addGroupStep(3, "n4")}, "steps[0].move_slots"},
	} {
		if got := fieldOf(m.refused(c.name, createPlanEnv(0, c.steps...), admission.ErrInvalidRequest)); got != c.field {
			t.Errorf("%s: refused on field %q, want %q", c.name, got, c.field)
		}
	}
	if len(m.f.Plans()) != 0 || m.shardMap().Epoch != 1 {
		t.Fatalf("refused plans left %d plans, map epoch %d", len(m.f.Plans()), m.shardMap().Epoch)
	}

	// Steps are checked one after the other: a move to a group added by an
	// earlier step, of slots an earlier step moved in, is fine. Progress
	// fields of the request are ignored.
	add, mv, back := addGroupStep(3, "n2", "n4"), moveStep(1, 3, 0, 100), moveStep(3, 2, 50, 100)
	mv.Phase, mv.Attempt, mv.Records, mv.MapEpoch = fsm.PhaseFlipped, 9, 9, 9
	p := m.plan("CreatePlan", m.apply(createPlanEnv(m.tick(), add, mv, back)))
	if p.GetId() != uint64(len(m.entries)) || p.GetState() != fsm.PlanRunning || p.GetCurrent() != 0 || p.GetKind() != "test" ||
		p.GetCreatedUnixNano() != m.now || p.GetUpdatedUnixNano() != m.now || len(p.GetSteps()) != 3 {
		t.Fatalf("new plan %v, want id %d running from step 0, made at %d", p, len(m.entries), m.now)
	}
	for i, st := range p.GetSteps() {
		if st.GetPhase() != fsm.PhasePending || st.GetAttempt() != 0 || st.GetRecords() != 0 || st.GetMapEpoch() != 0 {
			t.Fatalf("step %d of a new plan: %v", i, st)
		}
	}
	if !proto.Equal(p.GetSteps()[1].GetMoveSlots(), mv.GetMoveSlots()) || m.shardMap().Epoch != 1 {
		t.Fatalf("step 1 %v, want the move asked; map epoch %d, want it unchanged", p.GetSteps()[1], m.shardMap().Epoch)
	}
	if active, ok := m.f.ActivePlan(); !ok || !proto.Equal(active, p) || len(m.f.Plans()) != 1 {
		t.Fatalf("ActivePlan() = %v, %v", active, ok)
	}
	m.refused("a second plan", createPlanEnv(0, moveStep(2, 1, 3000, 3100)), fsm.ErrPlanRunning)

	// Reads are copies.
	m.f.Plans()[0].State = fsm.PlanFailed
	if a, _ := m.f.ActivePlan(); a.GetState() != fsm.PlanRunning {
		t.Fatal("Plans() handed out the stored plan")
	}
}

// A slot move: Pending → Copying (attempts fenced) → Flipped (the map
// moves) → Done.
func TestSlotMovePlan(t *testing.T) {
	m := newPlanMeta(t)
	id := m.create(moveStep(1, 2, 0, 100))
	upd := func(u *raftcmdv1.UpdatePlan) *raftcmdv1.Envelope { u.Id = id; return updatePlanEnv(0, u) }
	m.refused("unknown plan", updatePlanEnv(0, &raftcmdv1.UpdatePlan{Id: id + 1, FromPhase: fsm.PhasePending, ToPhase: fsm.PhaseCopying}), fsm.ErrNoPlan)
	for name, u := range map[string]*raftcmdv1.UpdatePlan{
		"another step":          {Step: 1, FromPhase: fsm.PhasePending, ToPhase: fsm.PhaseCopying},
		"another from phase":    {FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseCopying, NewAttempt: true},
		"flip before the copy":  {FromPhase: fsm.PhasePending, ToPhase: fsm.PhaseFlipped},
		"done before the copy":  {FromPhase: fsm.PhasePending, ToPhase: fsm.PhaseDone},
		"roll back, not asked":  {FromPhase: fsm.PhasePending, ToPhase: fsm.PhaseRollingBack},
		"rolled back at once":   {FromPhase: fsm.PhasePending, ToPhase: fsm.PhaseRolledBack},
		"unknown phase":         {FromPhase: fsm.PhasePending, ToPhase: 42},
		"error of another step": {Step: 1, FromPhase: fsm.PhasePending, Error: "boom"},
	} {
		m.refused(name, upd(u), fsm.ErrPlanConflict)
	}

	p := m.update(id, 0, fsm.PhasePending, fsm.PhaseCopying, 0)
	if st := p.GetSteps()[0]; st.GetPhase() != fsm.PhaseCopying || p.GetUpdatedUnixNano() != m.now || p.GetCreatedUnixNano() == m.now {
		t.Fatalf("after Pending→Copying: %v", p)
	}
	m.refused("Pending→Copying again", upd(&raftcmdv1.UpdatePlan{FromPhase: fsm.PhasePending, ToPhase: fsm.PhaseCopying}), fsm.ErrPlanConflict)
	if a1, a2 := m.newAttempt(id, 0), m.newAttempt(id, 0); a1 != 1 || a2 != 2 {
		t.Fatalf("attempts %d, %d; want 1, 2", a1, a2)
	}
	p = m.plan("progress", m.apply(updatePlanEnv(m.tick(), &raftcmdv1.UpdatePlan{Id: id, FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseCopying,
		Attempt: 2, Records: 10, Bytes: 1000, Chunks: 2})))
	if st := p.GetSteps()[0]; st.GetRecords() != 10 || st.GetBytes() != 1000 || st.GetChunks() != 2 || st.GetAttempt() != 2 {
		t.Fatalf("progress of attempt 2: %v", st)
	}
	for name, u := range map[string]*raftcmdv1.UpdatePlan{
		"progress of attempt 1": {FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseCopying, Attempt: 1, Records: 99},
		"flip of attempt 1":     {FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseFlipped, Attempt: 1},
		"flip of attempt 3":     {FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseFlipped, Attempt: 3},
		"done before the flip":  {FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseDone, Attempt: 2},
		"back to pending":       {FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhasePending, Attempt: 2},
	} {
		m.refused(name, upd(u), fsm.ErrPlanConflict)
	}
	if m.newAttempt(id, 0) != 3 {
		t.Fatal("third attempt")
	}
	if st := m.f.Plans()[0].GetSteps()[0]; st.GetRecords() != 0 || st.GetChunks() != 0 {
		t.Fatalf("a new attempt kept the progress of the last: %v", st)
	}

	before := m.shardMap()
	want, err := before.MoveSlots(shard.SlotRange{Start: 0, End: 100}, 2)
	if err != nil {
		t.Fatal(err)
	}
	p = m.plan("flip", m.apply(updatePlanEnv(m.tick(), &raftcmdv1.UpdatePlan{Id: id, FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseFlipped,
		Attempt: 3, Records: 42, Bytes: 4200, Chunks: 5})))
	if got := m.shardMap(); !got.Equal(want) || got.Epoch != 2 {
		t.Fatalf("map after the flip %+v, want %+v", got, want)
	}
	if st := p.GetSteps()[0]; st.GetPhase() != fsm.PhaseFlipped || st.GetMapEpoch() != 2 || st.GetRecords() != 42 || p.GetCurrent() != 0 ||
		p.GetState() != fsm.PlanRunning {
		t.Fatalf("after the flip: %v", p)
	}
	m.refused("cancel after the flip", cancelPlanEnv(0, id), fsm.ErrPlanNotCancellable)
	m.refused("flip again", upd(&raftcmdv1.UpdatePlan{FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseFlipped, Attempt: 3}), fsm.ErrPlanConflict)
	m.refused("roll back after the flip", upd(&raftcmdv1.UpdatePlan{FromPhase: fsm.PhaseFlipped, ToPhase: fsm.PhaseRollingBack}), fsm.ErrPlanConflict)

	p = m.update(id, 0, fsm.PhaseFlipped, fsm.PhaseDone, 0)
	if p.GetState() != fsm.PlanDone || p.GetCurrent() != 1 || p.GetSteps()[0].GetPhase() != fsm.PhaseDone {
		t.Fatalf("after the last step: %v", p)
	}
	if _, ok := m.f.ActivePlan(); ok {
		t.Fatal("a done plan is active")
	}
	m.refused("update of a done plan", upd(&raftcmdv1.UpdatePlan{FromPhase: fsm.PhaseDone, ToPhase: fsm.PhaseDone}), fsm.ErrPlanConflict)
	m.refused("cancel of a done plan", cancelPlanEnv(0, id), fsm.ErrPlanNotCancellable)
	if got := m.shardMap(); !got.Equal(want) {
		t.Fatal("finishing the plan changed the map again")
	}
	m.create(moveStep(2, 1, 0, 100)) // and the next may start
}

// An add-group step adds the group, its replicas its founders; steps run
// in order.
func TestAddGroupPlan(t *testing.T) {
	m := newPlanMeta(t)
	id := m.create(addGroupStep(3, "n4", "n2"), moveStep(1, 3, 0, 100))
	m.refused("add-group to copying", updatePlanEnv(0, &raftcmdv1.UpdatePlan{Id: id, FromPhase: fsm.PhasePending, ToPhase: fsm.PhaseCopying}), fsm.ErrPlanConflict)
	m.refused("step 1 first", updatePlanEnv(0, &raftcmdv1.UpdatePlan{Id: id, Step: 1, FromPhase: fsm.PhasePending, ToPhase: fsm.PhaseCopying}), fsm.ErrPlanConflict)
	p := m.update(id, 0, fsm.PhasePending, fsm.PhaseDone, 0)
	sm := m.shardMap()
	g, ok := sm.Group(3)
	if !ok || sm.Epoch != 2 || !slices.Equal(g.Replicas, []string{"n4", "n2"}) || !slices.Equal(g.Founders, g.Replicas) || len(sm.Owned(3)) != 0 {
		t.Fatalf("after the add-group step the map is %+v", sm)
	}
	if p.GetCurrent() != 1 || p.GetState() != fsm.PlanRunning || p.GetSteps()[0].GetMapEpoch() != 2 {
		t.Fatalf("after the add-group step: %v", p)
	}
	m.move(id, 1)
	sm = m.shardMap()
	if got, epoch, _ := sm.Lookup(50); got != 3 || epoch != 3 || sm.Epoch != 3 {
		t.Fatalf("slot 50 is group %d's since epoch %d (map epoch %d), want 3, 3, 3", got, epoch, sm.Epoch)
	}
	p = m.f.Plans()[0]
	if p.GetState() != fsm.PlanDone || p.GetSteps()[1].GetMapEpoch() != 3 {
		t.Fatalf("plan %v", p)
	}

	// A replica removed after the plan was made: the step fails the plan.
	id = m.create(addGroupStep(4, "n4"))
	m.must(&raftcmdv1.Envelope{NowUnixNano: m.tick(), Body: &raftcmdv1.Envelope_RemoveNode{RemoveNode: &raftcmdv1.RemoveNode{Id: "n4"}}})
	p = m.update(id, 0, fsm.PhasePending, fsm.PhaseDone, 0)
	if p.GetState() != fsm.PlanFailed || p.GetError() == "" || m.shardMap().Epoch != 3 {
		t.Fatalf("add-group with a removed replica: %v (map epoch %d)", p, m.shardMap().Epoch)
	}
}

// A plan cancelled before its current step changed the map rolls back;
// after, it cannot be cancelled.
func TestCancelPlan(t *testing.T) {
	for _, copying := range []bool{false, true} {
		t.Run(fmt.Sprintf("copying=%v", copying), func(t *testing.T) {
			m := newPlanMeta(t)
			m.refused("unknown plan", cancelPlanEnv(0, 99), fsm.ErrNoPlan)
			id := m.create(moveStep(1, 2, 0, 100))
			from := fsm.PhasePending
			if copying {
				m.update(id, 0, fsm.PhasePending, fsm.PhaseCopying, 0)
				m.newAttempt(id, 0)
				from = fsm.PhaseCopying
			}
			p := m.plan("cancel", m.apply(cancelPlanEnv(m.tick(), id)))
			if p.GetState() != fsm.PlanCancelling || p.GetSteps()[0].GetPhase() != from {
				t.Fatalf("after CancelPlan: %v", p)
			}
			if again := m.plan("cancel again", m.apply(cancelPlanEnv(m.tick(), id))); !proto.Equal(again, p) {
				t.Fatalf("a repeated cancel changed the plan: %v", again)
			}
			if a, ok := m.f.ActivePlan(); !ok || a.GetId() != id {
				t.Fatal("a cancelling plan is not active")
			}
			m.refused("create while cancelling", createPlanEnv(0, moveStep(2, 1, 3000, 3100)), fsm.ErrPlanRunning)
			for name, u := range map[string]*raftcmdv1.UpdatePlan{
				"copy":        {FromPhase: fsm.PhasePending, ToPhase: fsm.PhaseCopying},
				"new attempt": {FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseCopying, NewAttempt: true},
				"progress":    {FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseCopying, Attempt: 1, Records: 5},
				"flip":        {FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseFlipped, Attempt: 1},
			} {
				u.Id = id
				m.refused(name+" while cancelling", updatePlanEnv(0, u), fsm.ErrPlanConflict)
			}
			m.update(id, 0, from, fsm.PhaseRollingBack, 0)
			p = m.update(id, 0, fsm.PhaseRollingBack, fsm.PhaseRolledBack, 0)
			if p.GetState() != fsm.PlanCancelled || p.GetError() != "" || p.GetSteps()[0].GetPhase() != fsm.PhaseRolledBack {
				t.Fatalf("after the rollback: %v", p)
			}
			if m.shardMap().Epoch != 1 {
				t.Fatal("a cancelled move changed the map")
			}
			m.refused("cancel a cancelled plan", cancelPlanEnv(0, id), fsm.ErrPlanNotCancellable)
			m.create(moveStep(1, 2, 0, 100))
		})
	}

	m := newPlanMeta(t)
	// An add-group step not begun is cancelled at once; steps done stay.
	id := m.create(moveStep(1, 2, 0, 100), addGroupStep(3, "n4"))
	m.move(id, 0)
	p := m.plan("cancel", m.apply(cancelPlanEnv(m.tick(), id)))
	if p.GetState() != fsm.PlanCancelled || m.shardMap().Epoch != 2 {
		t.Fatalf("cancel at a pending add-group: %v, map epoch %d", p, m.shardMap().Epoch)
	}
	// A move flipped cannot be cancelled, and completes.
	id = m.create(moveStep(2, 1, 0, 100))
	m.update(id, 0, fsm.PhasePending, fsm.PhaseCopying, 0)
	m.update(id, 0, fsm.PhaseCopying, fsm.PhaseFlipped, m.newAttempt(id, 0))
	err := m.refused("cancel after the flip", cancelPlanEnv(0, id), fsm.ErrPlanNotCancellable)
	if a, _ := m.f.ActivePlan(); a.GetState() != fsm.PlanRunning || errors.Is(err, fsm.ErrPlanConflict) {
		t.Fatalf("a refused cancel changed the plan: %v", a)
	}
	if p := m.update(id, 0, fsm.PhaseFlipped, fsm.PhaseDone, 0); p.GetState() != fsm.PlanDone {
		t.Fatalf("plan %v", p)
	}
}

// A step's error ends the plan: a move that may have frozen its source
// rolls back first and then fails.
func TestPlanFailure(t *testing.T) {
	fail := func(m *planMeta, id uint64, step, from uint32) *raftcmdv1.Plan {
		m.tb.Helper()
		return m.plan("error", m.apply(updatePlanEnv(m.tick(), &raftcmdv1.UpdatePlan{Id: id, Step: step, FromPhase: from,
			ToPhase: fsm.PhaseDone, Error: "boom"})))
	}
	for _, from := range []uint32{fsm.PhasePending, fsm.PhaseCopying} {
		m := newPlanMeta(t)
		id := m.create(moveStep(1, 2, 0, 100))
		if from == fsm.PhaseCopying {
			m.update(id, 0, fsm.PhasePending, fsm.PhaseCopying, 0)
			m.newAttempt(id, 0)
		}
		m.refused("error at another phase", updatePlanEnv(0, &raftcmdv1.UpdatePlan{Id: id, FromPhase: fsm.PhaseFlipped, Error: "x"}), fsm.ErrPlanConflict)
		p := fail(m, id, 0, from)
		if p.GetState() != fsm.PlanCancelling || p.GetError() != "boom" || p.GetSteps()[0].GetPhase() != from {
			t.Fatalf("error in phase %d: %v, want cancelling with the error", from, p)
		}
		m.update(id, 0, from, fsm.PhaseRollingBack, 0)
		if p := m.update(id, 0, fsm.PhaseRollingBack, fsm.PhaseRolledBack, 0); p.GetState() != fsm.PlanFailed || p.GetError() != "boom" {
			t.Fatalf("rolled back after an error: %v, want failed", p)
		}
		if m.shardMap().Epoch != 1 {
			t.Fatal("a failed move changed the map")
		}
	}

	m := newPlanMeta(t)
	// After the flip an error fails the plan at once; the map keeps the move.
	id := m.create(moveStep(1, 2, 0, 100))
	m.update(id, 0, fsm.PhasePending, fsm.PhaseCopying, 0)
	m.update(id, 0, fsm.PhaseCopying, fsm.PhaseFlipped, m.newAttempt(id, 0))
	if p := fail(m, id, 0, fsm.PhaseFlipped); p.GetState() != fsm.PlanFailed || m.shardMap().Epoch != 2 {
		t.Fatalf("error after the flip: %v, map epoch %d", p, m.shardMap().Epoch)
	}
	// An add-group step fails at once.
	id = m.create(addGroupStep(3, "n4"))
	if p := fail(m, id, 0, fsm.PhasePending); p.GetState() != fsm.PlanFailed {
		t.Fatalf("error at an add-group step: %v", p)
	}
	// The map changed under a copying move (here by hand): the flip fails
	// the plan, which rolls back.
	id = m.create(moveStep(1, 2, 200, 300))
	m.update(id, 0, fsm.PhasePending, fsm.PhaseCopying, 0)
	a := m.newAttempt(id, 0)
	sm := m.shardMap()
	moved, err := sm.MoveSlots(shard.SlotRange{Start: 250, End: 260}, 2)
	if err != nil {
		t.Fatal(err)
	}
	m.must(setShardMapEnv(m.tick(), sm.Epoch, moved))
	p := m.update(id, 0, fsm.PhaseCopying, fsm.PhaseFlipped, a)
	if sm := m.shardMap(); p.GetState() != fsm.PlanCancelling || p.GetError() == "" || p.GetSteps()[0].GetPhase() != fsm.PhaseCopying || !sm.Equal(moved) {
		t.Fatalf("flip over a changed map: %v", p)
	}
	m.update(id, 0, fsm.PhaseCopying, fsm.PhaseRollingBack, 0)
	if p := m.update(id, 0, fsm.PhaseRollingBack, fsm.PhaseRolledBack, 0); p.GetState() != fsm.PlanFailed {
		t.Fatalf("plan %v", p)
	}
}

// The meta group keeps the last KeptPlans finished plans, and the running
// one.
func TestKeptPlans(t *testing.T) {
	m := newPlanMeta(t)
	var ids []uint64
	finished := func() (n int) {
		for _, p := range m.f.Plans() {
			if s := p.GetState(); s != fsm.PlanRunning && s != fsm.PlanCancelling {
				n++
			}
		}
		return n
	}
	for i := range fsm.KeptPlans + 4 {
		id := m.create(addGroupStep(uint32(3+i), "n1"))
		ids = append(ids, id)
		if n := finished(); n > fsm.KeptPlans || n != min(i, fsm.KeptPlans) {
			t.Fatalf("after plan %d was made, %d finished plans kept, want %d", i, n, min(i, fsm.KeptPlans))
		}
		if i%2 == 0 {
			m.plan("cancel", m.apply(cancelPlanEnv(m.tick(), id)))
		} else {
			m.update(id, 0, fsm.PhasePending, fsm.PhaseDone, 0)
		}
		if n := finished(); n != min(i+1, fsm.KeptPlans) {
			t.Fatalf("after plan %d ended, %d finished plans kept, want %d", i, n, min(i+1, fsm.KeptPlans))
		}
	}
	var kept []uint64
	for _, p := range m.f.Plans() {
		kept = append(kept, p.GetId())
	}
	if want := ids[len(ids)-fsm.KeptPlans:]; !slices.Equal(kept, want) {
		t.Fatalf("kept plans %v, want the last %d: %v", kept, fsm.KeptPlans, want)
	}
	m.refused("cancel of a forgotten plan", cancelPlanEnv(0, ids[0]), fsm.ErrNoPlan)
	m.refused("update of a forgotten plan", updatePlanEnv(0, &raftcmdv1.UpdatePlan{Id: ids[1]}), fsm.ErrNoPlan)
	id := m.create(moveStep(1, 2, 0, 10))
	if ps := m.f.Plans(); len(ps) != fsm.KeptPlans+1 || ps[len(ps)-1].GetId() != id || finished() != fsm.KeptPlans {
		t.Fatalf("with a plan running, %d plans kept (%d finished)", len(ps), finished())
	}

	// Plans survive a snapshot.
	r := fsm.New(fsm.Options{})
	restoreFrom(t, r, snapshotBytes(t, m.f))
	got, want := r.Plans(), m.f.Plans()
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("restored plan %d: %v, want %v", i, got[i], want[i])
		}
	}
	if a, ok := r.ActivePlan(); !ok || a.GetId() != id {
		t.Fatal("the restored meta group lost the running plan")
	}
}

// Migration IDs of distinct steps of distinct plans are distinct.
func TestMigrationID(t *testing.T) {
	seen := map[uint64]bool{}
	for _, plan := range []uint64{1, 2, 1 << 20, 1<<47 + 3} {
		for _, step := range []int{0, 1, 2, 65535} {
			id := fsm.MigrationID(plan, step)
			if seen[id] || id>>16 != plan || int(id&0xFFFF) != step {
				t.Fatalf("MigrationID(%d, %d) = %d", plan, step, id)
			}
			seen[id] = true
		}
	}
}
