package fsm_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// ImportSlots is fenced: by map epoch, by ownership, by attempt and by
// sequence. Refusals and repeats change nothing.
func TestImportFencing(t *testing.T) {
	x := newMigFixture(t)
	x.freeze()
	pages := exportAll(t, x.src.f, mig, migR, 400)
	if len(pages) < 4 || len(pages[1].State.GetBuckets()) == 0 {
		t.Fatalf("%d pages, the second with %d buckets: want 4 or more, buckets on the second", len(pages), len(pages[1].State.GetBuckets()))
	}
	cs := chunks(mig, 1, migR, 1, pages)
	dst := dataGroup(t, 2, 1, g2Before()...)
	base := countsOf(dst.f)
	now := func() int64 { return dst.f.LastNow() }
	refused := func(what string, c chunk, target error) {
		t.Helper()
		wantErr(t, what, dst.unchanged(what, c.env(now())), target)
	}

	// Not before ownership at the chunk's epoch, nor into owned slots.
	wantErr(t, "no ownership", dataGroup(t, 2, 0).apply(cs[0].env(t0)), fsm.ErrNotOwnedYet)
	later := cs[0]
	later.mapEpoch = 2
	refused("epoch ahead", later, fsm.ErrNotOwnedYet)
	for _, r := range []shard.SlotRange{{Start: 2040, End: 2060}, {Start: 3000, End: 3001}} {
		owned := cs[0]
		owned.r = r
		refused(fmt.Sprintf("into owned %v", r), owned, fsm.ErrImportRefused)
	}
	bad := cs[0]
	bad.r = shard.SlotRange{Start: 700, End: 600}
	refused("bad range", bad, admission.ErrInvalidRequest)
	refused("seq 1 first", cs[1], fsm.ErrImportRefused)

	dst.importAll(now(), cs[:1])
	if st, _ := dst.f.Import(mig); st != (fsm.ImportStatus{Range: migR, Attempt: 1, NextSeq: 1, Records: uint64(pages[0].Records)}) {
		t.Fatalf("after chunk 0: %+v", st)
	}
	if res := dst.unchanged("repeat of chunk 0", cs[0].env(now())); res != nil {
		t.Fatalf("a repeated chunk: %v, want nil", res)
	}
	refused("seq 2 after 0", cs[2], fsm.ErrImportRefused)
	older := cs[0]
	older.attempt = 0
	refused("older attempt", older, fsm.ErrImportRefused)
	other := cs[1]
	other.r = shard.SlotRange{Start: migR.Start, End: migR.End - 1}
	refused("another range", other, fsm.ErrImportRefused)
	dst.importAll(now(), cs[1:2])

	// A newer attempt starts at 0, and its chunk 0 clears what the older
	// one imported.
	cs2 := chunks(mig, 2, migR, 1, pages)
	refused("newer attempt at seq 1", cs2[1], fsm.ErrImportRefused)
	b := pages[1].State.GetBuckets()[0]
	policy, key, _ := strings.Cut(b.GetKey(), "/")
	if dst.f.State(policy, key).Kind == admission.KindNone {
		t.Fatalf("bucket %q of chunk 1 was not imported", b.GetKey())
	}
	dst.importAll(now(), cs2[:1])
	if got, want := countsOf(dst.f), add(base, stateCounts(pages[0].State)); got != want {
		t.Fatalf("after chunk 0 of attempt 2 the target holds %+v, want %+v", got, want)
	}
	if s := dst.f.State(policy, key); s.Kind != admission.KindNone {
		t.Fatalf("bucket %q of attempt 1's chunk 1 survived attempt 2: %+v", b.GetKey(), s)
	}
	refused("attempt 1 after attempt 2 began", cs[2], fsm.ErrImportRefused)
	dst.importAll(now(), cs2[1:])
	total := uint64(len(pageRecords(t, pages)))
	if st, _ := dst.f.Import(mig); st != (fsm.ImportStatus{Range: migR, Attempt: 2, NextSeq: uint32(len(pages)), Complete: true, Records: total}) {
		t.Fatalf("after attempt 2: %+v", st)
	}
	in := stateCounts(exportAll(t, x.src.f, mig, migR, 1<<30)[0].State)
	if got := countsOf(dst.f); got != add(base, in) {
		t.Fatalf("target holds %+v, want %+v", got, add(base, in))
	}
	if res := dst.unchanged("repeat of the last chunk", cs2[len(cs2)-1].env(now())); res != nil {
		t.Fatalf("a repeated last chunk: %v", res)
	}
	past := cs2[len(cs2)-1]
	past.seq++
	refused("a chunk after the last", past, fsm.ErrImportRefused)

	// The import record survives a snapshot.
	r := wrap(t, fsm.New(fsm.Options{DataGroup: true}))
	restoreFrom(t, r.f, snapshotBytes(t, dst.f))
	if st, _ := r.f.Import(mig); st.Attempt != 2 || !st.Complete {
		t.Fatalf("restored import %+v", st)
	}

	// Once the slots are owned, no chunk goes in.
	dst.own(now(), 2, 2, g2After()...)
	refused("chunk 0 after the flip", chunks(mig, 3, migR, 1, pages)[0], fsm.ErrImportRefused)
	wantErr(t, "drop after the flip", dst.unchanged("drop", dropImportEnv(now(), mig, migR)), fsm.ErrImportRefused)
}

func add(a, b counts) counts {
	return counts{a.buckets + b.buckets, a.sems + b.sems, a.reservations + b.reservations, a.dedupe + b.dedupe}
}

// A chunk refused for a bad record changes nothing, not even the records
// before the bad one.
func TestImportOfABadRecordChangesNothing(t *testing.T) {
	x := newMigFixture(t)
	x.freeze()
	page := exportAll(t, x.src.f, mig, migR, 1<<30)[0]
	dst := dataGroup(t, 2, 1, g2Before()...)
	c := chunks(mig, 1, migR, 1, []fsm.ExportPage{page})[0]
	c.state.Dedupe[len(c.state.Dedupe)-1].Fingerprint = []byte{1, 2, 3}
	for _, seq := range []uint32{0, 1} {
		if seq == 1 {
			dst.importAll(dst.f.LastNow(), chunks(mig, 1, migR, 1, exportAll(t, x.src.f, mig, migR, 1<<30))[:1])
			c.last, c.seq = true, 1
		}
		if res := dst.unchanged("bad chunk", c.env(dst.f.LastNow())); res == nil {
			t.Fatalf("chunk %d with a 3-byte fingerprint accepted", seq)
		}
		if st, ok := dst.f.Import(mig); ok && st.NextSeq != seq {
			t.Fatalf("a refused chunk %d moved the import to %+v", seq, st)
		}
	}
}

// DropImport deletes what a migration imported, only that, and fences off
// its later chunks.
func TestDropImport(t *testing.T) {
	x := newMigFixture(t)
	x.freeze()
	pages := exportAll(t, x.src.f, mig, migR, 300)
	cs := chunks(mig, 1, migR, 1, pages)
	dst := dataGroup(t, 2, 1, g2Before()...)
	mine := keysIn(t, "mine", 1, highHalf)[0]
	dst.apply(stamp(admitIDEnv(t0, "c", "mine", "tb", mine, 3), 1))
	dst.apply(stamp(acquireOp("conc", mine).env(t0), 1))
	dst.apply(stamp(reserveEnv(t0, "qu", mine, 3, time.Hour, "rmine"), 1))
	base, mineState := countsOf(dst.f), dst.f.State("tb", mine)

	dst.importAll(t0, cs[:2])
	if countsOf(dst.f) == base {
		t.Fatal("two chunks imported nothing")
	}
	if res := dst.apply(dropImportEnv(t0, mig, migR)); res != nil {
		t.Fatalf("DropImport: %v", res)
	}
	if got := countsOf(dst.f); got != base || !statesEqual(dst.f.State("tb", mine), mineState) {
		t.Fatalf("after the drop the target holds %+v (want %+v), its own key %+v (was %+v)", got, base, dst.f.State("tb", mine), mineState)
	}
	if st, ok := dst.f.Import(mig); !ok || !st.Dropped {
		t.Fatalf("Import after the drop: %+v, %v", st, ok)
	}
	now := dst.f.LastNow()
	for name, c := range map[string]chunk{"next chunk": cs[2], "newer attempt": chunks(mig, 5, migR, 1, pages)[0]} {
		wantErr(t, name, dst.unchanged(name, c.env(now)), fsm.ErrImportRefused)
	}
	if res := dst.unchanged("second drop", dropImportEnv(now, mig, migR)); res != nil {
		t.Fatalf("a repeated drop: %v", res)
	}
	wantErr(t, "drop of owned slots", dst.unchanged("drop owned", dropImportEnv(now, mig+1, shard.SlotRange{Start: 2000, End: 2100})), fsm.ErrImportRefused)
	// A drop that arrives before any chunk still fences them off.
	if res := dst.apply(dropImportEnv(now, mig+2, migR)); res != nil {
		t.Fatal(res)
	}
	wantErr(t, "chunk after an early drop", dst.unchanged("late chunk", chunks(mig+2, 1, migR, 1, pages)[0].env(now)), fsm.ErrImportRefused)

	// The rollback's other half: the source, unfrozen, decides as if the
	// migration never began.
	if res := x.src.apply(unfreezeEnv(x.tf, mig)); res != nil {
		t.Fatal(res)
	}
	for _, env := range []*raftcmdv1.Envelope{admitEnv(x.tf, "tb", x.kTB, 2), peekEnv(x.tf, "qu", x.kQU), commitEnv(x.tf, x.resQU, 1, ""),
		acquireOp("conc", x.kC).env(x.tf), acquireOp("conc", x.kC2).env(x.tf), admitIDEnv(x.tf, "c", "a-fw", "fw", x.kFW, 2)} {
		x.both("", env)
	}
}

// Records outside the chunk's range are not imported.
func TestImportKeepsOnlyItsRange(t *testing.T) {
	x := newMigFixture(t)
	x.freeze()
	page := exportAll(t, x.src.f, mig, migR, 1<<30)[0]
	sub := shard.SlotRange{Start: migR.Start, End: migR.Start + 64}
	dst := dataGroup(t, 2, 1, g2Before()...)
	dst.importAll(t0, chunks(mig, 1, sub, 1, []fsm.ExportPage{page}))
	in, out := 0, 0
	for _, b := range page.State.GetBuckets() {
		policy, key, _ := strings.Cut(b.GetKey(), "/")
		imported := dst.f.State(policy, key).Kind != admission.KindNone
		if imported != sub.Contains(shard.SlotOf(key)) {
			t.Errorf("bucket %q of slot %d: imported %v into %v", b.GetKey(), shard.SlotOf(key), imported, sub)
		}
		if imported {
			in++
		} else {
			out++
		}
	}
	if in == 0 || out == 0 {
		t.Fatalf("%d buckets in %v, %d outside: want some of each", in, sub, out)
	}
	if dst.f.BucketCount() != in {
		t.Fatalf("target holds %d buckets, want %d", dst.f.BucketCount(), in)
	}
}

// Request IDs recorded before the group knew slots (a one-group cluster
// that became group 1) go with every migration and stay at the source; an
// imported one never replaces one the target holds.
func TestRequestIDsOfUnknownSlot(t *testing.T) {
	src := newApplier(t, fsm.Options{})
	src.putPolicies(t0, migPolicies()...)
	kIn, kOther, kHigh := keysIn(t, "u", 1, migR)[0], keysIn(t, "w", 1, lowHalf, migR)[0], keysIn(t, "h", 1, highHalf)[0]
	now := t0 + sec
	oldIn := src.mustAdmitID(now, req{"c", "old-in", "tb", kIn, 2})
	src.mustAdmitID(now, req{"c", "old-other", "tb", kOther, 1})
	src.own(now, 1, 1, g1Before()...)
	newIn := resultAs[*fsm.AdmitResult](t, "admit", src.apply(stamp(admitIDEnv(now, "c", "new-in", "tb", kIn, 1), 1)))
	if res := src.apply(freezeEnv(now, mig, migR)); res != nil {
		t.Fatal(res)
	}
	page := exportAll(t, src.f, mig, migR, 1<<30)[0]
	var rids []string
	for _, d := range page.State.GetDedupe() {
		rids = append(rids, d.GetRequestId())
	}
	slices.Sort(rids)
	if !slices.Equal(rids, []string{"new-in", "old-in", "old-other"}) {
		t.Fatalf("exported request IDs %q, want those of unknown slot and new-in", rids)
	}

	dst := dataGroup(t, 2, 1, g2Before()...)
	mine := resultAs[*fsm.AdmitResult](t, "admit", dst.apply(stamp(admitIDEnv(t0, "c", "old-other", "tb", kHigh, 3), 1)))
	dst.importAll(t0, chunks(mig, 1, migR, 1, []fsm.ExportPage{page}))
	dst.own(t0, 2, 2, g2After()...)
	src.own(now, 1, 2, g1After()...)
	if src.f.DedupeLen() != 2 {
		t.Fatalf("source holds %d request IDs, want the 2 of unknown slot", src.f.DedupeLen())
	}
	for _, c := range []struct {
		r    req
		want *fsm.AdmitResult
	}{{req{"c", "old-in", "tb", kIn, 2}, &oldIn}, {req{"c", "new-in", "tb", kIn, 1}, newIn}, {req{"c", "old-other", "tb", kHigh, 3}, mine}} {
		got := resultAs[*fsm.AdmitResult](t, "retry", dst.apply(stamp(c.r.env(now), 2)))
		want := *c.want
		want.Duplicate = true
		if describeMig(got) != describeMig(&want) {
			t.Errorf("retry of %s at the target: %+v, want %+v", c.r.rid, *got, want)
		}
	}
}

// Leases and reservations keep the time they had left across an import,
// on either side: the imported ones when the target's clock is ahead, the
// target's own when the import moves its clock forward.
func TestImportKeepsTimeLeft(t *testing.T) {
	src := dataGroup(t, 1, 1, g1Before()...)
	k, mine := keysIn(t, "tl", 1, migR)[0], keysIn(t, "tm", 1, highHalf)[0]
	s, ttl := t0+10*sec, 20*sec
	l := resultAs[*fsm.LeaseResult](t, "acquire", src.apply(stamp(acquireOp("conc", k).withTTL(time.Duration(ttl)).env(s), 1))).Lease
	res := resultAs[*fsm.ReserveResult](t, "reserve", src.apply(stamp(reserveEnv(s, "qu", k, 5, time.Duration(ttl), ""), 1)))
	if res := src.apply(freezeEnv(s, mig, migR)); res != nil {
		t.Fatal(res)
	}
	pages := exportAll(t, src.f, mig, migR, 1<<30)
	for _, at := range []int64{s + 100*sec, s - 5*sec} {
		dst := dataGroup(t, 2, 1, g2Before()...)
		own := resultAs[*fsm.LeaseResult](t, "acquire", dst.apply(stamp(acquireOp("conc", mine).withTTL(time.Duration(ttl)).env(at), 1))).Lease
		dst.importAll(at, chunks(mig, 1, migR, 1, pages))
		dst.own(at, 2, 2, g2After()...)
		now := dst.f.LastNow()
		if now != max(at, s) {
			t.Fatalf("target at %d after the import, want %d", now, max(at, s))
		}
		held := func(key string, token, at int64) bool {
			return resultAs[*fsm.LeaseResult](t, "check", dst.apply(stamp(checkOp("conc", key, token).env(at), 2))).Allowed
		}
		// Both leases have ttl left at now: the imported one had it at s,
		// the target's own at at, and the clock went from at or s to now.
		end := now + ttl
		if !held(k, l.Token, end-1) || !held(mine, own.Token, end-1) {
			t.Fatalf("target at %+d s: a lease ended before its time", (at-s)/sec)
		}
		if r := resultAs[*fsm.ReserveResult](t, "commit", dst.apply(stamp(commitEnv(end-1, res.ReservationID, 5, ""), 2))); r.Charged != 5 {
			t.Fatalf("commit of the moved reservation: %+v", r)
		}
		if held(k, l.Token, end) || held(mine, own.Token, end) {
			t.Fatalf("target at %+d s: a lease outlived its time", (at-s)/sec)
		}
	}
}

// A reservation's ID holds the log index of its Reserve and, in a data
// group, the group: a Reserve of the same policy and key at that index of
// the target's log gets another ID (also when a moved ID looks like the
// target's own), and all commit on their own.
func TestImportedReservationIDDoesNotCollide(t *testing.T) {
	src := dataGroup(t, 1, 1, g1Before()...)
	k := keysIn(t, "r", 1, migR)[0]
	src.index = 500
	moved := resultAs[*fsm.ReserveResult](t, "reserve", src.apply(stamp(reserveEnv(t0+sec, "qu", k, 10, time.Hour, ""), 1)))
	if moved.ReservationID != fsm.ReservationID("qu", k, fsm.ReservationName(501, 1), [16]byte(testSecret)) {
		t.Fatalf("reservation ID %q, want the one of index 501", moved.ReservationID)
	}
	if res := src.apply(freezeEnv(t0+sec, mig, migR)); res != nil {
		t.Fatal(res)
	}
	page := exportAll(t, src.f, mig, migR, 1<<30)[0]
	// A second record named as the target's own Reserve at index 501 would
	// be, as a source that had itself imported one would hold it.
	second := proto.Clone(page.State.GetReservations()[0]).(*raftcmdv1.ReservationRecord)
	second.Id = fsm.ReservationName(501, 2)
	second.Estimate = 7
	secondID := fsm.ReservationID("qu", k, second.Id, [16]byte(testSecret))
	page.State.Reservations = append(page.State.Reservations, second)

	dst := dataGroup(t, 2, 1, g2Before()...)
	dst.importAll(t0, chunks(mig, 1, migR, 1, []fsm.ExportPage{page}))
	dst.own(t0, 2, 2, g2After()...)
	if dst.f.ReservationCount() != 2 {
		t.Fatalf("target holds %d reservations, want 2", dst.f.ReservationCount())
	}
	now := dst.f.LastNow()
	dst.index = 500
	fresh := resultAs[*fsm.ReserveResult](t, "reserve", dst.apply(stamp(reserveEnv(now, "qu", k, 5, time.Hour, ""), 2)))
	if !fresh.Allowed || fresh.ReservationID == moved.ReservationID || fresh.ReservationID == secondID {
		t.Fatalf("Reserve at index 501 of the target: %+v, want an ID of its own", fresh)
	}
	if fsm.ReservationKey(fresh.ReservationID) != k {
		t.Fatalf("the new ID %q does not route to %q", fresh.ReservationID, k)
	}
	for _, c := range []struct {
		id               string
		actual, released int64
	}{{moved.ReservationID, 4, 6}, {fresh.ReservationID, 5, 0}, {secondID, 0, 7}} {
		r := resultAs[*fsm.ReserveResult](t, "commit", dst.apply(stamp(commitEnv(now, c.id, c.actual, ""), 2)))
		if r.Charged != c.actual || r.Released != c.released {
			t.Fatalf("commit of %q at %d: %+v, want %d released", c.id, c.actual, r, c.released)
		}
		wantErr(t, "second commit", dst.apply(stamp(commitEnv(now, c.id, c.actual, ""), 2)), fsm.ErrNoReservation)
	}
	if dst.f.ReservationCount() != 0 {
		t.Fatalf("%d reservations left after every commit", dst.f.ReservationCount())
	}
}
