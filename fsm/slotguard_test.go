package fsm_test

import (
	"errors"
	"testing"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// A data group never touches a slot other than the command's: a
// multi-check Admit whose extra key is in another slot, and a Refund whose
// key is not in the slot of the keys its request ID spent on, are refused
// naming the field, and change nothing (the other slot may be frozen by a
// migration, or not be this group's).
func TestDataGroupRefusesOtherSlots(t *testing.T) {
	a := dataGroup(t, 1, 1, g1Before()...)
	k0 := keysIn(t, "s", 1, lowHalf)[0]
	ks := []string{k0, keysIn(t, "t", 1, lowHalf, shard.SlotRange{Start: shard.SlotOf(k0), End: shard.SlotOf(k0) + 1})[0]}
	env := &raftcmdv1.Envelope{NowUnixNano: t0 + 1, MapEpoch: 1, Body: &raftcmdv1.Envelope_Admit{Admit: &raftcmdv1.Admit{
		Policy: "tb", Key: ks[0], Cost: 1, Also: []*raftcmdv1.Check{{Policy: "qu", Key: ks[1], Cost: 1}}}}}
	var fe *admission.FieldError
	if err, _ := a.apply(env).(error); !errors.As(err, &fe) || fe.Field != "also[0].key" {
		t.Fatalf("Admit with an extra key in another slot = %v, want a field error on also[0].key", err)
	}
	if a.f.BucketCount() != 0 {
		t.Fatalf("the refused Admit left %d buckets", a.f.BucketCount())
	}
	// A recorded admit on ks[0], refunded with ks[1] as the key.
	rec := &raftcmdv1.Envelope{NowUnixNano: t0 + 2, MapEpoch: 1, Body: &raftcmdv1.Envelope_Admit{Admit: &raftcmdv1.Admit{
		Policy: "tb", Key: ks[0], Cost: 1, Caller: "c", RequestId: "r1"}}}
	if _, ok := a.apply(rec).(*fsm.AdmitResult); !ok {
		t.Fatal("recorded admit not decided")
	}
	spent := a.f.State("tb", ks[0])
	ref := refundEnv(t0+3, "c", "r1")
	ref.MapEpoch = 1
	ref.GetRefund().Key = ks[1]
	if err, _ := a.apply(ref).(error); !errors.As(err, &fe) || fe.Field != "key" {
		t.Fatalf("Refund with a key of another slot = %v, want a field error on key", err)
	}
	if got := a.f.State("tb", ks[0]); got.TAT != spent.TAT || a.f.BucketCount() != 1 {
		t.Fatalf("the refused Refund changed the state: %+v, was %+v", got, spent)
	}
	ref.GetRefund().Key = ks[0]
	if r, ok := a.apply(ref).(*fsm.RefundResult); !ok || !r.Refunded {
		t.Fatalf("Refund with the request's key = %#v", a.apply(ref))
	}
}
