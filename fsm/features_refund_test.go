package fsm_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
)

// peekHistory is a group with policy pk (10/s, burst 5: T = 100ms) and two
// units of pk/k spent at t0.
func peekHistory(tb testing.TB) *applier {
	tb.Helper()
	a := newApplier(tb, fsm.Options{})
	a.putPolicies(t0, tokenBucket("pk", 10, time.Second, 5, 5))
	a.decide(t0, admitOpts{}, chk{"pk", "k", 2})
	return a
}

func TestPeek(t *testing.T) {
	a, twin := peekHistory(t), peekHistory(t)
	const T = 100 * time.Millisecond
	k := chk{"pk", "k", 1}

	// A fresh key: full.
	if p := a.unchanged("peek fresh", peekEnv(t0, "pk", "new"), chk{"pk", "new", 1}).(*fsm.PeekResult); !p.Decision.Allowed ||
		p.Decision.Remaining != 5 || p.Decision.Limit != 5 || p.Decision.ResetAfter != 0 || p.Decision.RetryAfter != 0 || p.PolicyVersion != 1 || p.At != t0 {
		t.Fatalf("peek of a fresh key: %+v", p)
	}
	if a.f.BucketCount() != 1 {
		t.Fatalf("a peek created a bucket: BucketCount %d", a.f.BucketCount())
	}
	// Later, time moves but nothing else: the snapshot equals the twin's
	// after an Expire at the same time.
	now := t0 + int64(50*time.Millisecond)
	before := a.f.State("pk", "k")
	p := a.peek(now, "pk", "k")
	if got := a.f.State("pk", "k"); !statesEqual(got, before) {
		t.Fatalf("peek moved the state %+v -> %+v", before, got)
	}
	checkOnlyTimeMoved(t, "peek", a, twin, now)
	// 2 spent at t0, 50ms later: TAT +150ms, 3 whole units left.
	if d := p.Decision; !d.Allowed || d.Remaining != 3 || d.ResetAfter != 150*time.Millisecond || p.At != now {
		t.Fatalf("peek after spending 2: %+v", p)
	}
	// The next Admit of cost 1 agrees with the peek.
	r := a.decide(now, admitOpts{}, k)
	if !r.Decision.Allowed || r.Decision.Remaining != p.Decision.Remaining-1 || r.Decision.ResetAfter != p.Decision.ResetAfter+T {
		t.Fatalf("admit after peek %+v: %+v", p.Decision, r.Decision)
	}
	// Empty the bucket; the peek and the next admit agree on the denial.
	a.decide(now, admitOpts{}, chk{"pk", "k", 2})
	p = *a.unchanged("peek empty", peekEnv(now, "pk", "k"), k).(*fsm.PeekResult)
	r = *a.unchanged("denied after peek", multiEnv(now, admitOpts{}, k), k).(*fsm.AdmitResult)
	if p.Decision.Allowed || r.Decision.Allowed || p.Decision != r.Decision || p.Decision.Remaining != 0 || p.Decision.RetryAfter != 50*time.Millisecond {
		t.Fatalf("empty bucket: peek %+v, admit %+v; want the same denial, retry in 50ms", p.Decision, r.Decision)
	}
	// At the retry time both allow.
	now += int64(p.Decision.RetryAfter)
	if p := a.peek(now, "pk", "k"); !p.Decision.Allowed || p.Decision.Remaining != 1 {
		t.Fatalf("peek at the retry time: %+v", p)
	}
	if r := a.decide(now, admitOpts{}, k); !r.Decision.Allowed || r.Decision.Remaining != 0 {
		t.Fatalf("admit at the retry time: %+v", r)
	}

	// Refusals.
	if err := a.applyErr(peekEnv(now, "nope", "k")); !errors.Is(err, fsm.ErrUnknownPolicy) {
		t.Fatalf("peek of an unknown policy: %v", err)
	}
	if err := a.applyErr(peekEnv(now, "pk", "")); !errors.Is(err, admission.ErrInvalidRequest) || fieldOf(err) != "key" {
		t.Fatalf("peek of an empty key: %v (field %q)", err, fieldOf(err))
	}
}

func TestRefund(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("rf", 10, time.Hour, 10, 10)) // T = 6m
	k := chk{"rf", "k", 3}
	first := a.decide(t0, admitOpts{caller: "svc", rid: "r1"}, k)
	if !first.Decision.Allowed || first.Decision.Remaining != 7 {
		t.Fatalf("admit: %+v", first)
	}
	now := t0 + int64(time.Second)
	if r := a.refund(now, "svc", "r1"); !r.Refunded || r.Cost != 3 || r.RefundedAt != now {
		t.Fatalf("refund: %+v, want 3 given back at +1s", r)
	}
	if p := a.peek(now, "rf", "k"); p.Decision.Remaining != 10 {
		t.Fatalf("after the refund: %+v, want 10 remaining", p)
	}
	// A second refund gives nothing back and changes nothing.
	res := a.unchanged("second refund", refundEnv(now, "svc", "r1"), k)
	if r := res.(*fsm.RefundResult); r.Refunded || r.Cost != 3 || r.RefundedAt != now {
		t.Fatalf("second refund: %+v, want refunded=false, cost 3, at the first refund's time", r)
	}
	// The admit's retry still gets its first answer.
	if got := a.decide(now, admitOpts{caller: "svc", rid: "r1"}, k); !reflect.DeepEqual(got, dupOf(first)) {
		t.Fatalf("admit retry after the refund: %+v, want %+v", got, dupOf(first))
	}

	// Nothing recorded, or recorded but denied.
	for _, c := range []struct{ caller, rid string }{{"svc", "never"}, {"other", "r1"}, {"", "r1"}} {
		if err := a.unchanged("unknown refund", refundEnv(now, c.caller, c.rid), k).(error); !errors.Is(err, fsm.ErrNothingToRefund) {
			t.Fatalf("refund of (%q, %q): %v, want ErrNothingToRefund", c.caller, c.rid, err)
		}
	}
	a.decide(now, admitOpts{}, chk{"rf", "k", 10})
	if d := a.decide(now, admitOpts{caller: "svc", rid: "denied"}, k); d.Decision.Allowed {
		t.Fatalf("want a denial: %+v", d)
	}
	if err := a.unchanged("refund of a denial", refundEnv(now, "svc", "denied"), k).(error); !errors.Is(err, fsm.ErrNotAdmitted) || errors.Is(err, fsm.ErrNothingToRefund) {
		t.Fatalf("refund of a denied request: %v, want ErrNotAdmitted", err)
	}

	// A multi-check request gives back every check's spend; a shadow-denied
	// check spent nothing and gets nothing.
	a.putPolicies(now, tokenBucket("a", 10, time.Hour, 10, 10), tokenBucket("b", 5, time.Hour, 5, 5), shadowOf(tokenBucket("s", 1, time.Hour, 1, 1)))
	a.decide(now, admitOpts{}, chk{"s", "{m}:s", 1})
	multi := []chk{{"a", "{m}:a", 2}, {"b", "{m}:b", 4}, {"s", "{m}:s", 1}}
	before := a.states(multi...)
	m := a.decide(now, admitOpts{caller: "svc", rid: "multi"}, multi...)
	if !m.Decision.Allowed || !m.Checks[2].ShadowDenied {
		t.Fatalf("multi: %+v", m)
	}
	if r := a.refund(now, "svc", "multi"); !r.Refunded || r.Cost != 6 {
		t.Fatalf("refund of the multi-check request: %+v, want 6 back", r)
	}
	for i, s := range a.states(multi...) {
		if s.TAT > max(before[i].TAT, now) {
			t.Fatalf("check %d %+v: TAT +%v after the refund, want at most +%v", i, multi[i], time.Duration(s.TAT-now), time.Duration(max(before[i].TAT, now)-now))
		}
	}
	if p := a.peek(now, "b", "{m}:b"); p.Decision.Remaining != 5 {
		t.Fatalf("b after the refund: %+v", p)
	}
}

// A refund never raises a token bucket above its capacity: after it refilled
// (expired and swept, or not yet swept) the bucket is simply full.
func TestRefundNeverAboveCapacity(t *testing.T) {
	for _, after := range []time.Duration{200 * time.Millisecond, 300 * time.Millisecond, time.Second} {
		a := newApplier(t, fsm.Options{})
		a.putPolicies(t0, tokenBucket("rf", 10, time.Second, 5, 5)) // T = 100ms
		a.decide(t0, admitOpts{caller: "svc", rid: "r"}, chk{"rf", "k", 3})
		now := t0 + int64(after)
		if r := a.refund(now, "svc", "r"); !r.Refunded || r.Cost != 3 {
			t.Fatalf("+%v: refund %+v", after, r)
		}
		if p := a.peek(now, "rf", "k"); p.Decision.Remaining != 5 || p.Decision.ResetAfter != 0 {
			t.Fatalf("+%v: after the refund %+v, want exactly full", after, p.Decision)
		}
		// Exactly the capacity passes at that instant.
		if r := a.decide(now, admitOpts{}, chk{"rf", "k", 5}); !r.Decision.Allowed {
			t.Fatalf("+%v: 5 units after the refund: %+v", after, r)
		}
		if r := a.decide(now, admitOpts{}, chk{"rf", "k", 1}); r.Decision.Allowed {
			t.Fatalf("+%v: a sixth unit passed after the refund: %+v", after, r)
		}
	}
}

// A token-bucket refund gives back only what the refunded request still
// holds: the part of its spend that already refilled is not given again,
// or another request's spend is erased.
func TestRefundGivesBackOnlyWhatIsStillSpent(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("rf", 10, time.Second, 3, 3)) // T = 100ms, capacity 3
	a.decide(t0, admitOpts{caller: "svc", rid: "A"}, chk{"rf", "k", 3})
	now := t0 + int64(200*time.Millisecond) // two of A's units have refilled
	if r := a.decide(now, admitOpts{}, chk{"rf", "k", 1}); !r.Decision.Allowed {
		t.Fatalf("B: %+v", r)
	}
	a.refund(now, "svc", "A")
	// B holds one unit at this instant: at most 2 more may pass.
	if p := a.peek(now, "rf", "k"); p.Decision.Remaining > 2 {
		t.Fatalf("after refunding A: %d remaining, but B (not refunded) holds 1 of the capacity 3", p.Decision.Remaining)
	}
}

func TestRefundSurvivesSnapshot(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("rf", 10, time.Hour, 10, 10))
	first := a.decide(t0, admitOpts{caller: "svc", rid: "r1"}, chk{"rf", "k", 4})
	a.decide(t0, admitOpts{caller: "svc", rid: "r2"}, chk{"rf", "k", 1})
	refunded := a.refund(t0+1, "svc", "r1")

	c := wrap(t, fsm.New(fsm.Options{}))
	restoreFrom(t, c.f, snapshotBytes(t, a.f))
	for _, x := range []*applier{a, c} {
		if r := x.refund(t0+2, "svc", "r1"); r.Refunded || r.Cost != 4 || r.RefundedAt != refunded.RefundedAt {
			t.Fatalf("refund after restore: %+v, want refunded=false as of %d", r, refunded.RefundedAt)
		}
		if got := x.decide(t0+2, admitOpts{caller: "svc", rid: "r1"}, chk{"rf", "k", 4}); !reflect.DeepEqual(got, dupOf(first)) {
			t.Fatalf("admit retry after restore: %+v", got)
		}
		if r := x.refund(t0+2, "svc", "r2"); !r.Refunded || r.Cost != 1 {
			t.Fatalf("the other request's refund after restore: %+v", r)
		}
	}
	if x, y := snapshotBytes(t, a.f), snapshotBytes(t, c.f); string(x) != string(y) {
		t.Fatal("the restored FSM and the original diverged")
	}
}

func TestDeletePolicies(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	gone := tokenBucket("gone", 10, time.Second, 10, 10) // T = 100ms
	a.putPolicies(t0, gone, tokenBucket("keep", 1, time.Hour, 5, 5))
	a.putPolicies(t0, tokenBucket("gone", 10, time.Second, 8, 8)) // version 2
	first := a.decide(t0, admitOpts{caller: "svc", rid: "before"}, chk{"gone", "{d}:a", 8})
	a.decide(t0, admitOpts{}, chk{"gone", "{d}:b", 1}, chk{"keep", "{d}:b", 1})

	// All or none: a missing name deletes nothing.
	err := a.unchanged("delete with a missing name", deleteEnv(t0, "gone", "missing", "keep")).(error)
	if !errors.Is(err, fsm.ErrUnknownPolicy) {
		t.Fatalf("delete with a missing name: %v, want ErrUnknownPolicy", err)
	}
	if len(a.f.Policies()) != 2 {
		t.Fatalf("policies after a refused delete: %+v", a.f.Policies())
	}

	del := a.deletePolicies(t0, "gone")
	if len(del.Policies) != 1 || del.Policies[0].Policy.Name != "gone" || del.Policies[0].Version != 2 {
		t.Fatalf("delete result %+v, want gone at version 2", del)
	}
	if _, ok := a.f.Policy("gone"); ok {
		t.Fatal("gone is still there")
	}
	if err := a.applyErr(deleteEnv(t0, "gone")); !errors.Is(err, fsm.ErrUnknownPolicy) {
		t.Fatalf("deleting it again: %v", err)
	}
	// Decisions under it are refused, alone or in a multi-check request,
	// spending nothing on the other checks.
	if err := a.unchanged("admit", multiEnv(t0, admitOpts{}, chk{"gone", "{d}:a", 1})).(error); !errors.Is(err, fsm.ErrUnknownPolicy) {
		t.Fatalf("admit under a deleted policy: %v", err)
	}
	keepB := chk{"keep", "{d}:b", 1}
	if err := a.unchanged("multi", multiEnv(t0, admitOpts{caller: "svc", rid: "after"}, keepB, chk{"gone", "{d}:b", 1}), keepB).(error); !errors.Is(err, fsm.ErrUnknownPolicy) {
		t.Fatalf("multi-check with a deleted policy in also[0]: %v", err)
	}
	if err := a.unchanged("peek", peekEnv(t0, "gone", "{d}:a")).(error); !errors.Is(err, fsm.ErrUnknownPolicy) {
		t.Fatalf("peek under a deleted policy: %v", err)
	}
	// A retry of a request recorded before the delete gets its answer.
	if got := a.decide(t0, admitOpts{caller: "svc", rid: "before"}, chk{"gone", "{d}:a", 8}); !reflect.DeepEqual(got, dupAfterChange(first)) {
		t.Fatalf("retry after the delete: %+v, want %+v", got, dupAfterChange(first))
	}

	// Its states stay until they expire (800ms and 100ms after t0), then an
	// Expire reclaims them; keep's state stays.
	if a.f.BucketCount() != 3 {
		t.Fatalf("BucketCount %d, want 3 until the states expire", a.f.BucketCount())
	}
	a.expire(t0 + int64(time.Second))
	if a.f.BucketCount() != 1 || a.f.State("gone", "{d}:a").Kind != admission.KindNone || a.f.State("keep", "{d}:b").Kind == admission.KindNone {
		t.Fatalf("after Expire: BucketCount %d, want only keep's state", a.f.BucketCount())
	}

	// Re-created, the policy starts again at version 1: versions count the
	// definitions of the current incarnation only, so (name, version) does not
	// identify a definition across a delete.
	later := t0 + int64(time.Second)
	if v := a.putPolicies(later, gone).Policies[0].Version; v != 1 {
		t.Fatalf("re-created policy at version %d; the code restarts at 1", v)
	}
	if r := a.decide(later, admitOpts{}, chk{"gone", "{d}:a", 10}); !r.Decision.Allowed || r.PolicyVersion != 1 {
		t.Fatalf("admit under the re-created policy: %+v", r)
	}
	// Re-created before its states expired, a policy finds them: a delete
	// and re-create does not hand out a fresh budget.
	a.deletePolicies(later, "keep")
	if v := a.putPolicies(later, tokenBucket("keep", 1, time.Hour, 5, 5)).Policies[0].Version; v != 1 {
		t.Fatalf("re-created keep at version %d", v)
	}
	if p := a.peek(later, "keep", "{d}:b"); p.Decision.Remaining != 4 || p.PolicyVersion != 1 {
		t.Fatalf("re-created keep: %+v, want the unexpired state (4 left)", p)
	}
}
