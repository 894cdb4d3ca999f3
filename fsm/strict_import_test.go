package fsm_test

import (
	"errors"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// An import whose source time is more than MaxClockSkew ahead of its
// entry's stamp is refused with a clock-skew error naming the field, and
// changes nothing: the group's time is the stamp's, its buckets and its
// import record stay as they were. Within the bound the group's time
// becomes the source's.
func TestImportSourceTimeBoundedByClockSkew(t *testing.T) {
	const year = 365 * 24 * time.Hour
	now := t0 + int64(time.Second)
	g2 := dataGroup(t, 2, 1, g2Before()...)
	key := keysIn(t, "k", 1, highHalf)[0]
	admitKey := func(now int64, cost int64) *fsm.AdmitResult {
		t.Helper()
		return resultAs[*fsm.AdmitResult](t, "admit", g2.apply(stamp(admitEnv(now, "tb", key, cost), 1)))
	}
	admitKey(t0, 5) // exhausted: limit 10 a minute, burst 10
	admitKey(t0, 5)
	ahead := chunk{m: mig, attempt: 1, r: migR, seq: 0, last: true, srcNow: now + int64(10*year), mapEpoch: 1,
		state: &raftcmdv1.SlotState{}}

	err := wantErr(t, "a chunk 10 years ahead", g2.apply(ahead.env(now)), fsm.ErrClockSkew)
	var fe *admission.FieldError
	if !errors.As(err, &fe) || fe.Field != "source_now_unix_nano" {
		t.Fatalf("error %v does not name field source_now_unix_nano", err)
	}
	if got := g2.f.LastNow(); got != now {
		t.Fatalf("group time %d after the refused chunk, want its entry's stamp %d", got, now)
	}
	if st, ok := g2.f.Import(mig); ok {
		t.Fatalf("the refused chunk left an import record: %+v", st)
	}
	if r := admitKey(now, 1); r.Decision.Allowed {
		t.Fatal("an exhausted bucket admitted after the refused chunk")
	}

	// Within the bound: the group's time becomes the source's.
	within := ahead
	within.srcNow = now + int64(fsm.MaxClockSkew)
	if res := g2.apply(within.env(now)); res != nil {
		t.Fatalf("a chunk MaxClockSkew ahead: %v", res)
	}
	if got := g2.f.LastNow(); got != within.srcNow {
		t.Fatalf("group time %d after a chunk from %d", got, within.srcNow)
	}
}

// A migration's range is fixed by its plan: an import chunk or a drop that
// names another range for a migration the group already records is refused
// and changes nothing (only a hostile peer sends one).
func TestImportAndDropKeepTheirMigrationsRange(t *testing.T) {
	g2 := dataGroup(t, 2, 1, g2Before()...)
	first := chunk{m: mig, attempt: 1, r: migR, seq: 0, mapEpoch: 1, state: &raftcmdv1.SlotState{}}
	if res := g2.apply(first.env(t0)); res != nil {
		t.Fatalf("first chunk: %v", res)
	}
	other := shard.SlotRange{Start: 0, End: 2048}
	wider := chunk{m: mig, attempt: 2, r: other, seq: 0, mapEpoch: 1, state: &raftcmdv1.SlotState{}}
	wantErr(t, "a new attempt over another range", g2.apply(wider.env(t0)), fsm.ErrImportRefused)
	wantErr(t, "a drop of another range", g2.apply(dropImportEnv(t0, mig, other)), fsm.ErrImportRefused)
	st, ok := g2.f.Import(mig)
	if !ok || st.Range != migR || st.Attempt != 1 || st.NextSeq != 1 || st.Dropped {
		t.Fatalf("import record after the refusals: %+v (ok %v), want range %v, attempt 1, next seq 1, not dropped", st, ok, migR)
	}
	// The right range still drops it.
	if res := g2.apply(dropImportEnv(t0, mig, migR)); res != nil {
		t.Fatalf("drop: %v", res)
	}
}
