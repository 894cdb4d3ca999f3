package jepsen

import (
	"math/rand/v2"
	"slices"
	"testing"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// "mixed" is every family but move and slots, which are only ever named.
func TestParseFamiliesKeepsMoveOutOfMixed(t *testing.T) {
	for in, want := range map[string][]string{
		"mixed":       Families,
		"mixed,move":  append(slices.Clone(Families), FamilyMove),
		"move,kill":   {FamilyKill, FamilyMove},
		"slots,kill":  {FamilyKill, FamilySlots},
		"none":        nil,
		"move":        {FamilyMove},
		"kill,,pause": {FamilyKill, FamilyPause},
	} {
		got, err := ParseFamilies(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		w := slices.Clone(want)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("%q: %v, want %v", in, got, w)
		}
	}
	if _, err := ParseFamilies("teleport"); err == nil {
		t.Error("an unknown family was accepted")
	}
}

func TestParseMoveAction(t *testing.T) {
	if m, ok := parseMoveAction("move slots [0,512) 1→3"); !ok || m != (moveAction{0, 512, 1, 3}) {
		t.Errorf("got %+v %v", m, ok)
	}
	for _, s := range []string{"add group 4 on [n1 n2 n3]", "move slots [9,9) 1→2", ""} {
		if _, ok := parseMoveAction(s); ok {
			t.Errorf("%q parsed as a move", s)
		}
	}
}

func shardGroups(slots ...uint32) []*quoratev1.ShardGroupStatus {
	var out []*quoratev1.ShardGroupStatus
	for i, s := range slots {
		out = append(out, &quoratev1.ShardGroupStatus{Id: uint32(i + 1), Slots: s})
	}
	return out
}

func donePlan(id uint64, actions ...string) *quoratev1.PlanStatus {
	p := &quoratev1.PlanStatus{Id: id, State: "done"}
	for _, a := range actions {
		p.Steps = append(p.Steps, &quoratev1.PlanStepStatus{Action: a, Phase: "done"})
	}
	return p
}

// The slot model starts from the first map's even split, follows the
// plans' moves, and is dropped when the slot counts disagree.
func TestSlotModel(t *testing.T) {
	var m slotModel
	m.sync(shardGroups(1024, 1024, 1024, 1024), nil)
	if m.owner == nil || m.owner[0] != 1 || m.owner[1023] != 1 || m.owner[1024] != 2 || m.owner[4095] != 4 {
		t.Fatalf("initial model wrong: broken=%v", m.broken)
	}
	rolledBack := &quoratev1.PlanStatus{Id: 3, State: "cancelled", Steps: []*quoratev1.PlanStepStatus{
		{Action: "move slots [0,100) 1→2", Phase: "rolled back"}}}
	m.sync(shardGroups(1024-10, 1024+10, 1024, 1024), []*quoratev1.PlanStatus{donePlan(2, "move slots [1014,1024) 1→2"), rolledBack})
	if m.owner == nil || m.owner[1014] != 2 || m.owner[0] != 1 || m.seen != 3 {
		t.Fatalf("after a move: owner[1014]=%d seen=%d broken=%v", m.owner[1014], m.seen, m.broken)
	}
	// A run around a slot stays within its group's range.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		s := rng.IntN(4096)
		n := 8 + rng.IntN(249)
		start, end := m.runAround(rng, s, n)
		if start > s || end <= s || end-start > n || end-start < 1 {
			t.Fatalf("run [%d,%d) for slot %d, size %d", start, end, s, n)
		}
		for x := start; x < end; x++ {
			if m.owner[x] != m.owner[s] {
				t.Fatalf("run [%d,%d) around slot %d crosses into group %d", start, end, s, m.owner[x])
			}
		}
	}
	if !m.agrees {
		t.Fatal("the model disagrees with the counts it follows")
	}
	// Counts that disagree (a view that lags, or a plan it never saw):
	// not to be used until they agree again.
	m.sync(shardGroups(1024, 1024, 1024, 1024), nil)
	if m.agrees {
		t.Fatal("a model that disagrees with the counts is taken as agreeing")
	}
	m.sync(shardGroups(1024-10, 1024+10, 1024, 1024), nil)
	if !m.agrees || m.owner[1014] != 2 {
		t.Fatal("the model does not agree again with counts that match it")
	}
	// A map some plan already changed is not taken for the first one.
	var m2 slotModel
	m2.sync(shardGroups(1014, 1034, 1024, 1024), []*quoratev1.PlanStatus{donePlan(1, "move slots [1014,1024) 1→2")})
	if m2.owner != nil || m2.agrees {
		t.Fatal("a model was built over a map a plan had changed")
	}
}

func member(id, suffrage string, groups ...*quoratev1.GroupState) *quoratev1.MemberStatus {
	return &quoratev1.MemberStatus{Id: id, Suffrage: suffrage, Status: &quoratev1.NodeState{Id: id, Groups: groups}}
}

func TestReplicaProblems(t *testing.T) {
	gs := func(role, leader string) *quoratev1.GroupState {
		return &quoratev1.GroupState{Id: 1, Role: role, LeaderId: leader}
	}
	st := &quoratev1.ClusterStatusResponse{
		Members: []*quoratev1.MemberStatus{
			member("n2", "voter", gs("follower", "n4")), member("n4", "voter", gs("leader", "n4")), member("n5", "voter", gs("follower", "n4")),
		},
		ShardMap: &quoratev1.ShardMapStatus{Groups: []*quoratev1.ShardGroupStatus{{Id: 1, Replicas: []string{"n2", "n4", "n5"}, Slots: 4096}}},
	}
	live := []string{"n2", "n4", "n5"}
	if p := replicaProblems(st, live, live, 3); len(p) != 0 {
		t.Fatalf("a whole cluster has problems: %v", p)
	}
	if p := replicaProblems(st, live, []string{"n2", "n4"}, 3); len(p) == 0 {
		t.Error("a replica off the live nodes went unnoticed")
	}
	st.Members[2].Status.Groups[0].LeaderId = "n2"
	if p := replicaProblems(st, live, live, 3); len(p) == 0 {
		t.Error("two leaders went unnoticed")
	}
	st.Members[2].Status.Groups[0] = gs("candidate", "")
	if p := replicaProblems(st, live, live, 3); len(p) == 0 {
		t.Error("a candidate replica went unnoticed")
	}
	st.Members[2].Status = nil
	if p := memberProblems(st, live); len(p) == 0 {
		t.Error("a member not answering went unnoticed")
	}
	if p := memberProblems(st, []string{"n2", "n4"}); len(p) == 0 {
		t.Errorf("an extra member went unnoticed: %v", p)
	}
}

// Grudges drawn over the members' positions land on their indexes, and
// other() draws as otherNode over the members.
func TestGrudgeOnLive(t *testing.T) {
	g := onLive(Grudge{0: {1}, 2: {0}}, []int{1, 3, 4})
	if !slices.Equal(g[1], []int{3}) || !slices.Equal(g[4], []int{1}) || len(g) != 2 {
		t.Errorf("got %v", g)
	}
	c := &Cluster{}
	live := []int{0, 1, 2}
	c.live.Store(&live)
	a, b := rand.New(rand.NewPCG(5, 6)), rand.New(rand.NewPCG(5, 6))
	for range 50 {
		if x, y := c.other(a, 1), otherNode(b, 1, 3); x != y {
			t.Fatalf("other drew %d, otherNode %d", x, y)
		}
	}
}
