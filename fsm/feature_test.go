package fsm_test

import (
	"testing"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// The lowest registered feature level follows re-registrations (a later
// binary registers a higher level) and survives a snapshot.
func TestMinFeatureLevel(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	if got := a.f.MinFeatureLevel(); got != 0 {
		t.Fatalf("no nodes: level %d, want 0", got)
	}
	const later = fsm.FeatureLevel + 1
	a.registerAt("b", later)
	a.registerAt("a", fsm.FeatureLevel)
	for _, f := range []*fsm.FSM{a.f, restoredCopy(t, a.f)} {
		if got := f.MinFeatureLevel(); got != fsm.FeatureLevel {
			t.Fatalf("one node at %d: level %d", fsm.FeatureLevel, got)
		}
	}
	a.registerAt("a", later)
	for _, f := range []*fsm.FSM{a.f, restoredCopy(t, a.f)} {
		if got := f.MinFeatureLevel(); got != later {
			t.Fatalf("all at %d: level %d", later, got)
		}
	}
}

// restoredCopy is a new FSM restored from f's snapshot.
func restoredCopy(tb testing.TB, f *fsm.FSM) *fsm.FSM {
	tb.Helper()
	r := fsm.New(fsm.Options{})
	restoreFrom(tb, r, snapshotBytes(tb, f))
	return r
}

// RemoveNode deletes a registered node (and nothing for an unknown one):
// the lowest feature level no longer counts it.
func TestRemoveNode(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.registerAt("a", fsm.FeatureLevel+1)
	a.registerAt("b", fsm.FeatureLevel)
	remove := func(id string) {
		if res := a.apply(&raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_RemoveNode{RemoveNode: &raftcmdv1.RemoveNode{Id: id}}}); res != nil {
			t.Fatalf("RemoveNode %s: %v", id, res)
		}
	}
	remove("ghost")
	if len(a.f.Nodes()) != 2 {
		t.Fatalf("%d nodes after removing an unknown one", len(a.f.Nodes()))
	}
	remove("b")
	if _, ok := a.f.Node("b"); ok || len(a.f.Nodes()) != 1 {
		t.Fatalf("nodes after the removal: %v", a.f.Nodes())
	}
	if got := a.f.MinFeatureLevel(); got != fsm.FeatureLevel+1 {
		t.Fatalf("level %d after b left, want %d", got, fsm.FeatureLevel+1)
	}
}
