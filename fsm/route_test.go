package fsm_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// keyInSlotRange returns a key whose slot lies in r.
func keyInSlotRange(t *testing.T, r shard.SlotRange) string {
	t.Helper()
	for i := range 100000 {
		k := fmt.Sprintf("k%d", i)
		if r.Contains(shard.SlotOf(k)) {
			return k
		}
	}
	t.Fatalf("no key found in %v", r)
	return ""
}

func setOwnershipEnv(now int64, group shard.GroupID, epoch uint64, as ...shard.Assignment) *raftcmdv1.Envelope {
	c := &raftcmdv1.SetOwnership{Group: uint32(group), MapEpoch: epoch}
	for _, a := range as {
		c.Ranges = append(c.Ranges, fsm.AssignmentToProto(a))
	}
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_SetOwnership{SetOwnership: c}}
}

func routedAdmit(now int64, epoch uint64, policy, key string) *raftcmdv1.Envelope {
	env := admitEnv(now, policy, key, 1)
	env.MapEpoch = epoch
	return env
}

// A data group applies only commands for slots it owns, routed with a map
// at least as new as the epoch at which each slot got its owner.
func TestDataGroupRefusesSlotsItDoesNotOwnAndStaleEpochs(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("p", 10, time.Second, 10, 1))

	low := shard.SlotRange{Start: 0, End: 2048}
	high := shard.SlotRange{Start: 2048, End: shard.SlotCount}
	kLow, kHigh := keyInSlotRange(t, low), keyInSlotRange(t, high)

	// Without ownership (one group for the whole cluster) everything applies.
	a.mustAdmit(t0, "p", kHigh, 1)

	// Group 1 owns the low half since epoch 1, and (moved in at epoch 3) nothing else.
	if res := a.apply(setOwnershipEnv(t0, 1, 3, shard.Assignment{Range: low, Group: 1, Epoch: 1})); res != nil {
		t.Fatalf("SetOwnership: %v", res)
	}
	if _, ok := a.apply(routedAdmit(t0, 3, "p", kLow)).(*fsm.AdmitResult); !ok {
		t.Fatal("owned slot refused")
	}
	before := a.f.State("p", kHigh)
	err, _ := a.apply(routedAdmit(t0, 3, "p", kHigh)).(error)
	var re *fsm.RouteError
	if !errors.Is(err, fsm.ErrWrongGroup) || !errors.As(err, &re) || re.Slot != shard.SlotOf(kHigh) || re.Group != 1 {
		t.Fatalf("admit for a slot not owned: %v, want ErrWrongGroup for slot %d", err, shard.SlotOf(kHigh))
	}
	if after := a.f.State("p", kHigh); after.TAT != before.TAT {
		t.Fatalf("a refused command changed state: %+v → %+v", before, after)
	}
	for _, env := range []*raftcmdv1.Envelope{
		{NowUnixNano: t0, MapEpoch: 3, Body: &raftcmdv1.Envelope_Peek{Peek: &raftcmdv1.Peek{Policy: "p", Key: kHigh}}},
		{NowUnixNano: t0, MapEpoch: 3, Body: &raftcmdv1.Envelope_Lease{Lease: &raftcmdv1.LeaseOp{Kind: raftcmdv1.LeaseOp_KIND_CHECK, Policy: "p", Key: kHigh}}},
		{NowUnixNano: t0, MapEpoch: 3, Body: &raftcmdv1.Envelope_Refund{Refund: &raftcmdv1.Refund{Caller: "c", RequestId: "r", Key: kHigh}}},
		{NowUnixNano: t0, MapEpoch: 3, Body: &raftcmdv1.Envelope_Commit{Commit: &raftcmdv1.Commit{ReservationId: fsm.ReservationID("p", kHigh, fsm.ReservationName(7, 0), [16]byte(testSecret))}}},
	} {
		if err, _ := a.apply(env).(error); !errors.Is(err, fsm.ErrWrongGroup) {
			t.Errorf("%T for a slot not owned: %v, want ErrWrongGroup", env.GetBody(), err)
		}
	}

	// The high half moves in at epoch 5: commands routed with epoch < 5 for
	// it are stale, those for the low half (owner since epoch 1) are not.
	if res := a.apply(setOwnershipEnv(t0, 1, 5, shard.Assignment{Range: low, Group: 1, Epoch: 1},
		shard.Assignment{Range: high, Group: 1, Epoch: 5})); res != nil {
		t.Fatalf("SetOwnership: %v", res)
	}
	if err, _ := a.apply(routedAdmit(t0, 4, "p", kHigh)).(error); !errors.Is(err, fsm.ErrStaleEpoch) {
		t.Fatalf("admit with epoch 4 for a slot owned since 5: %v, want ErrStaleEpoch", err)
	}
	if _, ok := a.apply(routedAdmit(t0, 4, "p", kLow)).(*fsm.AdmitResult); !ok {
		t.Fatal("admit with epoch 4 for a slot owned since 1 refused")
	}
	if _, ok := a.apply(routedAdmit(t0, 5, "p", kHigh)).(*fsm.AdmitResult); !ok {
		t.Fatal("admit with epoch 5 for a slot owned since 5 refused")
	}

	// An older ownership update is ignored.
	a.apply(setOwnershipEnv(t0, 1, 2, shard.Assignment{Range: low, Group: 1, Epoch: 1}))
	if _, epoch, ranges, _ := a.f.Ownership(); epoch != 5 || len(ranges) != 2 {
		t.Fatalf("an older SetOwnership changed ownership: epoch %d, %d ranges", epoch, len(ranges))
	}
}

// A data group applies no data command before it knows what it owns.
func TestDataGroupRefusesDataBeforeOwnership(t *testing.T) {
	a := newApplier(t, fsm.Options{DataGroup: true})
	a.setPolicies(t0, tokenBucket("p", 10, time.Second, 10, 1))
	if err, _ := a.apply(routedAdmit(t0, 1, "p", "k")).(error); !errors.Is(err, fsm.ErrWrongGroup) {
		t.Fatalf("admit before ownership: %v, want ErrWrongGroup", err)
	}
	a.apply(setOwnershipEnv(t0, 1, 1, shard.Assignment{Range: shard.AllSlots(), Group: 1, Epoch: 1}))
	if _, ok := a.apply(routedAdmit(t0, 1, "p", "k")).(*fsm.AdmitResult); !ok {
		t.Fatal("admit after ownership of every slot refused")
	}
}

func TestSetOwnershipRejectsBadRanges(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	for name, as := range map[string][]shard.Assignment{
		"other group":   {{Range: shard.SlotRange{Start: 0, End: 10}, Group: 2, Epoch: 1}},
		"future epoch":  {{Range: shard.SlotRange{Start: 0, End: 10}, Group: 1, Epoch: 9}},
		"empty range":   {{Range: shard.SlotRange{Start: 10, End: 10}, Group: 1, Epoch: 1}},
		"overlap":       {{Range: shard.SlotRange{Start: 0, End: 10}, Group: 1, Epoch: 1}, {Range: shard.SlotRange{Start: 5, End: 20}, Group: 1, Epoch: 1}},
		"past the end":  {{Range: shard.SlotRange{Start: 4000, End: 5000}, Group: 1, Epoch: 1}},
		"start > end":   {{Range: shard.SlotRange{Start: 30, End: 20}, Group: 1, Epoch: 1}},
		"unsorted list": {{Range: shard.SlotRange{Start: 20, End: 30}, Group: 1, Epoch: 1}, {Range: shard.SlotRange{Start: 0, End: 10}, Group: 1, Epoch: 1}},
	} {
		env := setOwnershipEnv(t0, 1, 3, as...)
		if name == "past the end" {
			env.GetSetOwnership().Ranges[0].End = 5000
		}
		var fe *admission.FieldError
		if err, _ := a.apply(env).(error); !errors.As(err, &fe) || fe.Field[:7] != "ranges[" {
			t.Errorf("%s: %v, want a FieldError naming ranges[i]", name, err)
		}
		if _, _, _, ok := a.f.Ownership(); ok {
			t.Fatalf("%s: a refused SetOwnership set ownership", name)
		}
	}
}

// The meta group's shard map changes only by compare-and-set on its epoch.
func TestSetShardMapIsCompareAndSet(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	m, err := shard.InitialMap([]string{"n1", "n2", "n3"}, 8, 3)
	if err != nil {
		t.Fatal(err)
	}
	set := func(expect uint64, m shard.Map) any {
		return a.apply(&raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_SetShardMap{
			SetShardMap: &raftcmdv1.SetShardMap{ExpectEpoch: expect, Map: fsm.ShardMapToProto(m)}}})
	}
	if err, _ := set(1, m).(error); !errors.Is(err, fsm.ErrMapConflict) {
		t.Fatalf("first map expecting epoch 1: %v, want ErrMapConflict", err)
	}
	if res := set(0, m); res != nil {
		t.Fatalf("first map: %v", res)
	}
	got, ok := a.f.ShardMap()
	if !ok || !got.Equal(m) {
		t.Fatalf("ShardMap() = %+v, %v; want the map set", got, ok)
	}
	moved, err := m.MoveSlots(shard.SlotRange{Start: 0, End: 100}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err, _ := set(0, moved).(error); !errors.Is(err, fsm.ErrMapConflict) {
		t.Fatalf("stale compare-and-set: %v, want ErrMapConflict", err)
	}
	bad := moved.Clone()
	bad.Ranges = bad.Ranges[1:]
	var fe *admission.FieldError
	if err, _ := set(m.Epoch, bad).(error); !errors.As(err, &fe) || fe.Field != "map" {
		t.Fatalf("a map with a gap: %v, want a FieldError on map", err)
	}
	if res := set(m.Epoch, moved); res != nil {
		t.Fatalf("move: %v", res)
	}
	if got, _ := a.f.ShardMap(); !got.Equal(moved) {
		t.Fatalf("after the move ShardMap() = %+v", got)
	}
}

// SetPolicies replaces a data group's table with the meta group's versions;
// an older table is ignored.
func TestSetPoliciesCopiesVersions(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	set := func(index uint64, version uint64, limit int64) any {
		return a.apply(&raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_SetPolicies{SetPolicies: &raftcmdv1.SetPolicies{
			MetaIndex: index, Policies: []*raftcmdv1.PolicyRecord{{Policy: fsm.PolicyToProto(tokenBucket("p", limit, time.Second, limit, 1)), Version: version}}}}})
	}
	if res := set(10, 4, 5); res != nil {
		t.Fatal(res)
	}
	if pv, ok := a.f.Policy("p"); !ok || pv.Version != 4 || pv.Policy.Limit != 5 {
		t.Fatalf("Policy(p) = %+v, %v; want version 4 limit 5", pv, ok)
	}
	set(9, 3, 7) // older: ignored
	if pv, _ := a.f.Policy("p"); pv.Version != 4 || a.f.PoliciesMetaIndex() != 10 {
		t.Fatalf("an older SetPolicies changed the table: %+v (meta index %d)", pv, a.f.PoliciesMetaIndex())
	}
	if r := a.mustAdmit(t0, "p", "k", 1); r.PolicyVersion != 4 || !r.Decision.Allowed {
		t.Fatalf("admit under the copied policy: %+v", r)
	}
}

// The shard map, ownership and policy meta index survive snapshot and
// restore, and a restored group refuses what the original refused.
func TestRouteStateSnapshotRoundTrip(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("p", 10, time.Second, 10, 1))
	m, _ := shard.InitialMap([]string{"n1", "n2", "n3"}, 4, 3)
	a.apply(&raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_SetShardMap{
		SetShardMap: &raftcmdv1.SetShardMap{Map: fsm.ShardMapToProto(m)}}})
	a.apply(setOwnershipEnv(t0, 2, m.Epoch, m.Owned(2)...))
	snap := snapshotBytes(t, a.f)

	b := wrap(t, fsm.New(fsm.Options{}))
	restoreFrom(t, b.f, snap)
	if got, ok := b.f.ShardMap(); !ok || !got.Equal(m) {
		t.Fatalf("restored map %+v, %v", got, ok)
	}
	g, epoch, ranges, ok := b.f.Ownership()
	if !ok || g != 2 || epoch != m.Epoch || len(ranges) != len(m.Owned(2)) {
		t.Fatalf("restored ownership group %d epoch %d ranges %v ok %v", g, epoch, ranges, ok)
	}
	notOwned := keyInSlotRange(t, m.Owned(1)[0].Range)
	if err, _ := b.apply(routedAdmit(t0, m.Epoch, "p", notOwned)).(error); !errors.Is(err, fsm.ErrWrongGroup) {
		t.Fatalf("restored group admitted a slot it does not own: %v", err)
	}
	if again := snapshotBytes(t, b.f); string(again) != string(snap) {
		t.Fatal("snapshot of the restored FSM differs from the original")
	}
}

// Route answers a key's group, the epoch its slot got that owner, the map's
// epoch and the group's replicas; nothing without a map.
func TestRouteByShardMap(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	if r, ok := a.f.Route("k"); ok {
		t.Fatalf("Route without a map = %+v, true", r)
	}
	m, err := shard.InitialMap([]string{"n1", "n2", "n3"}, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	moved, err := m.MoveSlots(shard.SlotRange{Start: 0, End: 100}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if res := a.apply(&raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_SetShardMap{
		SetShardMap: &raftcmdv1.SetShardMap{Map: fsm.ShardMapToProto(moved)}}}); res != nil {
		t.Fatalf("SetShardMap: %v", res)
	}
	for _, key := range []string{keyInSlotRange(t, shard.SlotRange{Start: 0, End: 100}), keyInSlotRange(t, shard.SlotRange{Start: 100, End: 200})} {
		g, slotEpoch, ok := moved.Lookup(shard.SlotOf(key))
		grp, _ := moved.Group(g)
		r, rok := a.f.Route(key)
		if !ok || !rok || r.Group != g || r.SlotEpoch != slotEpoch || r.MapEpoch != moved.Epoch || !slices.Equal(r.Replicas, grp.Replicas) {
			t.Errorf("Route(%q) = %+v, %v; want group %d, slot epoch %d, map epoch %d, replicas %v", key, r, rok, g, slotEpoch, moved.Epoch, grp.Replicas)
		}
	}
}
