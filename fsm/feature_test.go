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
	reg("a", fsm.FeatureLevel)
	reg("b", 0)
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
