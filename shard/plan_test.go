package shard

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/quorate/quorate/admission"
)

// checkPlacement fails tb unless placed holds groups groups of
// min(replicas, nodes) distinct known nodes each, with per-node replica
// counts and preferred-leader counts each differing by at most 1.
func checkPlacement(tb testing.TB, nodes []string, groups, replicas int, placed [][]string) {
	tb.Helper()
	what := fmt.Sprintf("%d nodes, %d groups, %d replicas", len(nodes), groups, replicas)
	if len(placed) != groups {
		tb.Fatalf("%s: %d groups placed", what, len(placed))
	}
	r := min(replicas, len(nodes))
	total, leaders := map[string]int{}, map[string]int{}
	for _, n := range nodes {
		total[n], leaders[n] = 0, 0
	}
	for i, g := range placed {
		if len(g) != r {
			tb.Fatalf("%s: group %d has %d replicas %v, want %d", what, i+1, len(g), g, r)
		}
		for j, n := range g {
			if _, ok := total[n]; !ok {
				tb.Fatalf("%s: group %d has unknown node %q", what, i+1, n)
			}
			if slices.Contains(g[:j], n) {
				tb.Fatalf("%s: group %d has node %q twice: %v", what, i+1, n, g)
			}
			total[n]++
		}
		leaders[g[0]]++
	}
	spread := func(counts map[string]int) (lo, hi int) {
		lo, hi = groups*r, 0
		for _, c := range counts {
			lo, hi = min(lo, c), max(hi, c)
		}
		return lo, hi
	}
	if lo, hi := spread(total); hi-lo > 1 {
		tb.Errorf("%s: replicas per node range %d..%d: %v", what, lo, hi, total)
	}
	if lo, hi := spread(leaders); hi-lo > 1 {
		tb.Errorf("%s: preferred leaders per node range %d..%d: %v", what, lo, hi, leaders)
	}
}

func TestInitialMap(t *testing.T) {
	for _, c := range []struct{ nodes, groups int }{{3, 8}, {5, 8}, {3, 1}, {4, 16}, {7, 64}} {
		t.Run(fmt.Sprintf("%dnodes_%dgroups", c.nodes, c.groups), func(t *testing.T) {
			nodes := nodeNames(c.nodes)
			m, err := InitialMap(nodes, c.groups, 3)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Validate(); err != nil {
				t.Fatal(err)
			}
			if m.Epoch != 1 || len(m.Groups) != c.groups {
				t.Fatalf("Epoch %d, %d groups", m.Epoch, len(m.Groups))
			}
			placed := make([][]string, len(m.Groups))
			for i, g := range m.Groups {
				if g.ID != GroupID(i+1) {
					t.Fatalf("Groups[%d].ID = %d, want %d", i, g.ID, i+1)
				}
				placed[i] = g.Replicas
			}
			checkPlacement(t, nodes, c.groups, 3, placed)
			table := slotTable(t, &m) // every slot in exactly one range
			counts := map[GroupID]int{}
			for s, o := range table {
				if _, ok := m.Group(o.group); !ok || o.epoch != 1 {
					t.Fatalf("slot %d: group %d epoch %d", s, o.group, o.epoch)
				}
				counts[o.group]++
			}
			lo, hi := SlotCount, 0
			for _, g := range m.Groups {
				lo, hi = min(lo, counts[g.ID]), max(hi, counts[g.ID])
			}
			if hi-lo > 1 {
				t.Errorf("slots per group range %d..%d", lo, hi)
			}
			t.Logf("slots per group %d..%d; replicas of group 1: %v", lo, hi, m.Groups[0].Replicas)
		})
	}
}

// PlaceReplicas keeps its balance promises over a sweep of cluster shapes,
// including more replicas than nodes.
func TestPlaceReplicasSweep(t *testing.T) {
	for n := 1; n <= 12; n++ {
		nodes := nodeNames(n)
		for replicas := 1; replicas <= 6; replicas++ {
			for groups := 1; groups <= 3*n+2; groups++ {
				checkPlacement(t, nodes, groups, replicas, PlaceReplicas(nodes, groups, replicas))
			}
			checkPlacement(t, nodes, 1000, replicas, PlaceReplicas(nodes, 1000, replicas))
		}
	}
}

func TestPlaceReplicasIgnoresNodeOrder(t *testing.T) {
	nodes := nodeNames(7)
	want := PlaceReplicas(nodes, 20, 3)
	shuffled := []string{nodes[4], nodes[0], nodes[6], "", nodes[2], nodes[1], nodes[5], nodes[3], nodes[4]}
	if got := PlaceReplicas(shuffled, 20, 3); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("order, blanks and duplicates changed the placement:\n%v\n%v", got, want)
	}
	a, err := InitialMap(nodes, 20, 3)
	if err != nil {
		t.Fatal(err)
	}
	b, err := InitialMap(slices.Concat(nodes[3:], nodes[:3]), 20, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Equal(b) {
		t.Fatal("InitialMap depends on node order")
	}
	// Groups do not share memory: appending to one leaves the next alone.
	next := want[1][0]
	_ = append(want[0], "x")
	if want[1][0] != next {
		t.Fatal("groups share a backing array past their length")
	}
	for _, c := range []struct {
		nodes            []string
		groups, replicas int
	}{{nil, 3, 3}, {[]string{""}, 3, 3}, {nodes, 0, 3}, {nodes, 3, 0}} {
		if got := PlaceReplicas(c.nodes, c.groups, c.replicas); got != nil {
			t.Errorf("PlaceReplicas(%q, %d, %d) = %v, want nil", c.nodes, c.groups, c.replicas, got)
		}
	}
}

func TestInitialMapRejectsBadInput(t *testing.T) {
	for _, c := range []struct {
		nodes            []string
		groups, replicas int
		field            string
	}{
		{nil, 8, 3, "nodes"},
		{[]string{"a", "", "c"}, 8, 3, "nodes[1]"},
		{[]string{"a", "b", "a"}, 8, 3, "nodes[2]"},
		{[]string{"a"}, 0, 3, "groups"},
		{[]string{"a"}, SlotCount + 1, 3, "groups"},
		{[]string{"a"}, 8, 0, "replicas"},
	} {
		m, err := InitialMap(c.nodes, c.groups, c.replicas)
		if err == nil {
			t.Errorf("InitialMap(%q, %d, %d) = %+v, want an error", c.nodes, c.groups, c.replicas, m)
			continue
		}
		wantField(t, err, c.field)
	}
	m, err := InitialMap([]string{"solo"}, SlotCount, 3)
	if err != nil || m.Validate() != nil || len(m.Ranges) != SlotCount || len(m.Groups[0].Replicas) != 1 {
		t.Fatalf("one node, one slot per group: %v, %v", err, m.Validate())
	}
}

// checkMove fails tb unless after is before with exactly the slots of r
// given to group to (at epoch before.Epoch+1 for those that change owner).
func checkMove(tb testing.TB, before, after *Map, r SlotRange, to GroupID) {
	tb.Helper()
	if err := after.Validate(); err != nil {
		tb.Fatalf("after MoveSlots(%v, %d): %v", r, to, err)
	}
	if after.Epoch != before.Epoch+1 {
		tb.Fatalf("Epoch %d after %d", after.Epoch, before.Epoch)
	}
	if len(after.Groups) != len(before.Groups) {
		tb.Fatalf("groups changed: %v → %v", before.Groups, after.Groups)
	}
	for i := range before.Groups {
		if after.Groups[i].ID != before.Groups[i].ID || !slices.Equal(after.Groups[i].Replicas, before.Groups[i].Replicas) {
			tb.Fatalf("group changed: %v → %v", before.Groups[i], after.Groups[i])
		}
	}
	old, now := slotTable(tb, before), slotTable(tb, after)
	for s := range SlotCount {
		want := old[s]
		if r.Contains(Slot(s)) && want.group != to {
			want = owner{to, after.Epoch}
		}
		if now[s] != want {
			tb.Fatalf("MoveSlots(%v, %d): slot %d is %+v, want %+v (was %+v)", r, to, s, now[s], want, old[s])
		}
	}
}

func TestMoveSlots(t *testing.T) {
	m := mustInitial(t, 3, 4, 3) // [0,1024) [1024,2048) [2048,3072) [3072,4096)
	steps := []struct {
		r      SlotRange
		to     GroupID
		ranges int // after the move
	}{
		{SlotRange{100, 200}, 2, 6},                 // split group 1's range in three
		{SlotRange{200, 1024}, 2, 6},                // not merged with [100,200), moved an epoch earlier
		{SlotRange{0, SlotCount}, 3, 3},             // everything else to 3, 3's own range kept
		{SlotRange{SlotCount - 1, SlotCount}, 1, 4}, // the last slot alone
		{SlotRange{0, 1}, 4, 5},                     // the first slot alone
	}
	for _, st := range steps {
		before := m.Clone()
		next, err := m.MoveSlots(st.r, st.to)
		if err != nil {
			t.Fatalf("MoveSlots(%v, %d): %v", st.r, st.to, err)
		}
		if !m.Equal(before) {
			t.Fatalf("MoveSlots(%v, %d) changed its receiver", st.r, st.to)
		}
		checkMove(t, &before, &next, st.r, st.to)
		if len(next.Ranges) != st.ranges {
			t.Errorf("MoveSlots(%v, %d): %d ranges %v, want %d", st.r, st.to, len(next.Ranges), next.Ranges, st.ranges)
		}
		next.Groups[0].Replicas[0] = "scribble"
		if m.Groups[0].Replicas[0] == "scribble" {
			t.Fatal("the planned map shares memory with its source")
		}
		next.Groups[0].Replicas[0] = before.Groups[0].Replicas[0]
		m = next
	}
	t.Logf("after %d moves: %v", len(steps), m.Ranges)
}

// Slots that already belong to the destination keep their epoch, so moving a
// range that straddles the destination's own slots bumps only the others.
func TestMoveSlotsKeepsEpochsOfSlotsNotMoved(t *testing.T) {
	m := mustInitial(t, 3, 2, 3) // 1: [0,2048), 2: [2048,4096), epoch 1
	next, err := m.MoveSlots(SlotRange{1000, 3000}, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []Assignment{
		{SlotRange{0, 2048}, 1, 1},
		{SlotRange{2048, 3000}, 1, 2},
		{SlotRange{3000, SlotCount}, 2, 1},
	}
	if !slices.Equal(next.Ranges, want) {
		t.Fatalf("ranges %v, want %v", next.Ranges, want)
	}
	// Moving the same slots back gives them epoch 3; group 1's older range
	// stays at epoch 1.
	back, err := next.MoveSlots(SlotRange{2048, 3000}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if g, e, _ := back.Lookup(2500); g != 2 || e != 3 {
		t.Fatalf("slot 2500: group %d epoch %d, want group 2 epoch 3", g, e)
	}
	if g, e, _ := back.Lookup(3500); g != 2 || e != 1 {
		t.Fatalf("slot 3500: group %d epoch %d, want group 2 epoch 1", g, e)
	}
}

func TestMoveSlotsRejects(t *testing.T) {
	m := mustInitial(t, 3, 4, 3)
	for _, c := range []struct {
		r     SlotRange
		to    GroupID
		field string
	}{
		{SlotRange{10, 10}, 2, "r.Start"},
		{SlotRange{20, 10}, 2, "r.Start"},
		{SlotRange{4000, SlotCount + 1}, 2, "r.End"},
		{SlotRange{0, 10}, MetaGroup, "to"},
		{SlotRange{0, 10}, 5, "to"},
		{SlotRange{1024, 2048}, 2, "r"}, // 2 owns it already
		{SlotRange{1500, 1501}, 2, "r"},
	} {
		before := m.Clone()
		got, err := m.MoveSlots(c.r, c.to)
		if err == nil {
			t.Errorf("MoveSlots(%v, %d) = %v, want an error naming %s", c.r, c.to, got.Ranges, c.field)
			continue
		}
		fe := wantField(t, err, c.field)
		if (c.field == "r") != errors.Is(err, ErrNoChange) {
			t.Errorf("MoveSlots(%v, %d): %v: errors.Is(ErrNoChange) = %v", c.r, c.to, err, errors.Is(err, ErrNoChange))
		}
		if fe != nil {
			t.Logf("MoveSlots(%v, %d): %v", c.r, c.to, err)
		}
		if !m.Equal(before) {
			t.Fatalf("failed MoveSlots(%v, %d) changed its receiver", c.r, c.to)
		}
	}
	bad := m.Clone()
	bad.Ranges[1].Group = 9
	_, err := bad.MoveSlots(SlotRange{0, 1}, 2)
	wantField(t, err, "m.Ranges[1].Group")
}

// FuzzMoveSlots applies a sequence of moves decoded from the input to an
// initial map, checking after each one against a per-slot model: the result
// validates, only the moved slots changed owner, epochs are exact, and
// rejected moves are exactly those the model says are invalid or no-ops.
func FuzzMoveSlots(f *testing.F) {
	f.Add([]byte{3, 8, 0, 100, 0, 50, 2})
	f.Add([]byte{1, 1, 0, 0, 255, 255, 1, 0, 0, 0, 0, 1})
	f.Add([]byte{7, 64, 15, 255, 0, 1, 63, 0, 0, 16, 0, 9, 0, 16, 0, 9, 2, 0, 0, 0, 0, 70})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		groups := int(data[1])%64 + 1
		m := mustInitial(t, int(data[0])%7+1, groups, 3)
		ops := data[2:]
		ops = ops[:min(len(ops), 5*100)] // at most 100 moves: each costs a few per-slot tables
		for ; len(ops) >= 5; ops = ops[5:] {
			start := Slot(int(ops[0])<<8|int(ops[1])) % (SlotCount + 1)
			end := start + Slot(int(ops[2])<<8|int(ops[3]))%SlotCount // may pass SlotCount
			r, to := SlotRange{start, end}, GroupID(int(ops[4])%(groups+2))
			table := slotTable(t, &m)
			noop := true
			for s := int(start); s < int(end) && s < SlotCount; s++ {
				noop = noop && table[s].group == to
			}
			valid := start < end && end <= SlotCount && to != MetaGroup && int(to) <= groups && !noop
			before := m.Clone()
			next, err := m.MoveSlots(r, to)
			if !m.Equal(before) {
				t.Fatalf("MoveSlots(%v, %d) changed its receiver", r, to)
			}
			if (err == nil) != valid {
				t.Fatalf("MoveSlots(%v, %d) on %d groups: error %v, model says valid=%v", r, to, groups, err, valid)
			}
			if err != nil {
				if _, ok := err.(*admission.FieldError); !ok {
					t.Fatalf("error %v is a %T", err, err)
				}
				continue
			}
			checkMove(t, &m, &next, r, to)
			if len(next.Ranges) > SlotCount {
				t.Fatalf("%d ranges", len(next.Ranges))
			}
			m = next
		}
	})
}
