package fsm_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/lease"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// TestLeaseTermChangeKeepsRemainingTime: a new leader whose clock is 10s
// ahead does not expire a lease that had 5s left at the old leader's last
// entry; its end moves by the 10s. A clock behind, and later entries of the
// same term, shift nothing.
func TestLeaseTermChangeKeepsRemainingTime(t *testing.T) {
	tt := t0 + 100*sec
	setup := func() (*termFSM, lease.Lease, lease.Lease) {
		l := newTermFSM(t, concurrency("db", 2, 10*time.Second))
		a := l.acquire(tt-5*sec, acquireOp("db", "k"))                        // ends tt+5s
		x := l.acquire(tt-4*sec, acquireOp("db", "k").withTTL(3*time.Second)) // ends tt-1s
		if !l.holds(tt, "db", "k", a.Token) {                                 // the old leader's last entry
			t.Fatal("a does not hold at tt")
		}
		return l, a, x
	}

	// Control: the same jump within one term expires a.
	l, a, _ := setup()
	if l.holds(tt+10*sec, "db", "k", a.Token) {
		t.Fatal("without a term change a lease holds past its end: the control is wrong")
	}

	l, a, x := setup()
	l.term = 2
	r := l.ok(tt+10*sec, checkOp("db", "k", a.Token))
	if !r.Allowed || r.Lease.ExpiresAt != a.ExpiresAt+10*sec || r.Held != 1 {
		t.Fatalf("check a at the new leader's first entry (+10s) = %+v, want held until its old end + 10s (%d)", r, a.ExpiresAt+10*sec)
	}
	if r.Lease.Token != a.Token || r.Lease.AcquiredAt != a.AcquiredAt || r.Lease.TTL != a.TTL {
		t.Fatalf("the shift changed more than the end: %+v vs %+v", r.Lease, a)
	}
	if l.holds(tt+10*sec, "db", "k", x.Token) {
		t.Fatal("a lease expired at the old leader's last entry came back to life")
	}
	if next, ok := l.f.NextExpiry(); !ok || next != a.ExpiresAt+10*sec {
		t.Fatalf("next expiry %d,%v; want a's shifted end %d", next, ok, a.ExpiresAt+10*sec)
	}
	// A second entry of the same term shifts nothing more.
	if r := l.ok(tt+12*sec, checkOp("db", "k", a.Token)); r.Lease.ExpiresAt != a.ExpiresAt+10*sec {
		t.Fatalf("second entry of term 2: a ends at %d, want %d", r.Lease.ExpiresAt, a.ExpiresAt+10*sec)
	}
	// A new leader whose clock is behind: time is clamped, nothing shifts.
	l.term = 3
	if r := l.ok(tt+11*sec, checkOp("db", "k", a.Token)); r.Lease.ExpiresAt != a.ExpiresAt+10*sec || r.DecidedAt != tt+12*sec {
		t.Fatalf("term 3 behind: %+v, want a ending at %d decided at the clamped now %d", r, a.ExpiresAt+10*sec, tt+12*sec)
	}
	if l.f.LastNow() != tt+12*sec {
		t.Fatalf("LastNow %d, want clamped at %d", l.f.LastNow(), tt+12*sec)
	}
	l.term = 4 // a new leader at the same now: a zero shift
	if r := l.ok(tt+12*sec, checkOp("db", "k", a.Token)); r.Lease.ExpiresAt != a.ExpiresAt+10*sec {
		t.Fatalf("term 4 at the same now: a ends at %d, want %d", r.Lease.ExpiresAt, a.ExpiresAt+10*sec)
	}
	// A new leader 1s ahead while a still has 3s left: its end and the next
	// expiry move by 1s more.
	l.term = 5
	if r := l.ok(tt+13*sec, checkOp("db", "k", a.Token)); r.Lease.ExpiresAt != a.ExpiresAt+11*sec {
		t.Fatalf("term 5 at +1s: a ends at %d, want %d", r.Lease.ExpiresAt, a.ExpiresAt+11*sec)
	}
	if next, ok := l.f.NextExpiry(); !ok || next != a.ExpiresAt+11*sec {
		t.Fatalf("next expiry %d,%v; want a's shifted end %d", next, ok, a.ExpiresAt+11*sec)
	}
	if !l.holds(tt+16*sec-1, "db", "k", a.Token) || l.holds(tt+16*sec, "db", "k", a.Token) {
		t.Fatal("a does not end exactly at its old end + 11s")
	}
}

// TestLeaseTermChangeFirstEntryDecides: the shift happens before the first
// entry of the new term decides or sweeps, whatever that entry is.
func TestLeaseTermChangeFirstEntryDecides(t *testing.T) {
	tt := t0 + 100*sec
	l := newTermFSM(t, concurrency("db", 1, 10*time.Second))
	a := l.acquire(tt-5*sec, acquireOp("db", "k")) // 5s left at tt
	l.acquire(tt, acquireOp("db", "other"))        // the old leader's last entry
	l.term = 7
	l.expire(tt + 60*sec) // a new leader a minute ahead sweeps first
	if l.f.SemaphoreCount() != 2 {
		t.Fatalf("%d semaphores after the new leader's Expire, want 2 (nothing expired)", l.f.SemaphoreCount())
	}
	r := l.ok(tt+60*sec, acquireOp("db", "k"))
	if r.Allowed || r.RetryAfter != 5*time.Second || r.Held != 1 {
		t.Fatalf("acquire on a's key = %+v, want denied for a's remaining 5s", r)
	}
	if r := l.ok(tt+65*sec, acquireOp("db", "k")); !r.Allowed || r.Lease.Token <= a.Token {
		t.Fatalf("acquire once a's remaining time ran = %+v, want allowed with a token > %d", r, a.Token)
	}
}

// TestLeaseFirstTermNoShift: the first command carrying a term has no
// earlier leader to carry time over from.
func TestLeaseFirstTermNoShift(t *testing.T) {
	a := newApplier(t, fsm.Options{}) // Term 0 entries
	a.putPolicies(t0, concurrency("db", 1, 10*time.Second))
	res := a.apply(acquireOp("db", "k").env(t0))
	lr, ok := res.(*fsm.LeaseResult)
	if !ok || !lr.Allowed {
		t.Fatalf("acquire = %v", res)
	}
	l := &termFSM{tb: t, f: a.f, index: a.index, term: 1}
	if l.holds(t0+20*sec, "db", "k", lr.Lease.Token) {
		t.Fatal("a term-0 → term-1 change shifted the leases")
	}
}

// leaseScenario builds a group at term 3 with leases on several keys,
// released and renewed ones, recorded request IDs and a denied one (not
// recorded).
func leaseScenario(t *testing.T) (*termFSM, []lease.Lease) {
	l := newTermFSM(t, withRetention(concurrency("db", 3, 10*time.Second), 30*time.Second), concurrency("one", 1, 5*time.Second))
	var ls []lease.Lease
	ls = append(ls, l.acquire(t0+1*sec, acquireOp("db", "a").withID("svc", "1")))
	ls = append(ls, l.acquire(t0+1*sec, acquireOp("db", "a")))
	l.term = 2
	ls = append(ls, l.acquire(t0+3*sec, acquireOp("db", "b").withTTL(20*time.Second)))
	ls = append(ls, l.acquire(t0+3*sec, acquireOp("one", "a").withID("svc", "2")))
	l.ok(t0+4*sec, acquireOp("one", "a").withID("svc", "denied"))
	l.ok(t0+4*sec, releaseOp("db", "a", ls[1].Token).withID("svc", "3"))
	l.term = 3
	l.ok(t0+5*sec, renewOp("db", "b", ls[2].Token).withTTL(4*time.Second).withID("svc", "4"))
	ls = append(ls, l.acquire(t0+6*sec, acquireOp("db", "c")))
	return l, ls
}

// TestLeaseSnapshotRestore: semaphores, tokens and the last term survive
// Persist → Restore (also into an FSM holding other state at a higher
// term); afterwards the original and the restored FSMs answer the same
// entries — retries, a term change with a clock jump, new leases, expiry —
// alike, with byte-identical snapshots.
func TestLeaseSnapshotRestore(t *testing.T) {
	a, ls := leaseScenario(t)
	snap := snapshotBytes(t, a.f)

	fresh := fsm.New(fsm.Options{})
	restoreFrom(t, fresh, snap)
	dirty := newTermFSM(t, concurrency("db", 9, time.Hour))
	dirty.term = 9
	dirty.acquire(t0+50*sec, acquireOp("db", "a"))
	restoreFrom(t, dirty.f, snap)
	others := []*fsm.FSM{fresh, dirty.f}
	for i, f := range others {
		if got := snapshotBytes(t, f); !bytes.Equal(got, snap) {
			t.Fatalf("restored FSM %d snapshots differently", i)
		}
		n1, ok1 := a.f.NextExpiry()
		n2, ok2 := f.NextExpiry()
		if f.SemaphoreCount() != a.f.SemaphoreCount() || f.DedupeLen() != a.f.DedupeLen() || f.LastNow() != a.f.LastNow() || n1 != n2 || ok1 != ok2 {
			t.Fatalf("restored FSM %d: counts, time or next expiry differ", i)
		}
	}

	type step struct {
		term uint64
		env  *raftcmdv1.Envelope
	}
	now := t0 + 6*sec
	steps := []step{
		{3, checkOp("db", "a", ls[0].Token).env(now)},
		{3, checkOp("db", "b", ls[2].Token).env(now)},
		{3, acquireOp("db", "a").withID("svc", "1").env(now)},              // duplicate
		{3, releaseOp("db", "a", ls[1].Token).withID("svc", "3").env(now)}, // duplicate
		{3, acquireOp("one", "a").withID("svc", "denied").env(now)},        // denied again, afresh
		{3, acquireOp("db", "a").withID("svc", "2").env(now)},              // reused
		{3, acquireOp("db", "a").env(now + 1*sec)},
		// A new leader 30s ahead: b (ends +9s) and the "one" lease (+8s) hold on.
		{4, checkOp("db", "b", ls[2].Token).env(now + 31*sec)},
		{4, checkOp("one", "a", ls[3].Token).env(now + 31*sec)},
		{4, acquireOp("one", "a").env(now + 31*sec)},
		{4, renewOp("db", "c", ls[4].Token).env(now + 32*sec)},
		{4, releaseOp("db", "b", ls[2].Token).env(now + 32*sec)},
		{4, expireEnv(now + 34*sec)},
		{5, checkOp("db", "c", ls[4].Token).env(now + 20*sec)}, // behind
		{5, acquireOp("db", "c").withID("svc", "5").env(now + 40*sec)},
		{5, expireEnv(now + 400*sec)},
		{5, acquireOp("db", "c").env(now + 400*sec)},
	}
	held := map[int]bool{7: true, 8: true, 10: true, 11: true, 13: true}
	for i, s := range steps {
		idx := a.index + uint64(i) + 1
		data := encode(t, s.env)
		want := toLeaseOutcome(t, applyTermLog(a.f, idx, s.term, data))
		if held[i] && (!want.Lease.Allowed || want.Lease.Lease.Token == 0) {
			t.Fatalf("step %d: %+v, want the lease held across the term change", i, want)
		}
		wantSnap := snapshotBytes(t, a.f)
		for j, f := range others {
			got := toLeaseOutcome(t, applyTermLog(f, idx, s.term, data))
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d: restored FSM %d answered %+v, the original %+v", i, j, got, want)
			}
			if !bytes.Equal(snapshotBytes(t, f), wantSnap) {
				t.Fatalf("step %d: restored FSM %d snapshots differently", i, j)
			}
		}
	}
	if a.f.SemaphoreCount() != 1 {
		t.Fatalf("%d semaphores at the end, want 1", a.f.SemaphoreCount())
	}
}

// TestLeaseRefundOfLeaseRequestID: Refund names an Admit's request ID; a
// lease operation's is not one.
func TestLeaseRefundOfLeaseRequestID(t *testing.T) {
	l := newTermFSM(t, concurrency("db", 1, 10*time.Second))
	l.acquire(t0, acquireOp("db", "k").withID("svc", "r"))
	l.expire(t0)
	before := snapshotBytes(t, l.f)
	res := l.apply(refundEnv(t0, "svc", "r"))
	if err, ok := res.(error); !ok || !errors.Is(err, fsm.ErrNothingToRefund) {
		t.Errorf("Refund of a lease acquire's request ID = %#v, want ErrNothingToRefund", res)
	}
	if !bytes.Equal(before, snapshotBytes(t, l.f)) {
		t.Error("Refund of a lease acquire's request ID changed the snapshot")
	}
}
