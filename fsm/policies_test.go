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

// putPoliciesErr applies a PutPolicies that must be refused.
func (a *applier) putPoliciesErr(now int64, ps ...admission.Policy) error {
	a.tb.Helper()
	res := a.apply(putPoliciesEnv(now, ps...))
	err, ok := res.(error)
	if !ok {
		a.tb.Fatalf("PutPolicies = %#v, want an error", res)
	}
	return err
}

func TestPutPoliciesAllOrNone(t *testing.T) {
	good := []admission.Policy{
		tokenBucket("api", 120, time.Minute, 20, 10), // a change to the stored "api"
		tokenBucket("new", 5, time.Second, 0, 0),
	}
	bad := []struct {
		p     admission.Policy
		field string
	}{
		{tokenBucket("api", 0, time.Minute, 0, 0), "limit"},
		{tokenBucket("Bad Name", 1, time.Second, 0, 0), "name"},
		{tokenBucket("x", 10, time.Second, 5, 6), "max_cost"},
		{tokenBucket("x", 10, 0, 0, 0), "period"},
		{tokenBucket("x", 10, time.Second, -1, 0), "burst"},
		{admission.Policy{Name: "x", Algorithm: "concurrency", Limit: 1, Period: time.Hour}, "period"},
		{admission.Policy{Name: "x", Limit: 1, Period: time.Hour}, "algorithm"},
		{admission.Policy{Name: "x", Algorithm: admission.AlgorithmTokenBucket, Limit: 1, Period: time.Hour, OnUnavailable: "maybe"}, "on_unavailable"},
	}
	for _, b := range bad {
		for pos := range len(good) + 1 {
			t.Run(fmt.Sprintf("%s/at%d", b.field, pos), func(t *testing.T) {
				a := newApplier(t, fsm.Options{})
				a.putPolicies(t0, tokenBucket("api", 60, time.Minute, 20, 10))
				before, snap := a.f.Policies(), snapshotBytes(t, a.f)

				batch := append(append(append([]admission.Policy{}, good[:pos]...), b.p), good[pos:]...)
				err := a.putPoliciesErr(t0, batch...)
				var fe *admission.FieldError
				if !errors.Is(err, admission.ErrInvalidPolicy) || !errors.As(err, &fe) || fe.Field != b.field {
					t.Fatalf("error %v, want a FieldError on %q wrapping ErrInvalidPolicy", err, b.field)
				}
				if got := a.f.Policies(); !reflect.DeepEqual(got, before) {
					t.Fatalf("a refused batch changed the policies: %+v, want %+v", got, before)
				}
				if _, ok := a.f.Policy("new"); ok {
					t.Fatal("a refused batch stored a policy")
				}
				if got := snapshotBytes(t, a.f); !bytes.Equal(got, snap) {
					t.Fatal("a refused batch changed the snapshot")
				}
				if r := a.mustAdmit(t0, "api", "k", 10); r.PolicyVersion != 1 || r.Decision.Limit != 20 {
					t.Fatalf("admit after a refused batch: %+v, want the old policy", r)
				}
			})
		}
	}
}

func TestPutPoliciesDuplicateName(t *testing.T) {
	for name, batch := range map[string][]admission.Policy{
		"identical": {tokenBucket("dup", 5, time.Second, 0, 0), tokenBucket("dup", 5, time.Second, 0, 0)},
		"different": {tokenBucket("dup", 5, time.Second, 0, 0), tokenBucket("dup", 6, time.Second, 0, 0)},
		"same after defaults": {
			tokenBucket("dup", 5, time.Second, 0, 0), tokenBucket("other", 1, time.Second, 0, 0),
			tokenBucket("dup", 5, time.Second, 5, 5),
		},
	} {
		t.Run(name, func(t *testing.T) {
			a := newApplier(t, fsm.Options{})
			err := a.putPoliciesErr(t0, batch...)
			var fe *admission.FieldError
			if !errors.Is(err, admission.ErrInvalidPolicy) || !errors.As(err, &fe) || fe.Field != "name" {
				t.Fatalf("error %v, want a FieldError on name wrapping ErrInvalidPolicy", err)
			}
			if got := a.f.Policies(); len(got) != 0 {
				t.Fatalf("a refused batch stored %+v", got)
			}
		})
	}
}

func TestPolicyVersions(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	v1 := tokenBucket("api", 60, time.Minute, 20, 10)
	v1Defaults := v1
	v1Defaults.OnUnavailable = admission.OnUnavailableDeny // equal after defaults
	v2 := tokenBucket("api", 60, time.Minute, 30, 10)

	steps := []struct {
		put  []admission.Policy
		want []uint64 // versions, in the command's order
	}{
		{[]admission.Policy{v1, tokenBucket("b", 1, time.Second, 0, 0)}, []uint64{1, 1}},
		{[]admission.Policy{v1}, []uint64{1}},
		{[]admission.Policy{v1Defaults}, []uint64{1}},
		{[]admission.Policy{tokenBucket("b", 1, time.Second, 1, 1), v2}, []uint64{1, 2}},
		{[]admission.Policy{v2}, []uint64{2}},
		{[]admission.Policy{v1}, []uint64{3}}, // back to the first definition: still a change
		{[]admission.Policy{tokenBucket("c", 1, time.Second, 0, 0), v1, tokenBucket("b", 2, time.Second, 0, 0)}, []uint64{1, 3, 2}},
		{nil, nil},
	}
	for i, s := range steps {
		res := a.putPolicies(t0+int64(i), s.put...)
		if len(res.Policies) != len(s.want) {
			t.Fatalf("step %d: %d results, want %d", i, len(res.Policies), len(s.want))
		}
		for j, pv := range res.Policies {
			if pv.Policy.Name != s.put[j].Name || pv.Version != s.want[j] {
				t.Fatalf("step %d: result %d is %s v%d, want %s v%d", i, j, pv.Policy.Name, pv.Version, s.put[j].Name, s.want[j])
			}
			if pv.Policy != s.put[j].WithDefaults() {
				t.Fatalf("step %d: stored %+v, want %+v", i, pv.Policy, s.put[j].WithDefaults())
			}
			if got, ok := a.f.Policy(pv.Policy.Name); !ok || got != pv {
				t.Fatalf("step %d: Policy(%q) = %+v %v, want %+v", i, pv.Policy.Name, got, ok, pv)
			}
		}
	}
	if r := a.mustAdmit(t0+100, "api", "k", 1); r.PolicyVersion != 3 {
		t.Fatalf("decision reports policy version %d, want 3", r.PolicyVersion)
	}
	var names []string
	for _, pv := range a.f.Policies() {
		names = append(names, pv.Policy.Name)
	}
	if !reflect.DeepEqual(names, []string{"api", "b", "c"}) {
		t.Fatalf("Policies() names %v, want sorted [api b c]", names)
	}

	// Versions survive a snapshot: an unchanged re-put on a restored
	// replica keeps them, a change continues from them.
	b := newApplier(t, fsm.Options{})
	restoreFrom(t, b.f, snapshotBytes(t, a.f))
	if !reflect.DeepEqual(b.f.Policies(), a.f.Policies()) {
		t.Fatalf("restored policies %+v, want %+v", b.f.Policies(), a.f.Policies())
	}
	res := b.putPolicies(t0+200, v1, tokenBucket("b", 3, time.Second, 0, 0))
	if got := []uint64{res.Policies[0].Version, res.Policies[1].Version}; got[0] != 3 || got[1] != 3 {
		t.Fatalf("re-put on a restored replica: versions %v, want [3 3]", got)
	}
}

func TestPolicyDefaults(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	res := a.putPolicies(t0,
		tokenBucket("plain", 7, time.Second, 0, 0),
		tokenBucket("burst", 7, time.Second, 3, 0),
		admission.Policy{Name: "allow", Algorithm: admission.AlgorithmTokenBucket, Limit: 2, Period: time.Minute, OnUnavailable: admission.OnUnavailableAllow},
	)
	want := []admission.Policy{
		{Name: "plain", Algorithm: admission.AlgorithmTokenBucket, Limit: 7, Period: time.Second, Burst: 7, MaxCost: 7, OnUnavailable: admission.OnUnavailableDeny, DedupeRetention: admission.DefaultDedupeRetention},
		{Name: "burst", Algorithm: admission.AlgorithmTokenBucket, Limit: 7, Period: time.Second, Burst: 3, MaxCost: 3, OnUnavailable: admission.OnUnavailableDeny, DedupeRetention: admission.DefaultDedupeRetention},
		{Name: "allow", Algorithm: admission.AlgorithmTokenBucket, Limit: 2, Period: time.Minute, Burst: 2, MaxCost: 2, OnUnavailable: admission.OnUnavailableAllow, DedupeRetention: admission.DefaultDedupeRetention},
	}
	for i, w := range want {
		if got := res.Policies[i].Policy; got != w {
			t.Errorf("result %d: %+v, want %+v", i, got, w)
		}
		if got, _ := a.f.Policy(w.Name); got.Policy != w {
			t.Errorf("Policy(%q): %+v, want %+v", w.Name, got.Policy, w)
		}
	}
	// The defaults are what decides: burst 7, max_cost 7.
	if r := a.mustAdmit(t0, "plain", "k", 7); !r.Decision.Allowed || r.Decision.Limit != 7 || r.Decision.Remaining != 0 {
		t.Fatalf("cost 7 under burst 0 → limit 7: %+v", r)
	}
	if err := a.admitErr(t0, "burst", "k", 4); !errors.Is(err, admission.ErrInvalidRequest) {
		t.Fatalf("cost 4 over max_cost 0 → burst 3: %v", err)
	}
}

// TestPolicyChangeKeepsBuckets checks that a changed policy applies to the
// existing bucket's TAT from the next decision on.
func TestPolicyChangeKeepsBuckets(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("api", 10, 10*time.Second, 10, 0)) // 1/s, burst 10
	a.mustAdmit(t0, "api", "k", 8)                                   // TAT t0+8s, 2 left
	a.putPolicies(t0, tokenBucket("api", 10, 10*time.Second, 20, 0)) // burst 20: 12 left
	r := a.mustAdmit(t0, "api", "k", 12)
	if !r.Decision.Allowed || r.Decision.Limit != 20 || r.Decision.Remaining != 0 || r.PolicyVersion != 2 {
		t.Fatalf("after raising burst: %+v, want 12 allowed under v2", r)
	}
	a.putPolicies(t0, tokenBucket("api", 10, 10*time.Second, 5, 0)) // burst 5: TAT 20s ahead, deny for 15s
	r = a.mustAdmit(t0, "api", "k", 1)
	if r.Decision.Allowed || r.Decision.RetryAfter != 16*time.Second || r.PolicyVersion != 3 {
		t.Fatalf("after lowering burst: %+v, want denied for 16s under v3", r)
	}
}
