package shard

import (
	"fmt"
	"testing"
)

// owner is one slot's entry in a brute-force per-slot table.
type owner struct {
	group GroupID
	epoch uint64
}

// slotTable expands m's ranges into one entry per slot, failing tb if a slot
// is covered twice or not at all.
func slotTable(tb testing.TB, m *Map) *[SlotCount]owner {
	tb.Helper()
	var t [SlotCount]owner
	var seen [SlotCount]int
	for _, a := range m.Ranges {
		for s := int(a.Range.Start); s < int(a.Range.End) && s < SlotCount; s++ {
			t[s] = owner{a.Group, a.Epoch}
			seen[s]++
		}
	}
	for s, n := range seen {
		if n != 1 {
			tb.Fatalf("slot %d is covered by %d ranges", s, n)
		}
	}
	return &t
}

func mustInitial(tb testing.TB, nodes, groups, replicas int) Map {
	tb.Helper()
	m, err := InitialMap(nodeNames(nodes), groups, replicas)
	if err != nil {
		tb.Fatalf("InitialMap(%d nodes, %d groups, %d replicas): %v", nodes, groups, replicas, err)
	}
	return m
}

func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%02d", i+1)
	}
	return out
}

// threeGroups is a small valid map: groups 1..3 over [0,1000), [1000,2000)
// at epoch 2, [2000,4096).
func threeGroups() Map {
	return Map{
		Epoch: 2,
		Groups: []Group{
			{ID: 1, Replicas: []string{"a", "b", "c"}},
			{ID: 2, Replicas: []string{"b", "c", "a"}},
			{ID: 3, Replicas: []string{"c", "a", "b"}},
		},
		Ranges: []Assignment{
			{Range: SlotRange{0, 1000}, Group: 1, Epoch: 1},
			{Range: SlotRange{1000, 2000}, Group: 2, Epoch: 2},
			{Range: SlotRange{2000, SlotCount}, Group: 3, Epoch: 1},
		},
	}
}

func TestValidateAcceptsValidMaps(t *testing.T) {
	m := threeGroups()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	// A group owning no slots is fine.
	m.Groups = append(m.Groups, Group{ID: 9, Replicas: []string{"a"}})
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	// So are adjacent ranges of one group at different epochs.
	m.Ranges[1].Group = 1
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateCatchesBadMaps(t *testing.T) {
	for _, c := range []struct {
		name  string
		field string
		bad   func(m *Map)
	}{
		{"zero epoch", "Epoch", func(m *Map) { m.Epoch = 0 }},
		{"meta group", "Groups[0].ID", func(m *Map) { m.Groups[0].ID = MetaGroup }},
		{"unsorted groups", "Groups[2].ID", func(m *Map) { m.Groups[1].ID, m.Groups[2].ID = 3, 2 }},
		{"duplicate group", "Groups[1].ID", func(m *Map) { m.Groups[1].ID = 1 }},
		{"no replicas", "Groups[1].Replicas", func(m *Map) { m.Groups[1].Replicas = nil }},
		{"empty node ID", "Groups[2].Replicas[1]", func(m *Map) { m.Groups[2].Replicas[1] = "" }},
		{"duplicate replica", "Groups[0].Replicas[2]", func(m *Map) { m.Groups[0].Replicas[2] = "a" }},
		{"no ranges", "Ranges", func(m *Map) { m.Ranges = nil }},
		{"gap at start", "Ranges[0].Range.Start", func(m *Map) { m.Ranges[0].Range.Start = 1 }},
		{"gap", "Ranges[1].Range.Start", func(m *Map) { m.Ranges[0].Range.End = 999 }},
		{"overlap", "Ranges[1].Range.Start", func(m *Map) { m.Ranges[0].Range.End = 1001 }},
		{"gap at end", "Ranges[2].Range.End", func(m *Map) { m.Ranges[2].Range.End = SlotCount - 1 }},
		{"beyond the end", "Ranges[2].Range.End", func(m *Map) { m.Ranges[2].Range.End = SlotCount + 1 }},
		{"empty range", "Ranges[1].Range.Start", func(m *Map) { m.Ranges[1].Range.End = 1000; m.Ranges[2].Range.Start = 1000 }},
		{"unsorted ranges", "Ranges[0].Range.Start", func(m *Map) {
			m.Ranges[0], m.Ranges[1] = m.Ranges[1], m.Ranges[0]
		}},
		{"unsorted later ranges", "Ranges[1].Range.Start", func(m *Map) {
			m.Ranges[1], m.Ranges[2] = m.Ranges[2], m.Ranges[1]
		}},
		{"unknown group", "Ranges[2].Group", func(m *Map) { m.Ranges[2].Group = 4 }},
		{"meta group owns slots", "Ranges[0].Group", func(m *Map) { m.Ranges[0].Group = MetaGroup }},
		{"zero range epoch", "Ranges[0].Epoch", func(m *Map) { m.Ranges[0].Epoch = 0 }},
		{"range epoch after map epoch", "Ranges[1].Epoch", func(m *Map) { m.Ranges[1].Epoch = 3 }},
		{"unmerged ranges", "Ranges[1]", func(m *Map) { m.Ranges[1].Group, m.Ranges[1].Epoch = 1, 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := threeGroups()
			c.bad(&m)
			err := m.Validate()
			if err == nil {
				t.Fatalf("Validate passed %+v", m)
			}
			wantField(t, err, c.field)
		})
	}
}

func TestLookupMatchesTable(t *testing.T) {
	maps := []Map{threeGroups(), mustInitial(t, 3, 8, 3), mustInitial(t, 7, 64, 3), mustInitial(t, 1, 1, 3), mustInitial(t, 4, SlotCount, 3)}
	// And a fragmented one: every 5th slot moved to group 2.
	frag := mustInitial(t, 3, 4, 3)
	for s := Slot(0); s < SlotCount; s += 5 {
		if next, err := frag.MoveSlots(SlotRange{s, s + 1}, 2); err == nil {
			frag = next
		}
	}
	maps = append(maps, frag)
	for i := range maps {
		m := &maps[i]
		if err := m.Validate(); err != nil {
			t.Fatalf("map %d: %v", i, err)
		}
		table := slotTable(t, m)
		for s := range Slot(SlotCount) {
			g, e, ok := m.Lookup(s)
			if !ok || (owner{g, e}) != table[s] {
				t.Fatalf("map %d (%d ranges): Lookup(%d) = %d, %d, %v; want %d, %d", i, len(m.Ranges), s, g, e, ok, table[s].group, table[s].epoch)
			}
		}
		for _, s := range []Slot{SlotCount, SlotCount + 1, 65535} {
			if g, e, ok := m.Lookup(s); ok {
				t.Errorf("map %d: Lookup(%d) = %d, %d, true beyond the last slot", i, s, g, e)
			}
		}
	}
	var empty Map
	if _, _, ok := empty.Lookup(0); ok {
		t.Error("Lookup on an empty map found a group")
	}
}

func TestGroupSlotsOwnedAndGroup(t *testing.T) {
	m := threeGroups()
	m.Groups = append(m.Groups, Group{ID: 7, Replicas: []string{"x"}})
	m.Ranges = append(m.Ranges[:1], Assignment{Range: SlotRange{1000, 1500}, Group: 2, Epoch: 2},
		Assignment{Range: SlotRange{1500, 2000}, Group: 1, Epoch: 2}, m.Ranges[2])
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	table := slotTable(t, &m)
	want := map[GroupID]int{}
	for _, g := range m.Groups {
		want[g.ID] = 0
	}
	for _, o := range table {
		want[o.group]++
	}
	got := m.GroupSlots()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("GroupSlots() = %v, want %v", got, want)
	}
	if got[7] != 0 || got[1] != 1500 {
		t.Errorf("GroupSlots() = %v: group 7 owns nothing, group 1 owns 1500", got)
	}
	for _, g := range m.Groups {
		owned := m.Owned(g.ID)
		n := 0
		for i, a := range owned {
			if a.Group != g.ID || (i > 0 && a.Range.Start < owned[i-1].Range.End) {
				t.Errorf("Owned(%d)[%d] = %+v", g.ID, i, a)
			}
			for s := a.Range.Start; s < a.Range.End; s++ {
				if table[s] != (owner{g.ID, a.Epoch}) {
					t.Errorf("Owned(%d) holds slot %d of %+v", g.ID, s, table[s])
				}
			}
			n += a.Range.Len()
		}
		if n != want[g.ID] {
			t.Errorf("Owned(%d) holds %d slots, want %d", g.ID, n, want[g.ID])
		}
		got, ok := m.Group(g.ID)
		if !ok || got.ID != g.ID || fmt.Sprint(got.Replicas) != fmt.Sprint(g.Replicas) {
			t.Errorf("Group(%d) = %+v, %v", g.ID, got, ok)
		}
	}
	for _, id := range []GroupID{MetaGroup, 4, 8, 1 << 31} {
		if g, ok := m.Group(id); ok {
			t.Errorf("Group(%d) = %+v, true for an unknown group", id, g)
		}
		if o := m.Owned(id); len(o) != 0 {
			t.Errorf("Owned(%d) = %v for an unknown group", id, o)
		}
	}
}

func TestCloneAndEqual(t *testing.T) {
	m := mustInitial(t, 5, 8, 3)
	c := m.Clone()
	if !m.Equal(c) || !c.Equal(m) {
		t.Fatal("a clone is not Equal to its map")
	}
	c.Groups[0].Replicas[0] = "elsewhere"
	c.Ranges[0].Epoch = 9
	if m.Groups[0].Replicas[0] == "elsewhere" || m.Ranges[0].Epoch == 9 {
		t.Fatal("Clone shares memory with its map")
	}
	for name, change := range map[string]func(*Map){
		"epoch":         func(x *Map) { x.Epoch++ },
		"replica":       func(x *Map) { x.Groups[3].Replicas[1] = "other" },
		"replica order": func(x *Map) { r := x.Groups[3].Replicas; r[0], r[1] = r[1], r[0] },
		"replica count": func(x *Map) { x.Groups[3].Replicas = x.Groups[3].Replicas[:2] },
		"group ID":      func(x *Map) { x.Groups[7].ID = 9 },
		"group count":   func(x *Map) { x.Groups = x.Groups[:7] },
		"range":         func(x *Map) { x.Ranges[0].Range.End--; x.Ranges[1].Range.Start-- },
		"range owner":   func(x *Map) { x.Ranges[2].Group = 1 },
		"range epoch":   func(x *Map) { x.Ranges[2].Epoch = 0 },
	} {
		x := m.Clone()
		change(&x)
		if m.Equal(x) || x.Equal(m) {
			t.Errorf("maps differing in %s are Equal", name)
		}
	}
	var a, b Map
	b.Groups, b.Ranges = []Group{}, []Assignment{}
	if !a.Equal(b) {
		t.Error("nil and empty slices differ")
	}
	if z := a.Clone(); !z.Equal(a) {
		t.Error("the clone of a zero map differs from it")
	}
}

func BenchmarkLookup(b *testing.B) {
	frag := mustInitial(b, 5, 16, 3)
	for s := Slot(1); s < SlotCount; s += 4 { // ~2k ranges
		next, err := frag.MoveSlots(SlotRange{s, s + 2}, GroupID(int(s)%16+1))
		if err == nil {
			frag = next
		}
	}
	for _, c := range []struct {
		name string
		m    Map
	}{
		{"8groups", mustInitial(b, 3, 8, 3)},
		{"64groups", mustInitial(b, 7, 64, 3)},
		{fmt.Sprintf("%dranges", len(frag.Ranges)), frag},
	} {
		b.Run(c.name, func(b *testing.B) {
			var sink GroupID
			s := Slot(0)
			for b.Loop() {
				g, _, _ := c.m.Lookup(s)
				sink ^= g
				s = (s + 997) % SlotCount
			}
			_ = sink
		})
	}
}
