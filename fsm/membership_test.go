package fsm_test

import (
	"errors"
	"testing"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// A registration without a level is refused, into an empty registry too,
// as is one without an ID; the registry is unchanged.
func TestRegisterNodeRefusesWhatNoNodeSends(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	reg := func(id string, level uint32) any {
		return a.apply(&raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_RegisterNode{RegisterNode: &raftcmdv1.RegisterNode{
			Id: id, RaftAddr: id + ":1", ApiAddr: id + ":2", FeatureLevel: level}}})
	}
	if err, _ := reg("a", 0).(error); !errors.Is(err, fsm.ErrBadRegistration) {
		t.Fatalf("register a at level 0 into an empty registry: %v, want ErrBadRegistration", err)
	}
	if nodes := a.f.Nodes(); len(nodes) != 0 {
		t.Fatalf("registry after a refusal: %v", nodes)
	}
	if res := reg("a", fsm.FeatureLevel); res != nil {
		t.Fatalf("register a: %v", res)
	}
	for _, tc := range []struct {
		id    string
		level uint32
	}{{"b", 0}, {"a", 0}, {"", fsm.FeatureLevel}} {
		err, _ := reg(tc.id, tc.level).(error)
		if !errors.Is(err, fsm.ErrBadRegistration) {
			t.Fatalf("register %q at level %d: %v, want ErrBadRegistration", tc.id, tc.level, err)
		}
	}
	if nodes := a.f.Nodes(); len(nodes) != 1 || nodes[0].FeatureLevel != fsm.FeatureLevel {
		t.Fatalf("registry after refusals: %v", nodes)
	}
	if got := a.f.MinFeatureLevel(); got != fsm.FeatureLevel {
		t.Fatalf("level %d, want %d", got, fsm.FeatureLevel)
	}
}
