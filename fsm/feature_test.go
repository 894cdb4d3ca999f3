package fsm_test

import (
	"testing"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// The lowest registered feature level follows re-registrations and
// survives a snapshot.
func TestMinFeatureLevel(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	if got := a.f.MinFeatureLevel(); got != 0 {
		t.Fatalf("no nodes: level %d, want 0", got)
	}
	reg := func(id string, level uint32) {
		a.apply(&raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_RegisterNode{RegisterNode: &raftcmdv1.RegisterNode{
			Id: id, RaftAddr: id + ":1", ApiAddr: id + ":2", FeatureLevel: level}}})
	}
	reg("b", 0) // before levels: accepted while no registered node is at FeatureClusterID
	reg("a", fsm.FeatureLevel)
	if got := a.f.MinFeatureLevel(); got != 0 {
		t.Fatalf("one node at 0: level %d", got)
	}
	restored := fsm.New(fsm.Options{})
	restoreFrom(t, restored, snapshotBytes(t, a.f))
	if got := restored.MinFeatureLevel(); got != 0 {
		t.Fatalf("restored: level %d, want 0", got)
	}
	reg("b", fsm.FeatureLevel)
	if got := a.f.MinFeatureLevel(); got != fsm.FeatureLevel {
		t.Fatalf("all current: level %d, want %d", got, fsm.FeatureLevel)
	}
	restored = fsm.New(fsm.Options{})
	restoreFrom(t, restored, snapshotBytes(t, a.f))
	if got := restored.MinFeatureLevel(); got != fsm.FeatureLevel {
		t.Fatalf("restored: level %d, want %d", got, fsm.FeatureLevel)
	}
}

// RemoveNode deletes a registered node (and nothing for an unknown one):
// the lowest feature level no longer counts it.
func TestRemoveNode(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	for _, nd := range []struct {
		id    string
		level uint32
	}{{"old", 0}, {"a", fsm.FeatureLevel}} {
		a.apply(&raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_RegisterNode{RegisterNode: &raftcmdv1.RegisterNode{
			Id: nd.id, RaftAddr: nd.id + ":1", ApiAddr: nd.id + ":2", FeatureLevel: nd.level}}})
	}
	remove := func(id string) {
		if res := a.apply(&raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_RemoveNode{RemoveNode: &raftcmdv1.RemoveNode{Id: id}}}); res != nil {
			t.Fatalf("RemoveNode %s: %v", id, res)
		}
	}
	remove("ghost")
	if len(a.f.Nodes()) != 2 {
		t.Fatalf("%d nodes after removing an unknown one", len(a.f.Nodes()))
	}
	remove("old")
	if _, ok := a.f.Node("old"); ok || len(a.f.Nodes()) != 1 {
		t.Fatalf("nodes after the removal: %v", a.f.Nodes())
	}
	if got := a.f.MinFeatureLevel(); got != fsm.FeatureLevel {
		t.Fatalf("level %d after the old node left, want %d", got, fsm.FeatureLevel)
	}
}
