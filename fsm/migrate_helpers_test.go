package fsm_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// The layout of the migration tests: group 1 owns the low half of the
// slots and group 2 the high half, both since epoch 1. migR moves from 1 to
// 2; the map that says so is at epoch 2.
var (
	lowHalf  = shard.SlotRange{Start: 0, End: 2048}
	highHalf = shard.SlotRange{Start: 2048, End: shard.SlotCount}
	migR     = shard.SlotRange{Start: 512, End: 640}
	// mig names the move of migR: step 0 of plan 7.
	mig = fsm.MigrationID(7, 0)
)

// g1Before and g1After are group 1's ownership before (epoch 1) and after
// (epoch 2) migR left it; g2Before and g2After group 2's.
func g1Before() []shard.Assignment { return []shard.Assignment{{Range: lowHalf, Group: 1, Epoch: 1}} }
func g1After() []shard.Assignment {
	return []shard.Assignment{
		{Range: shard.SlotRange{Start: 0, End: migR.Start}, Group: 1, Epoch: 1},
		{Range: shard.SlotRange{Start: migR.End, End: lowHalf.End}, Group: 1, Epoch: 1},
	}
}
func g2Before() []shard.Assignment { return []shard.Assignment{{Range: highHalf, Group: 2, Epoch: 1}} }
func g2After() []shard.Assignment {
	return []shard.Assignment{{Range: migR, Group: 2, Epoch: 2}, {Range: highHalf, Group: 2, Epoch: 1}}
}

// migPolicies has one policy of each algorithm.
func migPolicies() []admission.Policy {
	return []admission.Policy{
		tokenBucket("tb", 10, time.Minute, 10, 5),
		{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 5, Period: time.Minute},
		{Name: "sw", Algorithm: admission.AlgorithmSlidingWindow, Limit: 6, Period: time.Minute},
		{Name: "sl", Algorithm: admission.AlgorithmSlidingLog, Limit: 4, Period: time.Minute},
		{Name: "qu", Algorithm: admission.AlgorithmQuota, Limit: 100, MaxCost: 50, Calendar: admission.CalendarYear},
		concurrency("conc", 3, time.Minute),
	}
}

// dataGroup returns a data group's FSM holding migPolicies (set at t0) and
// owning as at map epoch epoch (nothing when as is empty).
func dataGroup(tb testing.TB, group shard.GroupID, epoch uint64, as ...shard.Assignment) *applier {
	tb.Helper()
	a := newApplier(tb, fsm.Options{DataGroup: true})
	a.setPolicies(t0, migPolicies()...)
	if len(as) > 0 {
		if res := a.apply(setOwnershipEnv(t0, group, epoch, as...)); res != nil {
			tb.Fatalf("SetOwnership(group %d, epoch %d): %v", group, epoch, res)
		}
	}
	return a
}

// own applies a SetOwnership that must succeed.
func (a *applier) own(now int64, group shard.GroupID, epoch uint64, as ...shard.Assignment) {
	a.tb.Helper()
	if res := a.apply(setOwnershipEnv(now, group, epoch, as...)); res != nil {
		a.tb.Fatalf("SetOwnership(group %d, epoch %d): %v", group, epoch, res)
	}
}

// keysIn returns n distinct keys starting with prefix whose slots lie in r
// and outside every range of not.
func keysIn(tb testing.TB, prefix string, n int, r shard.SlotRange, not ...shard.SlotRange) []string {
	tb.Helper()
	var out []string
	for i := 0; len(out) < n && i < 1_000_000; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		s := shard.SlotOf(k)
		if r.Contains(s) && !slices.ContainsFunc(not, func(x shard.SlotRange) bool { return x.Contains(s) }) {
			out = append(out, k)
		}
	}
	if len(out) < n {
		tb.Fatalf("found %d keys in %v, want %d", len(out), r, n)
	}
	return out
}

// stamp sets the map epoch of env and of the ops of a batch env.
func stamp(env *raftcmdv1.Envelope, epoch uint64) *raftcmdv1.Envelope {
	env.MapEpoch = epoch
	for _, op := range env.GetBatch().GetOps() {
		op.MapEpoch = epoch
	}
	return env
}

func freezeEnv(now int64, m uint64, r shard.SlotRange) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_FreezeSlots{FreezeSlots: &raftcmdv1.FreezeSlots{
		Migration: m, Start: uint32(r.Start), End: uint32(r.End)}}}
}

func unfreezeEnv(now int64, m uint64) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_UnfreezeSlots{UnfreezeSlots: &raftcmdv1.UnfreezeSlots{Migration: m}}}
}

func dropImportEnv(now int64, m uint64, r shard.SlotRange) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_DropImport{DropImport: &raftcmdv1.DropImport{
		Migration: m, Start: uint32(r.Start), End: uint32(r.End)}}}
}

// chunk is one ImportSlots.
type chunk struct {
	m, attempt uint64
	r          shard.SlotRange
	seq        uint32
	last       bool
	srcNow     int64
	mapEpoch   uint64
	state      *raftcmdv1.SlotState
}

func (c chunk) env(now int64) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_ImportSlots{ImportSlots: &raftcmdv1.ImportSlots{
		Migration: c.m, Attempt: c.attempt, Start: uint32(c.r.Start), End: uint32(c.r.End), Seq: c.seq, Last: c.last,
		SourceNowUnixNano: c.srcNow, MapEpoch: c.mapEpoch, State: c.state}}}
}

// chunks turns export pages into the chunks of one attempt: seq 0..n-1,
// the last one last.
func chunks(m, attempt uint64, r shard.SlotRange, mapEpoch uint64, pages []fsm.ExportPage) []chunk {
	out := make([]chunk, len(pages))
	for i, p := range pages {
		out[i] = chunk{m: m, attempt: attempt, r: r, seq: uint32(i), last: i == len(pages)-1, srcNow: p.SourceNow,
			mapEpoch: mapEpoch, state: p.State}
	}
	return out
}

// importAll applies every chunk at now; each must succeed.
func (a *applier) importAll(now int64, cs []chunk) {
	a.tb.Helper()
	for _, c := range cs {
		if res := a.apply(c.env(now)); res != nil {
			a.tb.Fatalf("import chunk %d of attempt %d: %v", c.seq, c.attempt, res)
		}
	}
}

// exportAll reads every page of migration m's slots r from f, maxBytes a
// page, checking the cursor protocol: every page but the last has records
// and a cursor and is not Done; the last is Done.
func exportAll(tb testing.TB, f *fsm.FSM, m uint64, r shard.SlotRange, maxBytes int) []fsm.ExportPage {
	tb.Helper()
	var pages []fsm.ExportPage
	var cursor []byte
	for range 100_000 {
		p, err := f.ExportSlots(m, r, cursor, maxBytes)
		if err != nil {
			tb.Fatalf("ExportSlots(page %d): %v", len(pages), err)
		}
		if got := len(recordsOf(tb, p.State)); got != p.Records {
			tb.Fatalf("page %d says %d records and holds %d", len(pages), p.Records, got)
		}
		pages = append(pages, p)
		if p.Done {
			if p.Next != nil {
				tb.Fatalf("the last page has a cursor %q", p.Next)
			}
			return pages
		}
		if p.Records == 0 || len(p.Next) == 0 {
			tb.Fatalf("page %d is not the last but has %d records and cursor %q", len(pages)-1, p.Records, p.Next)
		}
		cursor = p.Next
	}
	tb.Fatal("ExportSlots never said Done")
	return nil
}

// recordsOf lists the records of s, each marshalled with its table's name.
func recordsOf(tb testing.TB, s *raftcmdv1.SlotState) []string {
	tb.Helper()
	var out []string
	add := func(table string, m proto.Message) {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, table+":"+string(b))
	}
	for _, r := range s.GetBuckets() {
		add("bucket", r)
	}
	for _, r := range s.GetSemaphores() {
		add("sem", r)
	}
	for _, r := range s.GetReservations() {
		add("reservation", r)
	}
	for _, r := range s.GetDedupe() {
		add("dedupe", r)
	}
	return out
}

// pageRecords lists the records of every page, sorted.
func pageRecords(tb testing.TB, pages []fsm.ExportPage) []string {
	var out []string
	for _, p := range pages {
		out = append(out, recordsOf(tb, p.State)...)
	}
	slices.Sort(out)
	return out
}

// counts is the size of each table of an FSM.
type counts struct{ buckets, sems, reservations, dedupe int }

func countsOf(f *fsm.FSM) counts {
	return counts{f.BucketCount(), f.SemaphoreCount(), f.ReservationCount(), f.DedupeLen()}
}

// stateCounts counts the records of each table in s.
func stateCounts(s *raftcmdv1.SlotState) counts {
	return counts{len(s.GetBuckets()), len(s.GetSemaphores()), len(s.GetReservations()), len(s.GetDedupe())}
}

// resultAs returns res as a T, failing the test when it is something else.
func resultAs[T any](tb testing.TB, what string, res any) T {
	tb.Helper()
	r, ok := res.(T)
	if !ok {
		var want T
		tb.Fatalf("%s = %T (%v), want %T", what, res, res, want)
	}
	return r
}

// wantErr fails the test unless res is an error wrapping target.
func wantErr(tb testing.TB, what string, res any, target error) error {
	tb.Helper()
	err, _ := res.(error)
	if !errors.Is(err, target) {
		tb.Fatalf("%s = %v, want an error wrapping %v", what, res, target)
	}
	return err
}

// logRec applies envelopes to a live FSM and records the entries, for
// replicas to replay.
type logRec struct {
	tb      testing.TB
	f       *fsm.FSM
	entries []*raft.Log
	results []string
}

func newLogRec(tb testing.TB, opts fsm.Options) *logRec {
	return &logRec{tb: tb, f: fsm.New(opts)}
}

func (l *logRec) apply(env *raftcmdv1.Envelope) any {
	l.tb.Helper()
	e := &raft.Log{Index: uint64(len(l.entries) + 1), Term: 1, Type: raft.LogCommand, Data: encode(l.tb, env)}
	l.entries = append(l.entries, e)
	res := l.f.Apply(e)
	l.results = append(l.results, describeMig(res))
	return res
}

// describeMig is an Apply result as text, errors with their message and
// plans in full.
func describeMig(res any) string {
	switch r := res.(type) {
	case error:
		return "error: " + r.Error()
	case *fsm.PlanResult:
		return "plan: " + prototext.MarshalOptions{}.Format(r.Plan)
	case *fsm.BatchResult:
		var parts []string
		for _, x := range r.Results {
			parts = append(parts, describeMig(x))
		}
		return fmt.Sprintf("batch%q", parts)
	}
	return describeResult(res)
}

// must applies env, whose result must not be an error.
func (l *logRec) must(env *raftcmdv1.Envelope) any {
	l.tb.Helper()
	res := l.apply(env)
	if err, ok := res.(error); ok {
		l.tb.Fatalf("entry %d (%T): %v", len(l.entries), env.GetBody(), err)
	}
	return res
}

// migFixture is group 1 (src) and an oracle (orc, a group owning every
// slot that never migrates) that applied the same commands at the same
// indexes and times: state of every kind for keys of migR, and some for a
// key of group 1 outside it.
type migFixture struct {
	t        *testing.T
	src, orc *applier
	// Keys of migR: one per algorithm, two semaphores, and more buckets.
	kTB, kFW, kSW, kSL, kQU, kC, kC2 string
	extra                            []string
	kOut                             string // group 1's, outside migR
	first                            map[string]any
	tokens                           map[string][]int64 // lease tokens issued at the source, by key
	resQU, resTB                     string             // reservation IDs
	tf                               int64              // the freeze's time
}

// The fixture's state in migR, and outside it, by table.
var (
	fixtureIn  = counts{buckets: 17, sems: 2, reservations: 2, dedupe: 20}
	fixtureOut = counts{buckets: 1, sems: 1, reservations: 0, dedupe: 2}
)

func newMigFixture(t *testing.T) *migFixture {
	t.Helper()
	x := &migFixture{t: t, src: dataGroup(t, 1, 1, g1Before()...),
		orc:   dataGroup(t, 1, 1, shard.Assignment{Range: shard.AllSlots(), Group: 1, Epoch: 1}),
		first: map[string]any{}, tokens: map[string][]int64{}}
	ks := keysIn(t, "m", 19, migR)
	x.kTB, x.kFW, x.kSW, x.kSL, x.kQU, x.kC, x.kC2, x.extra = ks[0], ks[1], ks[2], ks[3], ks[4], ks[5], ks[6], ks[7:]
	x.kOut = keysIn(t, "o", 1, lowHalf, migR)[0]

	t1, t2, t3 := t0+sec, t0+2*sec, t0+3*sec
	x.both("a-tb", admitIDEnv(t1, "c", "a-tb", "tb", x.kTB, 3))
	x.both("", admitEnv(t1, "tb", x.kTB, 1))
	x.both("a-fw", admitIDEnv(t1, "c", "a-fw", "fw", x.kFW, 2))
	x.both("a-sw", admitIDEnv(t1, "c", "a-sw", "sw", x.kSW, 2))
	x.both("a-sl", admitIDEnv(t1, "c", "a-sl", "sl", x.kSL, 1))
	x.both("", admitEnv(t1, "sl", x.kSL, 1))
	x.both("a-qu", admitIDEnv(t1, "c", "a-qu", "qu", x.kQU, 10))
	x.both("a-ref", admitIDEnv(t1, "c", "a-ref", "fw", x.kFW, 1))
	x.both("", &raftcmdv1.Envelope{NowUnixNano: t1, Body: &raftcmdv1.Envelope_Refund{Refund: &raftcmdv1.Refund{
		Caller: "c", RequestId: "a-ref", Key: x.kFW}}})
	for i, k := range x.extra {
		x.both("", admitIDEnv(t1, "c", fmt.Sprintf("x%d", i), "tb", k, 1))
	}
	x.both("o-tb", admitIDEnv(t1, "c", "o-tb", "tb", x.kOut, 2))

	x.lease("l1", acquireOp("conc", x.kC).withID("svc", "l1").env(t2))
	x.lease("", acquireOp("conc", x.kC).env(t2))
	x.lease("lo", acquireOp("conc", x.kOut).withID("svc", "lo").env(t2))

	x.resQU = resultAs[*fsm.ReserveResult](t, "reserve", x.both("res1", reserveEnv(t3, "qu", x.kQU, 20, time.Hour, "res1"))).ReservationID
	x.resTB = resultAs[*fsm.ReserveResult](t, "reserve", x.both("", reserveEnv(t3, "tb", x.kTB, 2, time.Hour, ""))).ReservationID

	// kC2: three leases at one instant (tokens run ahead of the log time),
	// all released: the semaphore holds nothing but its last token.
	x.tf = t0 + 4*sec
	var c2 []int64
	for range 3 {
		c2 = append(c2, x.lease("", acquireOp("conc", x.kC2).env(x.tf)).Lease.Token)
	}
	for _, tok := range c2 {
		x.both("", releaseOp("conc", x.kC2, tok).env(x.tf))
	}
	if c2[2] != x.tf+2 {
		t.Fatalf("tokens %v at %d, want them to run ahead of the log time", c2, x.tf)
	}
	return x
}

// both applies env (map epoch 1) to the source and the oracle, which must
// answer alike, and keeps the first answer under rid.
func (x *migFixture) both(rid string, env *raftcmdv1.Envelope) any {
	x.t.Helper()
	res := x.src.apply(stamp(env, 1))
	if o := x.orc.apply(env); describeMig(o) != describeMig(res) {
		x.t.Fatalf("%T: source %s, oracle %s", env.GetBody(), describeMig(res), describeMig(o))
	}
	if err, ok := res.(error); ok {
		x.t.Fatalf("%T: %v", env.GetBody(), err)
	}
	if rid != "" {
		x.first[rid] = res
	}
	return res
}

// lease applies a lease op to both and records the token issued.
func (x *migFixture) lease(rid string, env *raftcmdv1.Envelope) *fsm.LeaseResult {
	x.t.Helper()
	r := resultAs[*fsm.LeaseResult](x.t, "lease", x.both(rid, env))
	if !r.Allowed {
		x.t.Fatalf("lease op refused: %+v", r)
	}
	k := env.GetLease().GetKey()
	x.tokens[k] = append(x.tokens[k], r.Lease.Token)
	return r
}

func (x *migFixture) freeze() {
	x.t.Helper()
	if res := x.src.apply(freezeEnv(x.tf, mig, migR)); res != nil {
		x.t.Fatalf("FreezeSlots: %v", res)
	}
}
