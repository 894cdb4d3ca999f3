package fsm_test

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
)

// TestRejectionsChangeNothing sends requests that must be refused and checks
// that the error has the right class and field, and that no bucket and no
// byte of the snapshot changed.
func TestRejectionsChangeNothing(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("api", 60, time.Minute, 20, 10))
	a.mustAdmit(t0, "api", "alice", 7)
	a.mustAdmit(t0+sec, "api", "bob", 1)
	long := strings.Repeat("k", admission.MaxKeyBytes+1)

	cases := []struct {
		name        string
		policy, key string
		cost        int64
		want        error
		field       string // "" for a non-field error
	}{
		{"unknown policy", "nope", "alice", 1, fsm.ErrUnknownPolicy, ""},
		{"unknown policy, bad request", "nope", "", 0, fsm.ErrUnknownPolicy, ""},
		{"policy name case", "API", "alice", 1, fsm.ErrUnknownPolicy, ""},
		{"empty key", "api", "", 1, admission.ErrInvalidRequest, "key"},
		{"513-byte key", "api", long, 1, admission.ErrInvalidRequest, "key"},
		{"cost 0", "api", "alice", 0, admission.ErrInvalidRequest, "cost"},
		{"cost -1", "api", "alice", -1, admission.ErrInvalidRequest, "cost"},
		{"cost min int64", "api", "alice", math.MinInt64, admission.ErrInvalidRequest, "cost"},
		{"cost above max_cost", "api", "alice", 11, admission.ErrInvalidRequest, "cost"},
		{"cost above max_cost, new key", "api", "carol", 11, admission.ErrInvalidRequest, "cost"},
		{"cost max int64", "api", "alice", math.MaxInt64, admission.ErrInvalidRequest, "cost"},
	}
	for _, stamp := range []int64{t0 + sec, t0} { // at and behind LastNow
		for _, c := range cases {
			before := snapshotBytes(t, a.f)
			alice, bob := a.f.Bucket("api", "alice"), a.f.Bucket("api", "bob")
			count := a.f.BucketCount()

			err := a.admitErr(stamp, c.policy, c.key, c.cost)
			if !errors.Is(err, c.want) {
				t.Errorf("%s: error %v, want errors.Is %v", c.name, err, c.want)
			}
			var fe *admission.FieldError
			switch {
			case c.field == "" && errors.As(err, &fe):
				t.Errorf("%s: unexpected FieldError %+v", c.name, fe)
			case c.field == "" && errors.Is(err, admission.ErrInvalidRequest):
				t.Errorf("%s: %v also wraps ErrInvalidRequest", c.name, err)
			case c.field != "" && !errors.As(err, &fe):
				t.Errorf("%s: %v is not a *FieldError", c.name, err)
			case c.field != "" && fe.Field != c.field:
				t.Errorf("%s: field %q, want %q", c.name, fe.Field, c.field)
			}

			if got := a.f.Bucket("api", "alice"); got != alice {
				t.Errorf("%s: alice's bucket changed from %+v to %+v", c.name, alice, got)
			}
			if got := a.f.Bucket("api", "bob"); got != bob {
				t.Errorf("%s: bob's bucket changed from %+v to %+v", c.name, bob, got)
			}
			if got := a.f.Bucket(c.policy, c.key); c.key != "alice" && got != (admission.Bucket{}) {
				t.Errorf("%s: the refused key got a bucket %+v", c.name, got)
			}
			if got := a.f.BucketCount(); got != count {
				t.Errorf("%s: BucketCount %d, want %d", c.name, got, count)
			}
			if got := snapshotBytes(t, a.f); !bytes.Equal(got, before) {
				t.Errorf("%s: the snapshot changed", c.name)
			}
		}
	}

	// The boundaries just inside are accepted.
	if r := a.mustAdmit(t0+sec, "api", strings.Repeat("k", admission.MaxKeyBytes), 10); !r.Decision.Allowed {
		t.Errorf("512-byte key, cost max_cost: %+v, want allowed", r)
	}
}

// TestDenialChangesNothing spends a bucket down and checks that a request
// over the limit is denied with the exact wait and leaves the state alone.
func TestDenialChangesNothing(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("api", 60, time.Minute, 20, 10))
	if r := a.mustAdmit(t0, "api", "alice", 7); !r.Decision.Allowed || r.Decision.Remaining != 13 {
		t.Fatalf("first admit: %+v", r)
	}
	if r := a.mustAdmit(t0, "api", "alice", 10); !r.Decision.Allowed || r.Decision.Remaining != 3 {
		t.Fatalf("second admit: %+v", r)
	}
	bucket := a.f.Bucket("api", "alice")
	if bucket.TAT != t0+17*sec {
		t.Fatalf("bucket TAT %d, want %d", bucket.TAT, t0+17*sec)
	}
	before := snapshotBytes(t, a.f)
	for _, cost := range []int64{5, 4, 10} {
		r := a.mustAdmit(t0, "api", "alice", cost)
		want := admission.Decision{
			Limit:      20,
			Remaining:  3,
			ResetAfter: 17 * time.Second,
			RetryAfter: time.Duration(cost-3) * time.Second,
		}
		if r.Decision != want || r.PolicyVersion != 1 || r.DecidedAt != t0 {
			t.Fatalf("cost %d: %+v, want denial %+v at %d", cost, r, want, t0)
		}
		if got := a.f.Bucket("api", "alice"); got != bucket {
			t.Fatalf("cost %d: denial moved the bucket from %+v to %+v", cost, bucket, got)
		}
		if got := snapshotBytes(t, a.f); !bytes.Equal(got, before) {
			t.Fatalf("cost %d: denial changed the snapshot", cost)
		}
	}
	// Exactly RetryAfter later the same cost is allowed.
	if r := a.mustAdmit(t0+2*sec, "api", "alice", 5); !r.Decision.Allowed || r.Decision.Remaining != 0 {
		t.Fatalf("after waiting: %+v, want allowed with 0 remaining", r)
	}
}

// TestCapacityAtOneInstant is the strictness check: at one instant a bucket
// of 20 lets exactly 20 through, counting down.
func TestCapacityAtOneInstant(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("daily", 20, 24*time.Hour, 20, 0))
	interval := 24 * time.Hour / 20
	allowed := 0
	for i := range 100 {
		r := a.mustAdmit(t0, "daily", "tenant", 1)
		d := r.Decision
		if d.Limit != 20 || r.DecidedAt != t0 || r.PolicyVersion != 1 {
			t.Fatalf("admit %d: %+v", i, r)
		}
		if i < 20 {
			want := admission.Decision{Allowed: true, Limit: 20, Remaining: int64(19 - i), ResetAfter: time.Duration(i+1) * interval}
			if d != want {
				t.Fatalf("admit %d: %+v, want %+v", i, d, want)
			}
			allowed++
			continue
		}
		want := admission.Decision{Limit: 20, Remaining: 0, ResetAfter: 24 * time.Hour, RetryAfter: interval}
		if d != want {
			t.Fatalf("admit %d: %+v, want %+v", i, d, want)
		}
	}
	if allowed != 20 {
		t.Fatalf("%d allowed, want 20", allowed)
	}
}

// TestCapacityAcrossRestore checks that a snapshot in the middle of a burst
// neither forgets spending nor double-counts it.
func TestCapacityAcrossRestore(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("daily", 20, 24*time.Hour, 20, 0))
	for range 12 {
		a.mustAdmit(t0, "daily", "tenant", 1)
	}
	b := newApplier(t, fsm.Options{})
	restoreFrom(t, b.f, snapshotBytes(t, a.f))
	allowed := 0
	for range 50 {
		if b.mustAdmit(t0, "daily", "tenant", 1).Decision.Allowed {
			allowed++
		}
	}
	if allowed != 8 {
		t.Fatalf("restored replica allowed %d more, want 8", allowed)
	}
}

// TestKeysAreIndependent checks that buckets are per (policy, key).
func TestKeysAreIndependent(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("x", 3, time.Hour, 0, 0), tokenBucket("y", 3, time.Hour, 0, 0))
	var pairs [][2]string
	for _, p := range []string{"x", "y"} {
		for _, k := range []string{"a", "b", "x/a", "a/", "y"} {
			pairs = append(pairs, [2]string{p, k})
		}
	}
	counts := map[[2]string]int{}
	for i := range 10 * len(pairs) {
		pk := pairs[i%len(pairs)]
		if a.mustAdmit(t0, pk[0], pk[1], 1).Decision.Allowed {
			counts[pk]++
		}
	}
	for _, pk := range pairs {
		if counts[pk] != 3 {
			t.Errorf("%v: %d allowed, want 3", pk, counts[pk])
		}
	}
	if got := a.f.BucketCount(); got != len(pairs) {
		t.Fatalf("BucketCount %d, want %d", got, len(pairs))
	}
}
