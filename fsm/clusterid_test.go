package fsm_test

import (
	"errors"
	"testing"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// The cluster ID is set once in the meta group, survives a snapshot, and
// is refused when malformed, different, or sent to a data group.
func TestSetClusterID(t *testing.T) {
	const id, other = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	set := func(a *applier, id string) error {
		err, _ := a.apply(&raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_SetClusterId{
			SetClusterId: &raftcmdv1.SetClusterID{Id: id}}}).(error)
		return err
	}
	a := newApplier(t, fsm.Options{})
	for _, bad := range []string{"", "0123", "0123456789ABCDEF0123456789ABCDEF", "0123456789abcdef0123456789abcdeg"} {
		if err := set(a, bad); !errors.Is(err, fsm.ErrClusterID) {
			t.Fatalf("ID %q: %v, want ErrClusterID", bad, err)
		}
	}
	if err := set(a, id); err != nil || a.f.ClusterID() != id {
		t.Fatalf("set: %v, ID %q", err, a.f.ClusterID())
	}
	if err := set(a, id); err != nil {
		t.Fatalf("the same ID again: %v", err)
	}
	if err := set(a, other); !errors.Is(err, fsm.ErrClusterID) || a.f.ClusterID() != id {
		t.Fatalf("another ID: %v, ID now %q", err, a.f.ClusterID())
	}
	restored := fsm.New(fsm.Options{})
	restoreFrom(t, restored, snapshotBytes(t, a.f))
	if got := restored.ClusterID(); got != id {
		t.Fatalf("restored ID %q, want %q", got, id)
	}
	if err := set(newApplier(t, fsm.Options{DataGroup: true}), id); !errors.Is(err, fsm.ErrNotMetaGroup) {
		t.Fatalf("data group: %v, want ErrNotMetaGroup", err)
	}
}
