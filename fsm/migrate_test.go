package fsm_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// A frozen slot refuses every data command, alone or in a batch, with
// ErrSlotMoving and changes nothing; other slots are decided; unfreezing
// gives the slot back as it was.
func TestFreezeRefusesDataCommandsOfFrozenSlots(t *testing.T) {
	a := dataGroup(t, 1, 1, g1Before()...)
	kIn, kOut := keysIn(t, "in", 1, migR)[0], keysIn(t, "out", 1, lowHalf, migR)[0]
	now := t0 + sec
	a.apply(stamp(admitIDEnv(now, "c", "r1", "tb", kIn, 2), 1))
	l := resultAs[*fsm.LeaseResult](t, "acquire", a.apply(stamp(acquireOp("conc", kIn).env(now), 1))).Lease
	rs := resultAs[*fsm.ReserveResult](t, "reserve", a.apply(stamp(reserveEnv(now, "qu", kIn, 5, time.Hour, ""), 1)))
	peekBefore := *resultAs[*fsm.PeekResult](t, "peek", a.apply(stamp(peekEnv(now, "tb", kIn), 1)))

	if res := a.apply(freezeEnv(now, mig, migR)); res != nil {
		t.Fatalf("FreezeSlots: %v", res)
	}
	if got := a.f.Frozen(); len(got) != 1 || got[mig] != migR {
		t.Fatalf("Frozen() = %v, want {%d: %v}", got, mig, migR)
	}
	refund := &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Refund{Refund: &raftcmdv1.Refund{Caller: "c", RequestId: "r1", Key: kIn}}}
	for name, env := range map[string]*raftcmdv1.Envelope{
		"admit":         admitEnv(now, "tb", kIn, 1),
		"admit retry":   admitIDEnv(now, "c", "r1", "tb", kIn, 2),
		"admit new ID":  admitIDEnv(now, "c", "r2", "tb", kIn, 1),
		"multi-check":   multiEnv(now, admitOpts{}, chk{"tb", kIn, 1}, chk{"fw", kIn, 1}),
		"peek":          peekEnv(now, "tb", kIn),
		"refund":        refund,
		"acquire":       acquireOp("conc", kIn).withID("svc", "l2").env(now),
		"renew":         renewOp("conc", kIn, l.Token).env(now),
		"release":       releaseOp("conc", kIn, l.Token).env(now),
		"check":         checkOp("conc", kIn, l.Token).env(now),
		"reserve":       reserveEnv(now, "qu", kIn, 1, time.Hour, "v1"),
		"commit":        commitEnv(now, rs.ReservationID, 3, ""),
		"commit new ID": commitEnv(now, rs.ReservationID, 3, "k1"),
	} {
		err := wantErr(t, name, a.unchanged(name, stamp(env, 1)), fsm.ErrSlotMoving)
		var re *fsm.RouteError
		if !errors.As(err, &re) || re.Slot != shard.SlotOf(kIn) || re.Group != 1 || errors.Is(err, fsm.ErrWrongGroup) {
			t.Errorf("%s: %v, want a RouteError for slot %d of group 1", name, err, shard.SlotOf(kIn))
		}
	}

	// In a batch, only the ops of frozen slots are refused.
	inBefore := a.f.State("tb", kIn)
	res := batchResults(t, a.apply(stamp(batchEnv(now, admitEnv(0, "tb", kOut, 1), admitEnv(0, "tb", kIn, 1),
		peekEnv(0, "tb", kOut), acquireOp("conc", kIn).env(0), commitEnv(0, rs.ReservationID, 1, "")), 1)))
	if r, ok := res[0].(*fsm.AdmitResult); !ok || !r.Decision.Allowed {
		t.Errorf("batch op 0 (admit outside): %v", res[0])
	}
	if _, ok := res[2].(*fsm.PeekResult); !ok {
		t.Errorf("batch op 2 (peek outside): %v", res[2])
	}
	for _, i := range []int{1, 3, 4} {
		wantErr(t, fmt.Sprintf("batch op %d", i), res[i], fsm.ErrSlotMoving)
	}
	if got := a.f.State("tb", kIn); !statesEqual(got, inBefore) || a.f.ReservationCount() != 1 {
		t.Fatalf("a refused batch op changed the frozen key: %+v → %+v, %d reservations", inBefore, got, a.f.ReservationCount())
	}
	// Migration entries do not ride in batches.
	res = batchResults(t, a.apply(batchEnv(now, freezeEnv(0, mig+1, migR), unfreezeEnv(0, mig))))
	wantErr(t, "batched freeze", res[0], fsm.ErrNotBatchable)
	wantErr(t, "batched unfreeze", res[1], fsm.ErrNotBatchable)

	// Other slots are decided.
	if r := resultAs[*fsm.AdmitResult](t, "admit outside", a.apply(stamp(admitEnv(now, "tb", kOut, 1), 1))); !r.Decision.Allowed {
		t.Fatalf("admit outside the frozen range: %+v", r)
	}

	// A repeated freeze is fine; the same migration with another range is not.
	if res := a.unchanged("repeated freeze", freezeEnv(now, mig, migR)); res != nil {
		t.Fatalf("repeated freeze: %v", res)
	}
	wantErr(t, "refreeze other range", a.unchanged("refreeze", freezeEnv(now, mig, shard.SlotRange{Start: 0, End: 10})), fsm.ErrImportRefused)

	// The freeze survives a snapshot.
	b := wrap(t, fsm.New(fsm.Options{DataGroup: true}))
	restoreFrom(t, b.f, snapshotBytes(t, a.f))
	wantErr(t, "admit after restore", b.apply(stamp(admitEnv(now, "tb", kIn, 1), 1)), fsm.ErrSlotMoving)
	if got := b.f.Frozen(); len(got) != 1 || got[mig] != migR {
		t.Fatalf("restored Frozen() = %v", got)
	}

	// Unfreezing an unknown migration changes nothing; unfreezing mig gives
	// the slots back as they were.
	if res := a.unchanged("unfreeze unknown", unfreezeEnv(now, mig+1)); res != nil {
		t.Fatal(res)
	}
	if res := a.apply(unfreezeEnv(now, mig)); res != nil {
		t.Fatalf("UnfreezeSlots: %v", res)
	}
	if len(a.f.Frozen()) != 0 {
		t.Fatalf("Frozen() = %v after the unfreeze", a.f.Frozen())
	}
	if p := *resultAs[*fsm.PeekResult](t, "peek", a.apply(stamp(peekEnv(now, "tb", kIn), 1))); p != peekBefore {
		t.Fatalf("after the unfreeze the key reads %+v, before the freeze %+v", p, peekBefore)
	}
	if r := resultAs[*fsm.AdmitResult](t, "retry", a.apply(stamp(admitIDEnv(now, "c", "r1", "tb", kIn, 2), 1))); !r.Duplicate {
		t.Fatalf("retry after the unfreeze: %+v, want the recorded answer", r)
	}
	if r := resultAs[*fsm.ReserveResult](t, "commit", a.apply(stamp(commitEnv(now, rs.ReservationID, 5, ""), 1))); r.Charged != 5 {
		t.Fatalf("commit after the unfreeze: %+v", r)
	}
}

// A group freezes only slots it owns, as of the ownership it applied.
func TestFreezeNeedsOwnership(t *testing.T) {
	for name, a := range map[string]*applier{
		"data group without ownership": dataGroup(t, 1, 0),
		"meta group":                   newApplier(t, fsm.Options{}),
	} {
		wantErr(t, name, a.apply(freezeEnv(t0, mig, migR)), fsm.ErrNotOwnedYet)
	}
	a := dataGroup(t, 1, 1, g1Before()...)
	now := a.f.LastNow()
	for name, r := range map[string]shard.SlotRange{
		"another group's": {Start: 3000, End: 3100},
		"half owned":      {Start: 2000, End: 2100},
	} {
		wantErr(t, name, a.unchanged(name, freezeEnv(now, mig, r)), fsm.ErrNotOwnedYet)
	}
	for name, env := range map[string]*raftcmdv1.Envelope{
		"empty":      freezeEnv(now, mig, shard.SlotRange{Start: 10, End: 10}),
		"backwards":  freezeEnv(now, mig, shard.SlotRange{Start: 20, End: 10}),
		"past":       {NowUnixNano: now, Body: &raftcmdv1.Envelope_FreezeSlots{FreezeSlots: &raftcmdv1.FreezeSlots{Migration: mig, Start: 0, End: 5000}}},
		"wraps slot": {NowUnixNano: now, Body: &raftcmdv1.Envelope_FreezeSlots{FreezeSlots: &raftcmdv1.FreezeSlots{Migration: mig, Start: 65536, End: 65546}}},
	} {
		wantErr(t, name, a.unchanged(name, env), admission.ErrInvalidRequest)
	}
	if len(a.f.Frozen()) != 0 {
		t.Fatalf("refused freezes froze %v", a.f.Frozen())
	}
	// Two migrations may freeze two ranges; an ownership update that keeps
	// a frozen range keeps its freeze, one that takes it away ends it.
	other := shard.SlotRange{Start: 100, End: 200}
	for m, r := range map[uint64]shard.SlotRange{mig: migR, mig + 1: other} {
		if res := a.apply(freezeEnv(now, m, r)); res != nil {
			t.Fatal(res)
		}
	}
	a.own(now, 1, 2, g1Before()...)
	if got := a.f.Frozen(); len(got) != 2 {
		t.Fatalf("an ownership update keeping the slots dropped freezes: %v", got)
	}
	a.own(now, 1, 3, g1After()...)
	if got := a.f.Frozen(); len(got) != 1 || got[mig+1] != other {
		t.Fatalf("after migR left the group Frozen() = %v, want only %v", got, other)
	}
	if _, err := a.f.ExportSlots(mig, migR, nil, 1<<20); !errors.Is(err, fsm.ErrNotFrozen) {
		t.Fatalf("export of a freeze that ended: %v", err)
	}
}

// A whole migration: the target decides exactly as a group that never
// migrated would, request IDs and reservations move, fencing tokens never
// go back, and the source forgets the slots.
func TestMigrationRoundTrip(t *testing.T) {
	t.Run("target behind", func(t *testing.T) { testRoundTrip(t, false) })
	t.Run("target ahead", func(t *testing.T) { testRoundTrip(t, true) })
}

func testRoundTrip(t *testing.T, ahead bool) {
	x := newMigFixture(t)
	src, orc := x.src, x.orc
	srcBefore := countsOf(src.f)
	if want := (counts{fixtureIn.buckets + fixtureOut.buckets, fixtureIn.sems + fixtureOut.sems,
		fixtureIn.reservations, fixtureIn.dedupe + fixtureOut.dedupe}); srcBefore != want {
		t.Fatalf("source holds %+v, want %+v", srcBefore, want)
	}
	outState := src.f.State("tb", x.kOut)
	x.freeze()
	wantErr(t, "admit while frozen", src.apply(stamp(admitEnv(x.tf, "tb", x.kTB, 1), 1)), fsm.ErrSlotMoving)

	pages := exportAll(t, src.f, mig, migR, 150)
	whole := exportAll(t, src.f, mig, migR, 1<<30)
	if len(pages) < 4 || len(whole) != 1 {
		t.Fatalf("%d pages of 150 bytes, %d of 1 GiB: want several, then one", len(pages), len(whole))
	}
	got, want := pageRecords(t, pages), pageRecords(t, whole)
	if !slices.Equal(got, want) {
		t.Fatalf("the pages hold %d records, the whole export %d, or others", len(got), len(want))
	}
	if c := stateCounts(whole[0].State); c != fixtureIn {
		t.Fatalf("the export holds %+v, want %+v", c, fixtureIn)
	}

	dst := dataGroup(t, 2, 1, g2Before()...)
	importAt, shift := t0, int64(0) // behind: the target's log is at t0
	if ahead {
		importAt = x.tf + 30*sec
		shift = importAt - x.tf
	}
	dst.importAll(importAt, chunks(mig, 1, migR, 1, pages))
	if st, ok := dst.f.Import(mig); !ok || st != (fsm.ImportStatus{Range: migR, Attempt: 1, NextSeq: uint32(len(pages)),
		Complete: true, Records: uint64(len(want))}) {
		t.Fatalf("Import(%d) = %+v, %v", mig, st, ok)
	}
	if now := dst.f.LastNow(); now != max(x.tf, importAt) {
		t.Fatalf("target's time %d after the import, want %d", now, max(x.tf, importAt))
	}
	// Imported but not owned: not served yet.
	wantErr(t, "admit before the flip", dst.apply(stamp(admitEnv(dst.f.LastNow(), "tb", x.kTB, 1), 2)), fsm.ErrWrongGroup)

	dst.own(t0, 2, 2, g2After()...)
	src.own(x.tf, 1, 2, g1After()...)
	if _, ok := dst.f.Import(mig); ok {
		t.Fatal("a complete import is remembered once its slots are owned")
	}
	if len(src.f.Frozen()) != 0 {
		t.Fatalf("source still freezes %v", src.f.Frozen())
	}

	// The source forgot migR and nothing else.
	if got, want := countsOf(src.f), (counts{srcBefore.buckets - fixtureIn.buckets, srcBefore.sems - fixtureIn.sems,
		srcBefore.reservations - fixtureIn.reservations, srcBefore.dedupe - fixtureIn.dedupe}); got != want {
		t.Fatalf("source holds %+v after the move, want %+v", got, want)
	}
	if got := src.f.State("tb", x.kOut); !statesEqual(got, outState) {
		t.Fatalf("state outside migR changed: %+v → %+v", outState, got)
	}
	if r := resultAs[*fsm.AdmitResult](t, "retry", src.apply(stamp(admitIDEnv(x.tf, "c", "o-tb", "tb", x.kOut, 2), 2))); !r.Duplicate {
		t.Fatalf("retry outside migR at the source: %+v", r)
	}
	for _, k := range []string{x.kTB, x.kC, x.kQU} {
		wantErr(t, "source admit of a moved key", src.apply(stamp(admitEnv(x.tf, "tb", k, 1), 2)), fsm.ErrWrongGroup)
	}

	// The target against the oracle, command by command. The target's
	// imported leases (acquired by tf) keep the time they had left at tf.
	maxTok := map[string]int64{}
	for k, toks := range x.tokens {
		maxTok[k] = slices.Max(toks)
	}
	norm := func(res any) string {
		if lr, ok := res.(*fsm.LeaseResult); ok && shift > 0 && lr.Lease.Token != 0 && lr.Lease.AcquiredAt <= x.tf && !lr.Duplicate {
			c := *lr
			c.Lease.ExpiresAt -= shift
			return describeMig(&c)
		}
		return describeMig(res)
	}
	step := func(env *raftcmdv1.Envelope) any {
		t.Helper()
		r := dst.apply(stamp(env, 2))
		if o := orc.apply(stamp(env, 2)); norm(r) != describeMig(o) {
			t.Fatalf("%T at +%v: target %s, oracle %s", env.GetBody(), time.Duration(env.GetNowUnixNano()-t0), norm(r), describeMig(o))
		}
		if lr, ok := r.(*fsm.LeaseResult); ok && env.GetLease().GetKind() == kAcquire && lr.Allowed && !lr.Duplicate &&
			lr.Lease.Token <= maxTok[env.GetLease().GetKey()] {
			t.Fatalf("target issued token %d for %q, the source had issued %d", lr.Lease.Token, env.GetLease().GetKey(), maxTok[env.GetLease().GetKey()])
		}
		return r
	}
	now := dst.f.LastNow()
	// Retries get the first answers.
	for rid, env := range map[string]*raftcmdv1.Envelope{
		"a-tb": admitIDEnv(now, "c", "a-tb", "tb", x.kTB, 3),
		"a-qu": admitIDEnv(now, "c", "a-qu", "qu", x.kQU, 10),
		"a-sl": admitIDEnv(now, "c", "a-sl", "sl", x.kSL, 1),
		"l1":   acquireOp("conc", x.kC).withID("svc", "l1").env(now),
		"res1": reserveEnv(now, "qu", x.kQU, 20, time.Hour, "res1"),
	} {
		r, first := step(env), x.first[rid]
		if rr, ok := first.(*fsm.ReserveResult); ok {
			c := *rr
			c.Decision.ResetAfter = 0 // reservation records do not keep it (a repeat in place does the same)
			first = &c
		}
		want := strings.Replace(describeMig(first), "Duplicate:false", "Duplicate:true", 1)
		if describeMig(r) != want {
			t.Fatalf("retry of %s at the target: %s, want %s", rid, describeMig(r), want)
		}
	}
	if r := resultAs[*fsm.RefundResult](t, "refund again", step(&raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Refund{
		Refund: &raftcmdv1.Refund{Caller: "c", RequestId: "a-ref", Key: x.kFW}}})); r.Refunded {
		t.Fatalf("the refund made at the source is made again at the target: %+v", r)
	}
	if ahead {
		// Imported leases keep the time they had left.
		l1 := x.first["l1"].(*fsm.LeaseResult).Lease
		r := resultAs[*fsm.LeaseResult](t, "check", dst.apply(stamp(checkOp("conc", x.kC, l1.Token).env(now), 2)))
		if !r.Allowed || r.Lease.ExpiresAt-now != l1.ExpiresAt-x.tf {
			t.Fatalf("imported lease %+v at %d, was %+v at %d: want the same time left", r.Lease, now, l1, x.tf)
		}
	}
	// kC2's semaphore moved with its last token: a lease acquired at the
	// source's time gets the next token.
	if r := resultAs[*fsm.LeaseResult](t, "acquire kC2", step(acquireOp("conc", x.kC2).env(now))); !ahead && r.Lease.Token != x.tf+3 {
		t.Fatalf("first token at the target %d, want %d", r.Lease.Token, x.tf+3)
	}
	fresh := keysIn(t, "fresh", 1, migR)[0]
	l2 := x.tokens[x.kC][1]
	for round, at := range []int64{now, now + 20*sec, now + 70*sec} {
		step(admitEnv(at, "tb", x.kTB, 2))
		step(admitEnv(at, "fw", x.kFW, 3))
		step(admitEnv(at, "sw", x.kSW, 3))
		step(admitEnv(at, "sl", x.kSL, 3))
		step(admitEnv(at, "qu", x.kQU, 30))
		step(admitEnv(at, "tb", fresh, 4))
		for _, k := range x.extra {
			step(admitEnv(at, "tb", k, 5))
		}
		for _, p := range []string{"tb", "fw", "sw", "sl", "qu"} {
			step(peekEnv(at, p, map[string]string{"tb": x.kTB, "fw": x.kFW, "sw": x.kSW, "sl": x.kSL, "qu": x.kQU}[p]))
		}
		step(acquireOp("conc", x.kC).env(at))
		step(checkOp("conc", x.kC, l2).env(at))
		switch round {
		case 0:
			if r := resultAs[*fsm.ReserveResult](t, "commit", step(commitEnv(at, x.resQU, 25, ""))); r.Charged != 25 {
				t.Fatalf("commit of the moved reservation: %+v", r)
			}
			step(commitEnv(at, x.resTB, 0, ""))
			wantErr(t, "second commit", step(commitEnv(at, x.resQU, 25, "")), fsm.ErrNoReservation)
			step(releaseOp("conc", x.kC, l2).env(at))
		case 2:
			step(expireEnv(at))
			step(acquireOp("conc", x.kC2).env(at))
		}
	}
	if dst.f.ReservationCount() != 0 {
		t.Fatalf("target holds %d reservations, want none", dst.f.ReservationCount())
	}
}

// Pages of any size hold every record of the frozen slots exactly once, in
// one order, whatever the table at which a page ends; and only a frozen
// range can be exported.
func TestExportPagesHoldEveryRecordOnce(t *testing.T) {
	x := newMigFixture(t)
	// Request IDs whose (caller, request ID) pairs concatenate alike.
	x.both("", admitIDEnv(x.tf, "a\x00b", "c", "tb", x.kTB, 1))
	x.both("", admitIDEnv(x.tf, "a", "b\x00c", "tb", x.kTB, 1))
	_, err := x.src.f.ExportSlots(mig, migR, nil, 1<<20)
	if !errors.Is(err, fsm.ErrNotFrozen) {
		t.Fatalf("export before the freeze: %v", err)
	}
	x.freeze()
	for name, r := range map[string]shard.SlotRange{"other range": {Start: 512, End: 600}, "wider range": {Start: 500, End: 640}} {
		if _, err := x.src.f.ExportSlots(mig, r, nil, 1<<20); !errors.Is(err, fsm.ErrNotFrozen) {
			t.Errorf("export of the %s: %v", name, err)
		}
	}
	if _, err := x.src.f.ExportSlots(mig+1, migR, nil, 1<<20); !errors.Is(err, fsm.ErrNotFrozen) {
		t.Errorf("export of another migration: %v", err)
	}
	before := snapshotBytes(t, x.src.f)
	whole := pageRecords(t, exportAll(t, x.src.f, mig, migR, 1<<30))
	if c := stateCounts(exportAll(t, x.src.f, mig, migR, 1<<30)[0].State); c.dedupe != fixtureIn.dedupe+2 {
		t.Fatalf("the export holds %d request IDs, want %d", c.dedupe, fixtureIn.dedupe+2)
	}
	seen := map[int]bool{}
	for _, maxBytes := range []int{-1, 0, 1, 20, 60, 100, 150, 333, 1000, 4096} {
		pages := exportAll(t, x.src.f, mig, migR, maxBytes)
		got := pageRecords(t, pages)
		if !slices.Equal(got, whole) {
			t.Fatalf("pages of %d bytes: %d records, want the %d of one page", maxBytes, len(got), len(whole))
		}
		// One key a page: reservations ride with their buckets, and the two
		// request IDs above share a cursor key.
		if want := len(whole) - fixtureIn.reservations - 1; maxBytes <= 1 && len(pages) != want {
			t.Fatalf("pages of %d bytes: %d pages for %d records, want %d", maxBytes, len(pages), len(whole), want)
		}
		seen[len(pages)] = true
	}
	if len(seen) < 5 {
		t.Fatalf("page counts %v: the sizes did not cut the export in enough ways", seen)
	}
	if !slices.Equal(before, snapshotBytes(t, x.src.f)) {
		t.Fatal("exporting changed the source")
	}
}

// Between pages, the frozen slots change only by expiry, and pages read
// across it still add up to a state the target can carry on from: a
// reservation that expires at the source between two pages gives its units
// back at the target too, and no record is copied twice.
func TestExportAcrossExpiry(t *testing.T) {
	x := newMigFixture(t)
	x.both("", reserveEnv(x.tf, "qu", x.kQU, 30, 10*time.Second, "short"))
	x.freeze()
	var pages []fsm.ExportPage
	p, err := x.src.f.ExportSlots(mig, migR, nil, 150)
	for ; err == nil; p, err = x.src.f.ExportSlots(mig, migR, p.Next, 150) {
		pages = append(pages, p)
		if p.Done {
			break
		}
		if len(pages) == 3 {
			// The short reservation expires at the source.
			x.src.expire(x.tf + 20*sec)
			x.orc.expire(x.tf + 20*sec)
			if x.src.f.ReservationCount() != 2 {
				t.Fatalf("%d reservations at the source, want 2 left", x.src.f.ReservationCount())
			}
		}
	}
	if err != nil || len(pages) < 6 {
		t.Fatalf("%d pages, %v", len(pages), err)
	}
	got := pageRecords(t, pages)
	if len(slices.Compact(got)) != len(pageRecords(t, pages)) {
		t.Fatal("a record appears on two pages")
	}
	dst := dataGroup(t, 2, 1, g2Before()...)
	dst.importAll(t0, chunks(mig, 1, migR, 1, pages))
	dst.own(t0, 2, 2, g2After()...)
	at := x.tf + time.Minute.Nanoseconds()
	for _, env := range []*raftcmdv1.Envelope{peekEnv(at, "qu", x.kQU), peekEnv(at, "tb", x.kTB), admitEnv(at, "qu", x.kQU, 50),
		commitEnv(at, x.resQU, 20, ""), peekEnv(at, "qu", x.kQU)} {
		d, o := dst.apply(stamp(env, 2)), x.orc.apply(env)
		if describeMig(d) != describeMig(o) {
			t.Fatalf("%T: target %s, oracle %s", env.GetBody(), describeMig(d), describeMig(o))
		}
	}
}
