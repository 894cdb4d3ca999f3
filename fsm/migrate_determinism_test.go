package fsm_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// driver records random data commands on a few keys into a log.
type driver struct {
	*logRec
	rng    *rand.Rand
	keys   []string
	epoch  uint64
	now    int64
	tokens map[string][]int64
	resIDs []string
	admits []*raftcmdv1.Envelope // admits with request IDs, for retries and refunds
	n      int
}

func newDriver(tb testing.TB, seed uint64, opts fsm.Options, keys []string) *driver {
	return &driver{logRec: newLogRec(tb, opts), rng: rand.New(rand.NewPCG(seed, 11)), keys: keys, now: t0, tokens: map[string][]int64{}}
}

var driverPolicies = []string{"tb", "fw", "sw", "sl", "qu"}

func (d *driver) op() *raftcmdv1.Envelope {
	k := d.keys[d.rng.IntN(len(d.keys))]
	p := driverPolicies[d.rng.IntN(len(driverPolicies))]
	d.n++
	rid := fmt.Sprintf("r%d", d.n)
	switch d.rng.IntN(11) {
	case 0, 1:
		env := admitIDEnv(d.now, "c", rid, p, k, 1+d.rng.Int64N(3))
		d.admits = append(d.admits, env)
		return env
	case 2:
		if len(d.admits) > 0 {
			env := d.admits[d.rng.IntN(len(d.admits))]
			if d.rng.IntN(2) == 0 {
				return admitIDEnv(d.now, "c", env.GetAdmit().GetRequestId(), env.GetAdmit().GetPolicy(), env.GetAdmit().GetKey(), env.GetAdmit().GetCost())
			}
			return &raftcmdv1.Envelope{NowUnixNano: d.now, Body: &raftcmdv1.Envelope_Refund{Refund: &raftcmdv1.Refund{
				Caller: "c", RequestId: env.GetAdmit().GetRequestId(), Key: env.GetAdmit().GetKey()}}}
		}
		return admitEnv(d.now, p, k, 1)
	case 3:
		return peekEnv(d.now, p, k)
	case 4:
		op := acquireOp("conc", k).withTTL(time.Duration(1+d.rng.IntN(20)) * time.Second)
		op.jitter = d.rng.Uint32() // as a leader's handler draws it
		if d.rng.IntN(2) == 0 {
			op = op.withID("svc", rid)
		}
		return op.env(d.now)
	case 5, 6:
		if toks := d.tokens[k]; len(toks) > 0 {
			tok := toks[d.rng.IntN(len(toks))]
			if d.rng.IntN(2) == 0 {
				return renewOp("conc", k, tok).env(d.now)
			}
			return releaseOp("conc", k, tok).withID("svc", rid).env(d.now)
		}
		return checkOp("conc", k, 1).env(d.now)
	case 7:
		return reserveEnv(d.now, []string{"qu", "tb"}[d.rng.IntN(2)], k, 1+d.rng.Int64N(5), time.Duration(1+d.rng.IntN(30))*time.Second, rid)
	case 8:
		if len(d.resIDs) > 0 {
			return commitEnv(d.now, d.resIDs[d.rng.IntN(len(d.resIDs))], d.rng.Int64N(8), "")
		}
		return expireEnv(d.now)
	case 9:
		return batchEnv(d.now, admitEnv(0, p, k, 1), peekEnv(0, p, d.keys[0]), acquireOp("conc", k).env(0))
	default:
		return expireEnv(d.now)
	}
}

// run records n random commands, time moving by up to 3s between them.
func (d *driver) run(n int) {
	for range n {
		d.now += d.rng.Int64N(3 * sec)
		env := stamp(d.op(), d.epoch)
		res := d.apply(env)
		rs := []any{res}
		if b, ok := res.(*fsm.BatchResult); ok {
			rs = b.Results
		}
		for _, r := range rs {
			switch r := r.(type) {
			case *fsm.LeaseResult:
				if r.Allowed && r.Lease.Token != 0 {
					op := env.GetLease()
					if op == nil {
						op = env.GetBatch().GetOps()[2].GetLease()
					}
					k := op.GetKey()
					acquired := op.GetKind() == raftcmdv1.LeaseOp_KIND_ACQUIRE && !r.Duplicate
					if toks := d.tokens[k]; acquired && len(toks) > 0 && r.Lease.Token <= slices.Max(toks) {
						d.tb.Fatalf("key %s: token %d after %d (tokens must increase, across moves too)", k, r.Lease.Token, slices.Max(toks))
					}
					d.tokens[k] = append(d.tokens[k], r.Lease.Token)
				}
			case *fsm.ReserveResult:
				if r.Allowed && r.ReservationID != "" && !slices.Contains(d.resIDs, r.ReservationID) {
					d.resIDs = append(d.resIDs, r.ReservationID)
				}
			}
		}
	}
}

// checkReplay replays log on two fresh replicas, which must answer as the
// recording did and hold byte-identical snapshots after every entry; and,
// for each cut, on a replica restored from a snapshot taken after entry
// cut, which must end in the same snapshot.
func checkReplay(t *testing.T, name string, l *logRec, opts fsm.Options, cuts ...int) {
	t.Helper()
	a, b := fsm.New(opts), fsm.New(opts)
	for i, e := range l.entries {
		ra, rb := a.Apply(e), b.Apply(e)
		if describeMig(ra) != l.results[i] || describeMig(rb) != l.results[i] {
			t.Fatalf("%s entry %d: replicas answer %s and %s, the recording %s", name, i+1, describeMig(ra), describeMig(rb), l.results[i])
		}
		if !bytes.Equal(snapshotBytes(t, a), snapshotBytes(t, b)) {
			t.Fatalf("%s: the replicas' snapshots differ after entry %d", name, i+1)
		}
	}
	final := snapshotBytes(t, a)
	if !bytes.Equal(final, snapshotBytes(t, l.f)) {
		t.Fatalf("%s: the replay ends in another snapshot than the recording", name)
	}
	for _, cut := range cuts {
		c := fsm.New(opts)
		for _, e := range l.entries[:cut] {
			c.Apply(e)
		}
		d := fsm.New(opts)
		restoreFrom(t, d, snapshotBytes(t, c))
		for i, e := range l.entries[cut:] {
			if r := describeMig(d.Apply(e)); r != l.results[cut+i] {
				t.Fatalf("%s restored after entry %d: entry %d answers %s, the recording %s", name, cut, cut+i+1, r, l.results[cut+i])
			}
		}
		if !bytes.Equal(snapshotBytes(t, d), final) {
			t.Fatalf("%s: restored after entry %d, the replica ends in another snapshot", name, cut)
		}
	}
}

// Replicas applying the same logs with migrations and plans hold the same
// state byte for byte, also when restored from a snapshot mid-way.
func TestMigrationDeterminism(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { testMigrationDeterminism(t, seed) })
	}
}

func testMigrationDeterminism(t *testing.T, seed uint64) {
	r2 := shard.SlotRange{Start: 100, End: 200}
	mig2, mig3 := fsm.MigrationID(7, 1), fsm.MigrationID(8, 0)
	opts := fsm.Options{DataGroup: true}
	var keys []string
	keys = append(keys, keysIn(t, "in", 4, migR)...)
	keys = append(keys, keysIn(t, "r2", 2, r2)...)
	keys = append(keys, keysIn(t, "lo", 2, lowHalf, migR, r2)...)
	keys = append(keys, keysIn(t, "hi", 3, highHalf)...)

	// Group 1: freezes migR and r2, unfreezes r2, loses migR.
	src := newDriver(t, seed, opts, keys)
	src.epoch = 1
	src.must(setPoliciesEnv(t0, migPolicies()...))
	src.must(setOwnershipEnv(t0, 1, 1, g1Before()...))
	src.run(60)
	src.must(freezeEnv(src.now, mig, migR))
	src.must(freezeEnv(src.now, mig2, r2))
	cutFrozen := len(src.entries)
	src.run(30)
	pages := exportAll(t, src.f, mig, migR, 100)
	srcNow := src.now
	src.must(unfreezeEnv(src.now, mig2))
	src.run(20)
	src.must(setOwnershipEnv(src.now, 1, 2, g1After()...))
	src.epoch = 2
	src.run(30)
	if len(pages) < 4 {
		t.Fatalf("%d export pages, want several", len(pages))
	}

	// Group 2: two attempts at importing migR, an import dropped, then
	// migR is its own.
	dst := newDriver(t, seed+100, opts, keys[len(keys)-3:])
	dst.epoch = 1
	dst.must(setPoliciesEnv(t0, migPolicies()...))
	dst.must(setOwnershipEnv(t0, 2, 1, g2Before()...))
	dst.now = srcNow - 20*sec
	dst.run(30)
	cs := chunks(mig, 1, migR, 1, pages)
	for _, c := range cs[:2] {
		dst.must(c.env(dst.now))
	}
	cutImporting := len(dst.entries)
	dst.run(10)
	dst.apply(cs[3].env(dst.now)) // out of order: refused
	for _, c := range chunks(mig, 2, migR, 1, pages) {
		dst.must(c.env(dst.now))
	}
	other := chunks(mig3, 1, shard.SlotRange{Start: 700, End: 800}, 1, pages[:1])[0]
	dst.must(other.env(dst.now))
	dst.must(dropImportEnv(dst.now, mig3, other.r))
	dst.apply(other.env(dst.now)) // dropped: refused
	cutImported := len(dst.entries)
	dst.must(setOwnershipEnv(dst.now, 2, 2, g2After()...))
	dst.epoch, dst.keys = 2, append(keys[:4:4], keys[len(keys)-3:]...)
	for _, k := range keys[:4] { // the moved keys: their tokens keep increasing at the target
		dst.tokens[k] = append(dst.tokens[k], src.tokens[k]...)
	}
	dst.run(40)

	checkReplay(t, "group 1", src.logRec, opts, cutFrozen, cutFrozen+15, len(src.entries)-10)
	checkReplay(t, "group 2", dst.logRec, opts, cutImporting, cutImported, cutImported+1)

	// The meta group: plans that complete, are cancelled, fail, and more
	// than KeptPlans of them.
	meta := newLogRec(t, fsm.Options{})
	mp := planMeta{logRec: meta, now: t0}
	mp.setup()
	id := mp.create(addGroupStep(3, "n2", "n4"), moveStep(1, 3, 0, 100), moveStep(2, 1, 2048, 2100))
	mp.update(id, 0, fsm.PhasePending, fsm.PhaseDone, 0)
	mp.move(id, 1)
	mp.update(id, 2, fsm.PhasePending, fsm.PhaseCopying, 0)
	cutPlans := len(meta.entries)
	mp.newAttempt(id, 2)
	meta.apply(cancelPlanEnv(mp.tick(), id))
	mp.update(id, 2, fsm.PhaseCopying, fsm.PhaseRollingBack, 0)
	mp.update(id, 2, fsm.PhaseRollingBack, fsm.PhaseRolledBack, 0)
	id = mp.create(moveStep(1, 2, 200, 300))
	mp.update(id, 0, fsm.PhasePending, fsm.PhaseCopying, 0)
	meta.apply(updatePlanEnv(mp.tick(), &raftcmdv1.UpdatePlan{Id: id, Step: 0, FromPhase: fsm.PhaseCopying, Error: "boom"}))
	mp.update(id, 0, fsm.PhaseCopying, fsm.PhaseRollingBack, 0)
	mp.update(id, 0, fsm.PhaseRollingBack, fsm.PhaseRolledBack, 0)
	for i := range fsm.KeptPlans + 3 {
		id := mp.create(addGroupStep(uint32(10+i), "n1"))
		meta.apply(cancelPlanEnv(mp.tick(), id))
	}
	cutMany := len(meta.entries)
	meta.apply(updatePlanEnv(mp.tick(), &raftcmdv1.UpdatePlan{Id: id, Step: 0, FromPhase: fsm.PhaseRolledBack, ToPhase: fsm.PhaseDone}))
	mp.create(moveStep(3, 1, 0, 50))
	checkReplay(t, "meta", meta, fsm.Options{}, cutPlans, cutPlans+2, cutMany)
}
