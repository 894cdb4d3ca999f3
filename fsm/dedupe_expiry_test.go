package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
)

// expireStep applies one Expire at now and checks that it reclaimed at
// least ExpireBatch and at most ExpireBatch+SweepPerApply (the sweep every
// Apply does) of whatever count reports, or all of it when fewer were
// expired. It returns how many it reclaimed.
func expireStep(tb testing.TB, a *applier, now int64, what string, count func() int, expired int) int {
	tb.Helper()
	before := count()
	a.expire(now)
	got := before - count()
	wantMin, wantMax := min(expired, fsm.ExpireBatch), min(expired, fsm.ExpireBatch+fsm.SweepPerApply)
	if got < wantMin || got > wantMax {
		tb.Fatalf("Expire at %v reclaimed %d %s of %d expired, want %d..%d", time.Duration(now-t0), got, what, expired, wantMin, wantMax)
	}
	return got
}

// TestExpireReclaimsEverything fills a group with more buckets and more
// request-ID entries than one Expire reclaims, and checks that Expire
// entries bring it back to the state of a group that never saw them.
func TestExpireReclaimsEverything(t *testing.T) {
	p := withRetention(tokenBucket("p", 1, time.Second, 100, 0), time.Minute) // cost 1: bucket expires after 1s
	a, base := newApplier(t, fsm.Options{}), newApplier(t, fsm.Options{})
	a.putPolicies(t0, p)
	base.putPolicies(t0, p)
	if _, ok := a.f.NextExpiry(); ok {
		t.Fatal("NextExpiry of a group without state reports an expiry")
	}
	const n = 2*fsm.ExpireBatch + 500
	reqs := make([]req, n)
	firsts := make([]fsm.AdmitResult, n)
	for i := range reqs {
		reqs[i] = req{fmt.Sprint("caller-", i%3), fmt.Sprintf("r%05d", i), "p", fmt.Sprintf("k%05d", i), 1}
		firsts[i] = a.mustAdmitID(t0, reqs[i])
	}
	if a.f.BucketCount() != n || a.f.DedupeLen() != n {
		t.Fatalf("BucketCount %d DedupeLen %d, want %d each", a.f.BucketCount(), a.f.DedupeLen(), n)
	}
	bytesFull := a.f.DedupeBytes()
	if next, ok := a.f.NextExpiry(); !ok || next != t0+sec {
		t.Fatalf("NextExpiry %v %v, want the buckets' 1s", time.Duration(next-t0), ok)
	}

	// Nothing has expired 1ns before.
	a.expire(t0 + sec - 1)
	if a.f.BucketCount() != n || a.f.DedupeLen() != n {
		t.Fatalf("Expire before any expiry reclaimed something: %d buckets, %d entries", a.f.BucketCount(), a.f.DedupeLen())
	}

	// The buckets go, a batch per Expire; the entries stay.
	entries, steps := 0, 0
	for left := n; left > 0; steps++ {
		left -= expireStep(t, a, t0+sec, "buckets", a.f.BucketCount, left)
		if a.f.DedupeLen() != n || a.f.DedupeBytes() != bytesFull {
			t.Fatalf("Expire at 1s reclaimed request-ID entries: %d left", a.f.DedupeLen())
		}
	}
	if steps > (n+fsm.ExpireBatch-1)/fsm.ExpireBatch {
		t.Fatalf("%d Expire entries to reclaim %d buckets", steps, n)
	}
	if next, ok := a.f.NextExpiry(); !ok || next != t0+int64(time.Minute) {
		t.Fatalf("NextExpiry %v %v, want the entries' 1m", time.Duration(next-t0), ok)
	}

	// Within the retention, retries answer the recorded result and do not
	// spend: no bucket comes back.
	for _, i := range []int{0, 1, n / 2, n - 1} {
		if got := a.mustAdmitID(t0+30*sec, reqs[i]); !reflect.DeepEqual(got, dupOf(firsts[i])) {
			t.Fatalf("retry %d at 30s: %+v, want %+v", i, got, dupOf(firsts[i]))
		}
	}
	if a.f.BucketCount() != 0 {
		t.Fatalf("retries created %d buckets", a.f.BucketCount())
	}
	a.expire(t0 + int64(time.Minute) - 1)
	if a.f.DedupeLen() != n {
		t.Fatalf("Expire before the retention ended reclaimed entries: %d left", a.f.DedupeLen())
	}

	end := t0 + int64(time.Minute)
	for left := n; left > 0; entries++ {
		left -= expireStep(t, a, end, "entries", a.f.DedupeLen, left)
		if left > 0 && (a.f.DedupeBytes() <= 0 || a.f.DedupeBytes() >= bytesFull) {
			t.Fatalf("DedupeBytes %d with %d entries left", a.f.DedupeBytes(), left)
		}
	}
	if entries > (n+fsm.ExpireBatch-1)/fsm.ExpireBatch {
		t.Fatalf("%d Expire entries to reclaim %d request-ID entries", entries, n)
	}
	if a.f.DedupeLen() != 0 || a.f.DedupeBytes() != 0 || a.f.BucketCount() != 0 {
		t.Fatalf("after expiry: DedupeLen %d DedupeBytes %d BucketCount %d, want 0 0 0", a.f.DedupeLen(), a.f.DedupeBytes(), a.f.BucketCount())
	}
	if next, ok := a.f.NextExpiry(); ok {
		t.Fatalf("NextExpiry %v with nothing held", time.Duration(next-t0))
	}
	a.expire(end) // nothing left: a no-op
	base.expire(end)
	if x, y := snapshotBytes(t, a.f), snapshotBytes(t, base.f); !bytes.Equal(x, y) {
		t.Fatalf("after expiry the group's snapshot differs from one that never held the state (%d vs %d bytes)", len(x), len(y))
	}
	// The same requests are new now.
	if got := a.mustAdmitID(end, reqs[0]); got.Duplicate || got.DecidedAt != end {
		t.Fatalf("request after its retention and reclaim: %+v", got)
	}
}

// TestNextExpiry checks that NextExpiry reports the earlier of the buckets'
// and the request-ID entries' expiries.
func TestNextExpiry(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0,
		withRetention(tokenBucket("slow", 1, time.Hour, 10, 0), time.Second), // bucket 1h, entry 1s
		withRetention(tokenBucket("fast", 1, time.Second, 10, 0), time.Hour), // bucket 2s, entry 1h
	)
	hour := int64(time.Hour)
	a.mustAdmitID(t0, req{"c", "s", "slow", "k", 1})
	if next, ok := a.f.NextExpiry(); !ok || next != t0+sec {
		t.Fatalf("NextExpiry %v %v, want the entry's 1s", time.Duration(next-t0), ok)
	}
	a.mustAdmitID(t0, req{"c", "f", "fast", "k", 2})
	a.expire(t0 + sec)
	if a.f.DedupeLen() != 1 || a.f.BucketCount() != 2 {
		t.Fatalf("DedupeLen %d BucketCount %d, want 1 2", a.f.DedupeLen(), a.f.BucketCount())
	}
	if next, ok := a.f.NextExpiry(); !ok || next != t0+2*sec {
		t.Fatalf("NextExpiry %v %v, want the fast bucket's 2s", time.Duration(next-t0), ok)
	}
	a.expire(t0 + 2*sec)
	if next, ok := a.f.NextExpiry(); !ok || next != t0+hour {
		t.Fatalf("NextExpiry %v %v, want 1h (slow bucket and fast entry)", time.Duration(next-t0), ok)
	}
	a.expire(t0 + hour)
	if next, ok := a.f.NextExpiry(); ok || a.f.DedupeLen() != 0 || a.f.BucketCount() != 0 {
		t.Fatalf("NextExpiry %v %v, DedupeLen %d, BucketCount %d: want nothing held", time.Duration(next-t0), ok, a.f.DedupeLen(), a.f.BucketCount())
	}
}

func TestMaxDedupeEntries(t *testing.T) {
	a := newApplier(t, fsm.Options{MaxDedupeEntries: 3})
	a.putPolicies(t0, withRetention(apiPolicy, 5*time.Second))
	rs := []req{{"c", "r1", "api", "k", 1}, {"c", "r2", "api", "k", 2}, {"d", "r1", "api", "other", 1}}
	firsts := make([]fsm.AdmitResult, len(rs))
	for i, r := range rs {
		firsts[i] = a.mustAdmitID(t0, r)
	}
	for _, now := range []int64{t0, t0 + 4*sec, t0 + 5*sec - 1} {
		for _, r4 := range []req{{"c", "r4", "api", "k", 1}, {"e", "r4", "api", "new", 1}, {"c", "r5", "api", "k", 15}} {
			before, bucket, count := snapshotBytes(t, a.f), a.f.Bucket("api", "k"), a.f.BucketCount()
			err := a.admitIDErr(t0, r4) // stamped t0: decided at LastNow
			if r4.cost > apiPolicy.MaxCost {
				// A refusal for bad input comes first.
				if !errors.Is(err, admission.ErrInvalidRequest) {
					t.Fatalf("%+v: %v, want ErrInvalidRequest", r4, err)
				}
				continue
			}
			var fe *admission.FieldError
			if !errors.Is(err, fsm.ErrDedupeFull) || errors.Is(err, admission.ErrInvalidRequest) || errors.As(err, &fe) {
				t.Fatalf("%+v with 3 unexpired entries: %v, want ErrDedupeFull and no field error", r4, err)
			}
			if !bytes.Equal(snapshotBytes(t, a.f), before) {
				t.Fatalf("%+v: ErrDedupeFull changed the state", r4)
			}
			if a.f.Bucket("api", "k") != bucket || a.f.BucketCount() != count {
				t.Fatalf("%+v: ErrDedupeFull spent: bucket %+v → %+v, %d → %d buckets", r4, bucket, a.f.Bucket("api", "k"), count, a.f.BucketCount())
			}
		}
		// Nothing was evicted.
		for i, r := range rs {
			if got := a.mustAdmitID(now, r); !reflect.DeepEqual(got, dupOf(firsts[i])) {
				t.Fatalf("retry %+v at %v: %+v, want %+v", r, time.Duration(now-t0), got, dupOf(firsts[i]))
			}
		}
		// Requests without a request ID still spend.
		tat := a.f.Bucket("api", "k").TAT
		if got := a.mustAdmit(now, "api", "k", 1); !got.Decision.Allowed || got.Duplicate {
			t.Fatalf("admit without request ID: %+v", got)
		}
		if a.f.Bucket("api", "k").TAT != max(tat, now)+sec {
			t.Fatal("an admit without request ID did not spend")
		}
		if a.f.DedupeLen() != 3 {
			t.Fatalf("DedupeLen %d, want 3", a.f.DedupeLen())
		}
	}

	// Once the retention has passed, new request IDs are accepted up to the
	// bound, the old ones are new requests, and the bound holds again.
	end := t0 + 5*sec
	for i, r := range []req{{"c", "r4", "api", "k", 1}, rs[0], {"e", "r4", "api", "new", 1}} {
		if got := a.mustAdmitID(end, r); got.Duplicate || got.DecidedAt != end {
			t.Fatalf("request %d after the retention: %+v, want a fresh decision", i, got)
		}
	}
	if a.f.DedupeLen() != 3 {
		t.Fatalf("DedupeLen %d, want 3 (the expired ones reclaimed)", a.f.DedupeLen())
	}
	if err := a.admitIDErr(end, rs[1]); !errors.Is(err, fsm.ErrDedupeFull) {
		t.Fatalf("4th entry after refilling: %v, want ErrDedupeFull", err)
	}
}

// TestMaxDedupeEntriesAfterRestoreOverBound restores a snapshot holding more
// request-ID entries than this FSM's bound (MaxDedupeEntries lowered by an
// upgrade) and lets all of them expire: the group then holds no unexpired
// entry, so a new request ID must be accepted, as it would be by a replica
// that had already swept them (expired state is absent, DESIGN.md §2 rule 4).
func TestMaxDedupeEntriesAfterRestoreOverBound(t *testing.T) {
	big := newApplier(t, fsm.Options{})
	big.putPolicies(t0, withRetention(apiPolicy, 5*time.Second))
	for i := range fsm.SweepPerApply + 10 {
		big.mustAdmitID(t0, req{"c", fmt.Sprint("r", i), "api", "k", 1})
	}
	small := newApplier(t, fsm.Options{MaxDedupeEntries: 3})
	restoreFrom(t, small.f, snapshotBytes(t, big.f))
	res := small.apply(req{"c", "new", "api", "k", 1}.env(t0 + 5*sec))
	if r, ok := res.(*fsm.AdmitResult); !ok || r.Duplicate {
		t.Fatalf("new request ID when every entry has expired: %v, want a fresh decision", toOutcome(t, res))
	}
}
