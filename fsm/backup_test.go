package fsm_test

import (
	"testing"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

func restoreEnv(now, src int64, epoch uint64, s *raftcmdv1.SlotState) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_RestoreSlots{RestoreSlots: &raftcmdv1.RestoreSlots{
		SourceNowUnixNano: src, MapEpoch: epoch, State: s}}}
}

// A group's backup, split by the groups that own its slots elsewhere, is
// restored into them key for key; a page naming a slot the group does not
// own, one of a map epoch the group has not applied, and one too far ahead
// in time are refused whole.
func TestBackupRestoresIntoTheOwners(t *testing.T) {
	src := dataGroup(t, 1, 1, g1Before()...)
	keys := keysIn(t, "k", 12, lowHalf)
	now := t0 + sec
	for i, k := range keys {
		for range i%3 + 1 {
			if res := src.apply(stamp(admitEnv(now, "fw", k, 1), 1)); !resultAs[*fsm.AdmitResult](t, "admit "+k, res).Decision.Allowed {
				t.Fatalf("admit %s: %v", k, res)
			}
		}
	}
	b := src.f.Backup()
	if b.AppliedIndex == 0 || b.Now != now || len(b.Records) != len(keys) {
		t.Fatalf("backup at index %d, time %d, %d records; want %d records at %d", b.AppliedIndex, b.Now, len(b.Records), len(keys), now)
	}
	var pages []*raftcmdv1.SlotState
	for off := 0; off < len(b.Records); {
		var p *raftcmdv1.SlotState
		p, off = b.Page(off, 1) // one record a page
		pages = append(pages, p)
	}
	if len(pages) != len(keys) {
		t.Fatalf("%d pages of one record, want %d", len(pages), len(keys))
	}
	whole, _ := b.Page(0, 1<<30)

	half := shard.Slot(1024)
	lo := []shard.Assignment{{Range: shard.SlotRange{Start: 0, End: half}, Group: 1, Epoch: 1}}
	hi := []shard.Assignment{{Range: shard.SlotRange{Start: half, End: shard.SlotCount}, Group: 2, Epoch: 1}}
	dst := map[shard.GroupID]*applier{1: dataGroup(t, 1, 1, lo...), 2: dataGroup(t, 2, 1, hi...)}
	later := now + 60*sec

	// Refused whole: slots of both groups, an epoch not applied yet, a
	// source time more than MaxClockSkew ahead.
	wantErr(t, "restore of every slot into group 1", dst[1].apply(restoreEnv(later, now, 1, whole)), fsm.ErrNotOwnedYet)
	wantErr(t, "restore at a later epoch", dst[1].apply(restoreEnv(later, now, 2, &raftcmdv1.SlotState{})), fsm.ErrNotOwnedYet)
	wantErr(t, "restore from the future", dst[1].apply(restoreEnv(now, now+2*int64(fsm.MaxClockSkew), 1, &raftcmdv1.SlotState{})), fsm.ErrClockSkew)
	if c := countsOf(dst[1].f); c != (counts{}) {
		t.Fatalf("refused restores left %+v", c)
	}

	parts, err := fsm.SplitByGroup(whole, []shard.GroupID{1, 2}, func(s shard.Slot) (shard.GroupID, bool) {
		if s < half {
			return 1, true
		}
		return 2, true
	})
	if err != nil || len(parts) != 2 {
		t.Fatalf("split: %d parts, %v", len(parts), err)
	}
	for g, p := range parts {
		if res := dst[g].apply(restoreEnv(later, now, 1, p)); res != nil {
			t.Fatalf("restore into group %d: %v", g, res)
		}
	}
	for _, k := range keys {
		g := shard.GroupID(1)
		if shard.SlotOf(k) >= half {
			g = 2
		}
		want, got := src.f.State("fw", k), dst[g].f.State("fw", k)
		if got.Count != want.Count || got.Start != want.Start || got.Count == 0 {
			t.Errorf("%s in group %d: %+v, want %+v", k, g, got, want)
		}
		if other := dst[3-g].f.State("fw", k); other.Count != 0 {
			t.Errorf("%s also in group %d: %+v", k, 3-g, other)
		}
	}
}

// State a target imported for a slot move that has not flipped is not in
// its backup (the source's holds it): a backup holds the slots the group
// owns.
func TestBackupHoldsOnlyOwnedSlots(t *testing.T) {
	x := newMigFixture(t)
	x.freeze()
	page := exportAll(t, x.src.f, mig, migR, 1<<30)[0]
	dst := dataGroup(t, 2, 1, g2Before()...)
	dst.importAll(t0, chunks(mig, 1, migR, 1, []fsm.ExportPage{page}))
	if dst.f.BucketCount() == 0 {
		t.Fatal("the target imported no bucket")
	}
	src := x.src.f.Backup()
	if len(src.Records) < fsm.SlotStateRecords(page.State) {
		t.Fatalf("the source's backup has %d records, its export of the moving slots %d", len(src.Records), fsm.SlotStateRecords(page.State))
	}
	for _, rec := range dst.f.Backup().Records {
		if d, ok := rec.(*raftcmdv1.DedupeRecord); !ok || d.GetSlotPlusOne() != 0 {
			t.Errorf("the target's backup holds %T %v of a slot it does not own", rec, rec)
		}
	}
}
