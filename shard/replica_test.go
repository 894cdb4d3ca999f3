package shard

import (
	"errors"
	"slices"
	"testing"

	"github.com/quorate/quorate/admission"
)

func TestInitialMapFoundersAreTheReplicas(t *testing.T) {
	m, err := formedMap([]string{"a", "b", "c", "d"}, 6, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range m.Groups {
		if !slices.Equal(g.Founders, g.Replicas) {
			t.Fatalf("group %d: founders %v, replicas %v", g.ID, g.Founders, g.Replicas)
		}
	}
}

func TestMoveReplica(t *testing.T) {
	m, err := formedMap([]string{"a", "b", "c", "d"}, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	g := m.Groups[0]
	from := g.Replicas[0]
	to := ""
	for _, n := range []string{"a", "b", "c", "d"} {
		if !slices.Contains(g.Replicas, n) {
			to = n
		}
	}
	moved, err := m.MoveReplica(g.ID, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if moved.Epoch != m.Epoch+1 {
		t.Fatalf("epoch %d, want %d", moved.Epoch, m.Epoch+1)
	}
	mg, _ := moved.Group(g.ID)
	if mg.Replicas[0] != to || slices.Contains(mg.Replicas, from) || len(mg.Replicas) != 3 {
		t.Fatalf("replicas %v after moving %s → %s (were %v)", mg.Replicas, from, to, g.Replicas)
	}
	if slices.Contains(mg.Founders, from) || slices.Contains(mg.Founders, to) || len(mg.Founders) != 2 {
		t.Fatalf("founders %v: the moved-out node must leave, the new one is no founder", mg.Founders)
	}
	if !slices.Equal(m.Groups[0].Replicas, g.Replicas) || !slices.Contains(m.Groups[0].Founders, from) {
		t.Fatal("MoveReplica changed its receiver")
	}
	if err := moved.Validate(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(moved.Ranges, m.Ranges) {
		t.Fatal("slot ranges changed")
	}

	for _, tc := range []struct {
		group    GroupID
		from, to string
		field    string
	}{
		{99, from, to, "group"},
		{g.ID, to, from, "from"},
		{g.ID, from, "", "to"},
		{g.ID, from, g.Replicas[1], "to"},
	} {
		_, err := m.MoveReplica(tc.group, tc.from, tc.to)
		var fe *admission.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("MoveReplica(%d, %q, %q): %v, want a FieldError on %s", tc.group, tc.from, tc.to, err, tc.field)
		}
	}
}

func TestValidateFounders(t *testing.T) {
	m, _ := formedMap([]string{"a", "b", "c"}, 1, 3)
	bad := m.Clone()
	bad.Groups[0].Founders = []string{"a", "z"}
	var fe *admission.FieldError
	if err := bad.Validate(); !errors.As(err, &fe) || fe.Field != "Groups[0].Founders[1]" {
		t.Fatalf("a founder that is no replica: %v", err)
	}
	bad.Groups[0].Founders = []string{"a", "a"}
	if err := bad.Validate(); !errors.As(err, &fe) || fe.Field != "Groups[0].Founders[1]" {
		t.Fatalf("a founder twice: %v", err)
	}
	if m.Equal(bad) {
		t.Fatal("maps with other founders compare equal")
	}
}

func TestDrain(t *testing.T) {
	nodes := []string{"a", "b", "c", "d", "e"}
	m, err := formedMap(nodes[:4], 8, 3)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Drain("b", nodes)
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Validate(); err != nil {
		t.Fatal(err)
	}
	if out.Epoch != m.Epoch+1 {
		t.Fatalf("epoch %d", out.Epoch)
	}
	load := map[string]int{}
	for i, g := range out.Groups {
		if slices.Contains(g.Replicas, "b") || slices.Contains(g.Founders, "b") {
			t.Fatalf("group %d still lists b: %v / %v", g.ID, g.Replicas, g.Founders)
		}
		if len(g.Replicas) != 3 {
			t.Fatalf("group %d has %d replicas", g.ID, len(g.Replicas))
		}
		was := m.Groups[i].Replicas
		for j, r := range g.Replicas {
			if was[j] != "b" && r != was[j] {
				t.Fatalf("group %d: replica %d changed %s → %s though it was not b's", g.ID, j, was[j], r)
			}
			load[r]++
		}
	}
	// b held 6 of 24 replicas: the fresh node e takes most, nobody ends far apart.
	lo, hi := 1<<30, 0
	for _, n := range []string{"a", "c", "d", "e"} {
		lo, hi = min(lo, load[n]), max(hi, load[n])
	}
	if hi-lo > 1 {
		t.Fatalf("replicas per node after the drain %v: spread %d, want ≤ 1", load, hi-lo)
	}
	var fe *admission.FieldError
	if _, err := out.Drain("b", nodes); !errors.Is(err, ErrNoChange) || !errors.As(err, &fe) || fe.Field != "node" {
		t.Fatalf("draining a node with no replicas: %v, want ErrNoChange on node", err)
	}
	small, _ := formedMap([]string{"a", "b", "c"}, 2, 3)
	if _, err := small.Drain("a", []string{"a", "b", "c"}); !errors.As(err, &fe) || fe.Field != "node" || errors.Is(err, ErrNoChange) {
		t.Fatalf("draining with nowhere to go: %v, want a FieldError on node", err)
	}
}

// formedMap is InitialMap with every group formed (Forming cleared), as the
// meta leader leaves it once the groups work.
func formedMap(nodes []string, groups, replicas int) (Map, error) {
	m, err := InitialMap(nodes, groups, replicas)
	for i := range m.Groups {
		m.Groups[i].Forming = false
	}
	return m, err
}

// A forming group's replicas do not change: MoveReplica and Drain refuse
// with ErrForming, Rebalance leaves the group alone.
func TestFormingGroupKeepsItsReplicas(t *testing.T) {
	m, err := InitialMap([]string{"a", "b", "c", "d"}, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range m.Groups {
		if !g.Forming {
			t.Fatalf("InitialMap's group %d is not forming", g.ID)
		}
	}
	if _, err := m.MoveReplica(1, m.Groups[0].Replicas[0], "d"); !errors.Is(err, ErrForming) {
		t.Fatalf("MoveReplica on a forming group: %v, want ErrForming", err)
	}
	if _, err := m.Drain(m.Groups[0].Replicas[0], []string{"a", "b", "c", "d"}); !errors.Is(err, ErrForming) {
		t.Fatalf("Drain of a forming group's replica: %v, want ErrForming", err)
	}
	grown, err := InitialMap([]string{"a", "b", "c"}, 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	grown.Groups[0].Forming = false
	out, changes, err := grown.Rebalance([]string{"a", "b", "c", "d", "e"})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range out.Groups[1:] {
		if !slices.Equal(g.Replicas, grown.Groups[i+1].Replicas) {
			t.Fatalf("Rebalance changed forming group %d: %v → %v (%v)", g.ID, grown.Groups[i+1].Replicas, g.Replicas, changes)
		}
	}
	if len(changes) == 0 {
		t.Fatal("Rebalance changed nothing in the formed group")
	}
}

// Draining cordons the node: a second drain does not put replicas back on
// the first, nor do Rebalance and LeastLoaded, until it is uncordoned; a
// drained node drained again is no change.
func TestDrainCordons(t *testing.T) {
	nodes := []string{"a", "b", "c", "d", "e"}
	m, err := formedMap(nodes, 5, 3)
	if err != nil {
		t.Fatal(err)
	}
	d1, err := m.Drain("a", nodes)
	if err != nil {
		t.Fatal(err)
	}
	if !d1.IsCordoned("a") {
		t.Fatal("a drained but not cordoned")
	}
	d2, err := d1.Drain("b", nodes)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range d2.Groups {
		if slices.Contains(g.Replicas, "a") || slices.Contains(g.Replicas, "b") {
			t.Fatalf("group %d on %v after draining a then b", g.ID, g.Replicas)
		}
	}
	if _, err := d2.Drain("a", nodes); !errors.Is(err, ErrNoChange) {
		t.Fatalf("draining a drained node again: %v, want ErrNoChange", err)
	}
	if got := d2.LeastLoaded(nodes, 3); slices.Contains(got, "a") || slices.Contains(got, "b") {
		t.Fatalf("LeastLoaded = %v, includes a cordoned node", got)
	}
	if r, _, _ := d2.Rebalance(nodes); slices.ContainsFunc(r.Groups, func(g Group) bool { return slices.Contains(g.Replicas, "a") }) {
		t.Fatal("Rebalance placed a replica on a cordoned node")
	}
	u := d2.Cordon("a", false)
	if u.IsCordoned("a") || u.Epoch != d2.Epoch+1 || !u.IsCordoned("b") {
		t.Fatalf("uncordoned a: cordoned %v at epoch %d (was %d)", u.Cordoned, u.Epoch, d2.Epoch)
	}
	if same := u.Cordon("a", false); same.Epoch != u.Epoch {
		t.Fatal("uncordoning an uncordoned node changed the map")
	}
	if r, changes, _ := u.Rebalance(nodes); !slices.ContainsFunc(r.Groups, func(g Group) bool { return slices.Contains(g.Replicas, "a") }) {
		t.Fatalf("Rebalance after uncordoning a gave it nothing: %v", changes)
	}
	bad := u.Clone()
	bad.Cordoned = []string{"z", "b"}
	if err := bad.Validate(); err == nil {
		t.Fatal("an unsorted Cordoned validated")
	}
}
