package main

import (
	"strings"
	"testing"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Status lists each group's frozen slot ranges with their plan, step and
// plan state, as the group's leader reports them: a follower's stale view
// is not listed, and a group whose leader did not answer is listed from a
// replica that did. Nothing frozen, no section.
func TestAdminStatusListsFrozenSlots(t *testing.T) {
	frozen := func(start, end uint32, plan uint64, step uint32, state string) *quoratev1.FrozenSlots {
		return &quoratev1.FrozenSlots{Start: start, End: end, Plan: plan, Step: step, Migration: plan<<16 | uint64(step), PlanState: state}
	}
	group := func(id uint32, role string, f ...*quoratev1.FrozenSlots) *quoratev1.GroupState {
		return &quoratev1.GroupState{Id: id, Role: role, Frozen: f}
	}
	s := &quoratev1.ClusterStatusResponse{AnsweredBy: "a", LeaderId: "a",
		Members: []*quoratev1.MemberStatus{
			member("a", group(1, "leader", frozen(0, 4096, 9, 0, "unknown")), group(2, "follower", frozen(10, 20, 3, 1, "done"))),
			member("b", group(1, "follower"), group(2, "leader"), group(3, "follower", frozen(4096, 8192, 12, 2, "running"))),
		},
		ShardMap: &quoratev1.ShardMapStatus{Epoch: 3, Groups: []*quoratev1.ShardGroupStatus{{Id: 1, Slots: 4096}, {Id: 2}, {Id: 3, Slots: 4096}}}}
	var b strings.Builder
	if err := writeClusterStatus(&b, s); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	_, section, ok := strings.Cut(out, "\nfrozen slots")
	if !ok {
		t.Fatalf("no frozen-slots section:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(section), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[1], "GROUP") {
		t.Fatalf("want a heading and 2 rows:\n%s", section)
	}
	for i, want := range [][]string{{"1", "[0,4096)", "9", "0", "589824", "unknown"}, {"3", "[4096,8192)", "12", "2", "786434", "running"}} {
		if got := strings.Fields(lines[2+i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("row %d = %q, want %q", i, got, want)
		}
	}

	var none strings.Builder
	s.Members = []*quoratev1.MemberStatus{member("a", group(1, "leader"))}
	if err := writeClusterStatus(&none, s); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(none.String(), "frozen") {
		t.Fatalf("a section with nothing frozen:\n%s", none.String())
	}
}
