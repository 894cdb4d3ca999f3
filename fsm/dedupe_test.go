package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
)

// apiPolicy is 1 unit/s, burst 20, max cost 10, default retention (10m).
var apiPolicy = tokenBucket("api", 60, time.Minute, 20, 10)

// dupOf is r marked as a duplicate.
func dupOf(r fsm.AdmitResult) fsm.AdmitResult {
	r.Duplicate = true
	return r
}

// dupAfterChange is r marked as a duplicate answered once the group's table
// no longer holds the versions r was decided with: its checks' windows and
// quotas are unset (records do not keep them).
func dupAfterChange(r fsm.AdmitResult) fsm.AdmitResult {
	r = dupOf(r)
	r.Checks = slices.Clone(r.Checks)
	for i := range r.Checks {
		r.Checks[i].Window, r.Checks[i].Quota = 0, 0
	}
	return r
}

// checkOnlyTimeMoved checks that a, after applying a retry at now, holds
// the same state as twin (same history before the retry) after an Expire at
// now, which changes nothing but LastNow when nothing has expired.
func checkOnlyTimeMoved(tb testing.TB, what string, a, twin *applier, now int64) {
	tb.Helper()
	twin.expire(now)
	if x, y := snapshotBytes(tb, a.f), snapshotBytes(tb, twin.f); !bytes.Equal(x, y) {
		tb.Fatalf("%s changed the state beyond LastNow (%d vs %d snapshot bytes)", what, len(x), len(y))
	}
}

// checkReused expects err to be the request-ID reuse error.
func checkReused(tb testing.TB, what string, err error) {
	tb.Helper()
	var fe *admission.FieldError
	switch {
	case !errors.Is(err, fsm.ErrRequestIDReused):
		tb.Fatalf("%s: %v, want ErrRequestIDReused", what, err)
	case !errors.Is(err, admission.ErrInvalidRequest):
		tb.Fatalf("%s: %v does not wrap admission.ErrInvalidRequest", what, err)
	case !errors.As(err, &fe) || fe.Field != "request_id":
		tb.Fatalf("%s: %v is not a *FieldError on request_id", what, err)
	case errors.Is(err, fsm.ErrDedupeFull), errors.Is(err, fsm.ErrUnknownPolicy), errors.Is(err, fsm.ErrGroupFull):
		tb.Fatalf("%s: %v wraps an unrelated sentinel", what, err)
	}
}

func TestDuplicateReturnsFirstResult(t *testing.T) {
	r1 := req{"svc", "r1", "api", "alice", 7}
	r2 := req{"svc", "r2", "api", "alice", 10}
	history := func() (*applier, fsm.AdmitResult, fsm.AdmitResult) {
		a := newApplier(t, fsm.Options{})
		a.putPolicies(t0, apiPolicy)
		first := a.mustAdmitID(t0, r1)
		a.mustAdmit(t0, "api", "alice", 10) // 3 left
		denied := a.mustAdmitID(t0, r2)
		return a, first, denied
	}
	a, first, denied := history()
	twin, _, _ := history()
	if !first.Decision.Allowed || first.Decision.Remaining != 13 || first.Duplicate || first.DecidedAt != t0 || first.PolicyVersion != 1 ||
		first.Checks[0].Window != time.Minute || first.Checks[0].Quota != 60 {
		t.Fatalf("first attempt: %+v", first)
	}
	if denied.Decision.Allowed || denied.Decision.RetryAfter != 7*time.Second || denied.Duplicate {
		t.Fatalf("first attempt of r2: %+v, want denied for 7s", denied)
	}
	bucket, dl, db := a.f.Bucket("api", "alice"), a.f.DedupeLen(), a.f.DedupeBytes()
	if dl != 2 || db <= 0 {
		t.Fatalf("DedupeLen %d DedupeBytes %d, want 2 and > 0", dl, db)
	}

	// Retries at the same time, at a later time, and with an earlier stamp.
	steps := []struct {
		name string
		now  int64
		r    req
		want fsm.AdmitResult
	}{
		{"allowed, same time", t0, r1, dupOf(first)},
		{"denied, same time", t0, r2, dupOf(denied)},
		{"allowed, 3s later", t0 + 3*sec, r1, dupOf(first)},
		{"denied, after it would be allowed", t0 + 8*sec, r2, dupOf(denied)},
		{"allowed, stamp behind", t0 + 5*sec, r1, dupOf(first)},
	}
	for _, s := range steps {
		got := a.mustAdmitID(s.now, s.r)
		if !reflect.DeepEqual(got, s.want) {
			t.Fatalf("%s: %+v, want %+v", s.name, got, s.want)
		}
		if b := a.f.Bucket("api", "alice"); b != bucket {
			t.Fatalf("%s: the retry moved the bucket from %+v to %+v", s.name, bucket, b)
		}
		if a.f.DedupeLen() != dl || a.f.DedupeBytes() != db {
			t.Fatalf("%s: DedupeLen %d DedupeBytes %d, want %d %d", s.name, a.f.DedupeLen(), a.f.DedupeBytes(), dl, db)
		}
		checkOnlyTimeMoved(t, s.name, a, twin, s.now)
	}

	// The policy changes (burst 30, version 2) and time passes, within the
	// retention: retries still get the first answers, under version 1.
	later := t0 + int64(9*time.Minute)
	for _, x := range []*applier{a, twin} {
		x.putPolicies(t0+8*sec, tokenBucket("api", 60, time.Minute, 30, 10))
	}
	for _, now := range []int64{t0 + 8*sec, later, t0 + int64(10*time.Minute) - 1} {
		if got := a.mustAdmitID(now, r1); !reflect.DeepEqual(got, dupAfterChange(first)) {
			t.Fatalf("r1 at +%v after a policy change: %+v, want %+v", time.Duration(now-t0), got, dupAfterChange(first))
		}
		if got := a.mustAdmitID(now, r2); !reflect.DeepEqual(got, dupAfterChange(denied)) {
			t.Fatalf("r2 at +%v after a policy change: %+v, want %+v", time.Duration(now-t0), got, dupAfterChange(denied))
		}
		checkOnlyTimeMoved(t, "retry after a policy change", a, twin, now)
	}
	// A new request ID is decided now (LastNow), under version 2.
	fresh := a.mustAdmitID(later, req{"svc", "r3", "api", "alice", 7})
	if fresh.Duplicate || fresh.PolicyVersion != 2 || !fresh.Decision.Allowed || fresh.Decision.Limit != 30 || fresh.DecidedAt != a.f.LastNow() {
		t.Fatalf("new request ID after the change: %+v", fresh)
	}
}

func TestRequestIDReused(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, apiPolicy, tokenBucket("other", 60, time.Minute, 20, 10))
	orig := req{"svc", "r1", "api", "alice", 2}
	first := a.mustAdmitID(t0, orig)

	for _, c := range []struct {
		name string
		r    req
	}{
		{"other key", req{"svc", "r1", "api", "bob", 2}},
		{"other key, same length", req{"svc", "r1", "api", "alicE", 2}},
		{"other policy, same length", req{"svc", "r1", "apI", "alice", 2}},
		{"other cost", req{"svc", "r1", "api", "alice", 3}},
		{"other policy", req{"svc", "r1", "other", "alice", 2}},
		{"key/policy boundary", req{"svc", "r1", "apialice", "", 2}},
		{"all differ", req{"svc", "r1", "other", "carol", 9}},
	} {
		before, count := snapshotBytes(t, a.f), a.f.BucketCount()
		checkReused(t, c.name, a.admitIDErr(t0, c.r))
		if got := snapshotBytes(t, a.f); !bytes.Equal(got, before) {
			t.Fatalf("%s: a reused request ID changed the state", c.name)
		}
		if a.f.BucketCount() != count || a.f.DedupeLen() != 1 {
			t.Fatalf("%s: BucketCount %d DedupeLen %d, want %d 1", c.name, a.f.BucketCount(), a.f.DedupeLen(), count)
		}
	}
	// The original still answers its first result.
	if got := a.mustAdmitID(t0, orig); !reflect.DeepEqual(got, dupOf(first)) {
		t.Fatalf("original after reuse attempts: %+v, want %+v", got, dupOf(first))
	}

	// The same request ID under another caller is another request: decided
	// afresh and spent.
	for i, caller := range []string{"svc2", "", "SVC"} {
		r := orig
		r.caller = caller
		got := a.mustAdmitID(t0, r)
		if got.Duplicate || !got.Decision.Allowed || got.Decision.Remaining != first.Decision.Remaining-2*int64(i+1) {
			t.Fatalf("caller %q: %+v, want a fresh decision spending 2 more", caller, got)
		}
		if again := a.mustAdmitID(t0, r); !reflect.DeepEqual(again, dupOf(got)) {
			t.Fatalf("caller %q retry: %+v, want %+v", caller, again, dupOf(got))
		}
	}
	// Caller and request ID do not run together: ("svc", "r1") is not
	// ("svcr", "1") or ("", "svcr1").
	for _, r := range []req{{"svcr", "1", "api", "alice", 2}, {"", "svcr1", "api", "alice", 2}} {
		if got := a.mustAdmitID(t0, r); got.Duplicate {
			t.Fatalf("%+v was answered as a duplicate of (svc, r1)", r)
		}
	}

	// An empty request ID is never deduplicated, with or without a caller.
	n := a.f.DedupeLen()
	for _, caller := range []string{"", "svc"} {
		b := a.f.Bucket("api", "empty")
		x := a.mustAdmitID(t0, req{caller, "", "api", "empty", 3})
		y := a.mustAdmitID(t0, req{caller, "", "api", "empty", 3})
		if x.Duplicate || y.Duplicate || y.Decision.Remaining != x.Decision.Remaining-3 {
			t.Fatalf("caller %q, no request ID: %+v then %+v, want two spends", caller, x, y)
		}
		if got := a.f.Bucket("api", "empty"); got.TAT != max(b.TAT, t0)+6*sec {
			t.Fatalf("caller %q, no request ID: TAT %d, want two spends of 3", caller, got.TAT-t0)
		}
	}
	if got := a.f.DedupeLen(); got != n {
		t.Fatalf("requests without request ID were recorded: DedupeLen %d, want %d", got, n)
	}
}

func TestDedupeRetention(t *testing.T) {
	for _, c := range []struct {
		name      string
		policy    admission.Policy
		retention time.Duration
	}{
		{"default", apiPolicy, admission.DefaultDedupeRetention},
		{"override", withRetention(apiPolicy, 5*time.Second), 5 * time.Second},
		{"maximum", withRetention(apiPolicy, admission.MaxDedupeRetention), admission.MaxDedupeRetention},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newApplier(t, fsm.Options{})
			a.putPolicies(t0, c.policy)
			r := req{"svc", "r1", "api", "k", 5}
			first := a.mustAdmitID(t0, r)
			end := t0 + int64(c.retention)
			if got := a.mustAdmitID(end-1, r); !reflect.DeepEqual(got, dupOf(first)) {
				t.Fatalf("retry 1ns before the retention ends: %+v, want %+v", got, dupOf(first))
			}
			// The bucket expired at t0+5s ≤ end and has been swept, or
			// expires with the entry.
			if next, ok := a.f.NextExpiry(); !ok || next != end {
				t.Fatalf("NextExpiry %d %v, want %d", next-t0, ok, end-t0)
			}
			// At the end of the retention the same request is new: it
			// spends again (the bucket is full by then) and is recorded
			// anew.
			again := a.mustAdmitID(end, r)
			want := fsm.AdmitResult{
				Decision:      admission.Decision{Allowed: true, Limit: 20, Remaining: 15, ResetAfter: 5 * time.Second},
				PolicyVersion: 1, DecidedAt: end,
			}
			if again.Decision != want.Decision || again.PolicyVersion != want.PolicyVersion || again.DecidedAt != want.DecidedAt || again.Duplicate {
				t.Fatalf("after the retention: %+v, want %+v", again, want)
			}
			if got := a.f.Bucket("api", "k").TAT; got != end+5*sec {
				t.Fatalf("TAT %d, want the new spend's %d", got-t0, end+5*sec-t0)
			}
			if got := a.mustAdmitID(end+1, r); !reflect.DeepEqual(got, dupOf(again)) {
				t.Fatalf("retry of the new decision: %+v, want %+v", got, dupOf(again))
			}
			if a.f.DedupeLen() != 1 {
				t.Fatalf("DedupeLen %d, want 1", a.f.DedupeLen())
			}
			if next, _ := a.f.NextExpiry(); next != end+5*sec {
				t.Fatalf("NextExpiry %d, want %d", next-t0, end+5*sec-t0)
			}
		})
	}
}

func withRetention(p admission.Policy, d time.Duration) admission.Policy {
	p.DedupeRetention = d
	return p
}

// TestDedupeExpiredUnsweptIsAbsent makes more entries expire at once than
// one Apply sweeps, and retries the one swept last: expired state is
// absent before it is reclaimed.
func TestDedupeExpiredUnsweptIsAbsent(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, withRetention(tokenBucket("p", 1000, time.Second, 1000, 0), 5*time.Second))
	const n = fsm.SweepPerApply + 8
	var last req
	var first fsm.AdmitResult
	for i := range n {
		last = req{"c", fmt.Sprintf("r%03d", i), "p", fmt.Sprint("k", i), 1}
		first = a.mustAdmitID(t0, last)
	}
	end := t0 + 5*sec
	got := a.mustAdmitID(end, last)
	if got.Duplicate || got.DecidedAt != end {
		t.Fatalf("retry of an expired, unswept entry: %+v (first %+v), want a fresh decision", got, first)
	}
	// The Apply swept SweepPerApply of them, (c, r000).. first; the retried
	// one was replaced.
	if got := a.f.DedupeLen(); got != n-fsm.SweepPerApply {
		t.Fatalf("DedupeLen %d, want %d", got, n-fsm.SweepPerApply)
	}
}

// TestRefusalsAreNotRecorded checks that a refused request leaves no entry,
// so the same request ID is decided once the cause is fixed.
func TestRefusalsAreNotRecorded(t *testing.T) {
	a := newApplier(t, fsm.Options{MaxBuckets: 3})
	a.putPolicies(t0, apiPolicy)
	a.mustAdmit(t0, "api", "a", 1)  // expires at t0+1s
	a.mustAdmit(t0, "api", "b", 1)  // expires at t0+1s
	a.mustAdmit(t0, "api", "c", 10) // expires at t0+10s

	unknown := req{"svc", "u", "later", "k", 1}
	if err := a.admitIDErr(t0, unknown); !errors.Is(err, fsm.ErrUnknownPolicy) {
		t.Fatalf("unknown policy: %v", err)
	}
	badCost := req{"svc", "c", "api", "c", 11}
	if err := a.admitIDErr(t0, badCost); !errors.Is(err, admission.ErrInvalidRequest) || errors.Is(err, fsm.ErrRequestIDReused) {
		t.Fatalf("cost above max_cost: %v", err)
	}
	full := req{"svc", "g", "api", "new", 1}
	if err := a.admitIDErr(t0, full); !errors.Is(err, fsm.ErrGroupFull) {
		t.Fatalf("group full: %v", err)
	}
	if got := a.f.DedupeLen(); got != 0 {
		t.Fatalf("refusals were recorded: DedupeLen %d", got)
	}

	// Fix the causes: create the policy, raise max_cost, let a and b
	// expire.
	a.putPolicies(t0+sec, tokenBucket("later", 1, time.Second, 1, 0), tokenBucket("api", 60, time.Minute, 20, 15))
	for _, r := range []req{unknown, badCost, full} {
		got := a.mustAdmitID(t0+sec, r)
		if got.Duplicate || !got.Decision.Allowed {
			t.Fatalf("%+v after fixing the cause: %+v, want a fresh allowed decision", r, got)
		}
		// Now it is recorded, and a different payload is a reuse.
		if again := a.mustAdmitID(t0+sec, r); !reflect.DeepEqual(again, dupOf(got)) {
			t.Fatalf("%+v retry: %+v, want %+v", r, again, dupOf(got))
		}
		other := r
		other.cost = 2
		checkReused(t, fmt.Sprintf("%+v with cost 2", r), a.admitIDErr(t0+sec, other))
	}
}
