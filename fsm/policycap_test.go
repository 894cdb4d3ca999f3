package fsm_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// registerAt records node id at feature level.
func (a *applier) registerAt(id string, level uint32) {
	a.tb.Helper()
	a.apply(&raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_RegisterNode{RegisterNode: &raftcmdv1.RegisterNode{
		Id: id, RaftAddr: id + ":1", ApiAddr: id + ":2", FeatureLevel: level}}})
}

// numbered returns n token-bucket policies named prefix0, prefix1, ….
func numbered(prefix string, n int) []admission.Policy {
	out := make([]admission.Policy, n)
	for i := range out {
		out[i] = tokenBucket(fmt.Sprintf("%s%d", prefix, i), 10, time.Second, 0, 0)
	}
	return out
}

// The meta group refuses a PutPolicies that carries more than MaxPolicies
// or would take the registry past it, storing nothing; changing existing
// policies stays allowed.
func TestPutPoliciesCap(t *testing.T) {
	a := newApplier(t, fsm.Options{})

	err := a.putPoliciesErr(t0, numbered("big", fsm.MaxPolicies+1)...)
	if !errors.Is(err, fsm.ErrTooManyPolicies) {
		t.Fatalf("one apply of %d: %v, want ErrTooManyPolicies", fsm.MaxPolicies+1, err)
	}
	if n := len(a.f.Policies()); n != 0 {
		t.Fatalf("a refused apply stored %d policies", n)
	}

	a.putPolicies(t0, numbered("p", fsm.MaxPolicies-1)...)
	before := a.f.Policies()
	err = a.putPoliciesErr(t0, tokenBucket("p0", 20, time.Second, 0, 0), tokenBucket("new1", 1, time.Second, 0, 0), tokenBucket("new2", 1, time.Second, 0, 0))
	if !errors.Is(err, fsm.ErrTooManyPolicies) {
		t.Fatalf("registry past the cap: %v, want ErrTooManyPolicies", err)
	}
	if got := a.f.Policies(); !reflect.DeepEqual(got, before) {
		t.Fatal("a refused apply changed the registry")
	}
	a.putPolicies(t0, tokenBucket("p0", 20, time.Second, 0, 0), tokenBucket("new1", 1, time.Second, 0, 0))
	if n := len(a.f.Policies()); n != fsm.MaxPolicies {
		t.Fatalf("%d policies, want %d", n, fsm.MaxPolicies)
	}
	// Full: changes pass, additions do not.
	a.putPolicies(t0, tokenBucket("p1", 30, time.Second, 0, 0))
	if err := a.putPoliciesErr(t0, tokenBucket("new2", 1, time.Second, 0, 0)); !errors.Is(err, fsm.ErrTooManyPolicies) {
		t.Fatalf("full registry: %v, want ErrTooManyPolicies", err)
	}
}

// PoliciesChangedAt dates the last entry that changed the policy table:
// refused puts and other entries leave it; after a restore it is unknown
// until the next entry, which then counts as the change.
func TestPoliciesChangedAt(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	if at, ok := a.f.PoliciesChangedAt(); at != 0 || !ok {
		t.Fatalf("empty: %d, %v; want 0, known", at, ok)
	}
	a.putPolicies(t0, tokenBucket("a", 1, time.Second, 0, 0))
	put := a.index
	a.registerAt("n1", fsm.FeatureLevel)
	a.putPoliciesErr(t0, tokenBucket("Bad Name", 1, time.Second, 0, 0))
	a.mustAdmit(t0, "a", "k", 1)
	if at, ok := a.f.PoliciesChangedAt(); at != put || !ok {
		t.Fatalf("after other entries: %d, %v; want %d", at, ok, put)
	}
	a.apply(deletePoliciesEnv(t0, "a"))
	if at, _ := a.f.PoliciesChangedAt(); at != a.index {
		t.Fatalf("after a delete: %d, want %d", at, a.index)
	}
	restored := wrap(t, fsm.New(fsm.Options{}))
	restoreFrom(t, restored.f, snapshotBytes(t, a.f))
	if _, ok := restored.f.PoliciesChangedAt(); ok {
		t.Fatal("after a restore: known, want unknown")
	}
	restored.registerAt("n2", fsm.FeatureLevel)
	if at, ok := restored.f.PoliciesChangedAt(); at != restored.index || !ok {
		t.Fatalf("after the entry following a restore: %d, %v; want %d", at, ok, restored.index)
	}
}

func deletePoliciesEnv(now int64, names ...string) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_DeletePolicies{DeletePolicies: &raftcmdv1.DeletePolicies{Names: names}}}
}
