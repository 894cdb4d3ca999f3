package fsm_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
)

type policyKey struct{ policy, key string }

// TestSweepOrderAndBound fills a group with buckets whose TATs tie and
// differ, lets some expire, and checks that each Apply reclaims at most
// SweepPerApply of them, smallest (TAT, policy/key) first, and never one
// that has not expired.
func TestSweepOrderAndBound(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	// One unit per second, so a cost of c puts TAT at now + c seconds.
	a.putPolicies(t0, tokenBucket("p", 1, time.Second, 100, 0), tokenBucket("q", 1, time.Second, 100, 0))
	var all []policyKey
	for i := range 120 {
		pk := policyKey{"p", fmt.Sprintf("k%03d", 119-i)} // admitted in reverse key order
		if i%6 == 0 {
			pk.policy = "q"
		}
		cost := int64(1 + (i*7)%10)
		if r := a.mustAdmit(t0, pk.policy, pk.key, cost); !r.Decision.Allowed {
			t.Fatalf("admit %v: %+v", pk, r)
		}
		all = append(all, pk)
	}
	if got := a.f.BucketCount(); got != len(all) {
		t.Fatalf("BucketCount %d, want %d", got, len(all))
	}
	tat := func(pk policyKey) int64 { return a.f.Bucket(pk.policy, pk.key).TAT }
	order := slices.Clone(all)
	tats := map[policyKey]int64{}
	for _, pk := range order {
		tats[pk] = tat(pk)
	}
	slices.SortFunc(order, func(x, y policyKey) int {
		if c := cmp.Compare(tats[x], tats[y]); c != 0 {
			return c
		}
		return cmp.Compare(fsm.BucketKey(x.policy, x.key), fsm.BucketKey(y.policy, y.key))
	})

	// At t0+5s the buckets with TAT <= t0+5s (costs 1..5, TAT == now
	// included) have expired.
	sweepAt := t0 + 5*sec
	expired := 0
	for _, pk := range order {
		if tats[pk] <= sweepAt {
			expired++
		}
	}
	if expired <= fsm.SweepPerApply || expired >= len(all) {
		t.Fatalf("test setup: %d expired buckets, want more than %d and fewer than %d", expired, fsm.SweepPerApply, len(all))
	}
	swept := 0
	for i := 0; swept < expired; i++ {
		a.apply(registerNodeEnv(sweepAt, "n", "r", fmt.Sprint(i)))
		swept = min(swept+fsm.SweepPerApply, expired)
		if got := a.f.BucketCount(); got != len(all)-swept {
			t.Fatalf("after sweep %d: BucketCount %d, want %d", i, got, len(all)-swept)
		}
		for j, pk := range order {
			gone := a.f.Bucket(pk.policy, pk.key) == (admission.Bucket{})
			if gone != (j < swept) {
				t.Fatalf("after sweep %d: bucket %d in (TAT, key) order %v (TAT %d) gone=%v, want %v", i, j, pk, tats[pk], gone, j < swept)
			}
		}
	}
	// Nothing more has expired: further Applies at the same time keep the
	// rest.
	a.apply(registerNodeEnv(sweepAt, "n", "r", "x"))
	if got := a.f.BucketCount(); got != len(all)-expired {
		t.Fatalf("BucketCount %d, want %d", got, len(all)-expired)
	}
	// Far ahead, everything goes, SweepPerApply at a time.
	for left := len(all) - expired; left > 0; left -= min(left, fsm.SweepPerApply) {
		a.apply(registerNodeEnv(t0+int64(time.Hour), "n", "r", "y"))
		if got, want := a.f.BucketCount(), left-min(left, fsm.SweepPerApply); got != want {
			t.Fatalf("BucketCount %d, want %d", got, want)
		}
	}
}

// TestSweepIsIndependentOfHistory checks that two replicas whose heaps were
// built in different orders (one from Applies, one from a snapshot) reclaim
// the same buckets.
func TestSweepIsIndependentOfHistory(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("p", 1, time.Second, 100, 0))
	for i := range 200 {
		// Many ties on TAT, keys in a scrambled order, some re-spent.
		a.mustAdmit(t0, "p", fmt.Sprintf("k%03d", (i*37)%150), int64(1+i%3))
	}
	b := newApplier(t, fsm.Options{})
	b.index = a.index
	restoreFrom(t, b.f, snapshotBytes(t, a.f))
	for i := range 8 {
		now := t0 + int64(i)*sec/2
		a.apply(registerNodeEnv(now, "n", "r", "a"))
		b.apply(registerNodeEnv(now, "n", "r", "a"))
		if x, y := snapshotBytes(t, a.f), snapshotBytes(t, b.f); !bytes.Equal(x, y) {
			t.Fatalf("step %d: replicas swept differently (%d vs %d buckets)", i, a.f.BucketCount(), b.f.BucketCount())
		}
	}
}

// TestSweptKeyDecidesAsNew checks that expired state is equivalent to no
// state, whether or not it has been reclaimed yet.
func TestSweptKeyDecidesAsNew(t *testing.T) {
	later := t0 + 10*sec
	for _, swept := range []bool{true, false} {
		t.Run(fmt.Sprintf("swept=%v", swept), func(t *testing.T) {
			a, fresh := newApplier(t, fsm.Options{}), newApplier(t, fsm.Options{})
			for _, x := range []*applier{a, fresh} {
				x.putPolicies(t0, tokenBucket("api", 10, time.Second, 5, 0))
			}
			a.mustAdmit(t0, "api", "old", 5)
			if swept {
				a.apply(registerNodeEnv(later, "n", "r", "a"))
				if got := a.f.BucketCount(); got != 0 {
					t.Fatalf("BucketCount %d after expiry, want 0", got)
				}
			}
			fresh.apply(registerNodeEnv(later, "n", "r", "a"))
			for i, cost := range []int64{3, 2, 1, 4} {
				got := a.mustAdmit(later, "api", "old", cost)
				want := fresh.mustAdmit(later, "api", "old", cost)
				never := fresh.mustAdmit(later, "api", fmt.Sprintf("never%d", i), cost)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("admit %d: expired key decided %+v, fresh replica %+v", i, got, want)
				}
				if i == 0 && (got.Decision != never.Decision || got.DecidedAt != never.DecidedAt) {
					t.Fatalf("expired key decided %+v, never-seen key %+v", got, never)
				}
			}
		})
	}
}

// fillGroup makes a group with MaxBuckets 3 and three buckets that expire
// at t0+1s.
func fillGroup(t *testing.T) *applier {
	t.Helper()
	a := newApplier(t, fsm.Options{MaxBuckets: 3})
	a.putPolicies(t0, tokenBucket("api", 10, time.Second, 10, 0)) // 100ms per unit
	for _, k := range []string{"a", "b", "c"} {
		if r := a.mustAdmit(t0, "api", k, 5); !r.Decision.Allowed {
			t.Fatalf("admit %q: %+v", k, r)
		}
	}
	return a
}

func TestMaxBuckets(t *testing.T) {
	a := fillGroup(t)
	before, snap := a.f.BucketCount(), snapshotBytes(t, a.f)
	err := a.admitErr(t0, "api", "d", 1)
	if !errors.Is(err, fsm.ErrGroupFull) {
		t.Fatalf("4th key: %v, want ErrGroupFull", err)
	}
	var fe *admission.FieldError
	if errors.As(err, &fe) {
		t.Fatalf("ErrGroupFull carries a FieldError %+v", fe)
	}
	if got := a.f.Bucket("api", "d"); got != (admission.Bucket{}) {
		t.Fatalf("refused key got bucket %+v", got)
	}
	if got := a.f.BucketCount(); got != before {
		t.Fatalf("BucketCount %d, want %d", got, before)
	}
	if !bytes.Equal(snapshotBytes(t, a.f), snap) {
		t.Fatal("ErrGroupFull changed the snapshot")
	}
	// Existing keys still work, allowed and denied; nothing was evicted.
	if r := a.mustAdmit(t0, "api", "a", 5); !r.Decision.Allowed || r.Decision.Remaining != 0 {
		t.Fatalf("existing key: %+v", r)
	}
	if r := a.mustAdmit(t0, "api", "a", 1); r.Decision.Allowed {
		t.Fatalf("existing key over the limit: %+v", r)
	}
	if err := a.admitErr(t0+sec/4, "api", "e", 1); !errors.Is(err, fsm.ErrGroupFull) {
		t.Fatalf("5th key while b, c are live: %v, want ErrGroupFull", err)
	}
	// b and c expire at t0+0.5s; a at t0+1s. One Apply reclaims them, and
	// then new keys fit until the group is full again.
	a.apply(registerNodeEnv(t0+sec/2, "n", "r", "a"))
	if got := a.f.BucketCount(); got != 1 {
		t.Fatalf("BucketCount %d after b and c expired, want 1", got)
	}
	for _, k := range []string{"d", "e"} {
		if r := a.mustAdmit(t0+sec/2, "api", k, 1); !r.Decision.Allowed {
			t.Fatalf("new key %q after expiry: %+v", k, r)
		}
	}
	if err := a.admitErr(t0+sec/2, "api", "f", 1); !errors.Is(err, fsm.ErrGroupFull) {
		t.Fatalf("key beyond the bound: %v, want ErrGroupFull", err)
	}
}

// TestMaxBucketsExpiredBucketsDoNotCount checks that buckets that have
// expired but not yet been reclaimed do not hold a group full: expired state
// is equivalent to absent state (DESIGN.md §2 rule 4; fsm/DESIGN.md
// "Expiry"), so the first entry after the expiry must be able to create a
// bucket, exactly as it could after any other entry had swept them.
func TestMaxBucketsExpiredBucketsDoNotCount(t *testing.T) {
	a := fillGroup(t)
	later := t0 + int64(time.Hour) // every bucket expired, none swept yet
	res := a.admit(later, "api", "d", 1)
	if r, ok := res.(*fsm.AdmitResult); !ok || !r.Decision.Allowed {
		t.Fatalf("first Admit of a new key after every bucket expired: %v, want allowed", toOutcome(t, res))
	}
}
