package fsm_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
)

// Multi-check policies: the tenant's budget, one endpoint's and one IP's.
var (
	tenantPolicy   = tokenBucket("tenant", 10, time.Hour, 10, 10) // T = 6m
	endpointPolicy = tokenBucket("endpoint", 5, time.Hour, 5, 5)  // T = 12m
	ipPolicy       = tokenBucket("ip", 10, time.Hour, 10, 10)     // T = 6m
)

// multiGroup has the three policies, endpoint at version 2.
func multiGroup(tb testing.TB) *applier {
	tb.Helper()
	a := newApplier(tb, fsm.Options{})
	a.putPolicies(t0, tenantPolicy, endpointPolicy, ipPolicy)
	ep := endpointPolicy
	ep.MaxCost = 4
	if v := a.putPolicies(t0, ep).Policies[0].Version; v != 2 {
		tb.Fatalf("endpoint version %d, want 2", v)
	}
	return a
}

func TestMultiCheckAllOrNone(t *testing.T) {
	a := multiGroup(t)
	tenant, endpoint, ip := chk{"tenant", "{t1}:tenant", 2}, chk{"endpoint", "{t1}:api", 3}, chk{"ip", "{t1}:ip:1.2.3.4", 1}
	if r := a.decide(t0, admitOpts{}, chk{"endpoint", "{t1}:api", 3}); !r.Decision.Allowed || r.Decision.Remaining != 2 {
		t.Fatalf("pre-spend on endpoint: %+v", r)
	}

	// The second check denies: nothing is charged anywhere.
	res := a.unchanged("denied multi-check", multiEnv(t0, admitOpts{}, tenant, endpoint, ip), tenant, endpoint, ip)
	r := *res.(*fsm.AdmitResult)
	if r.DeniedCheck != 1 || !r.Multi || len(r.Checks) != 3 || r.Wait != 0 || r.Duplicate || r.DecidedAt != t0 {
		t.Fatalf("denied multi-check: %+v", r)
	}
	if r.Decision != r.Checks[1].Decision || r.PolicyVersion != 2 || r.Checks[1].PolicyVersion != 2 || r.Checks[0].PolicyVersion != 1 {
		t.Fatalf("top-level fields %+v v%d are not the denying check's %+v", r.Decision, r.PolicyVersion, r.Checks[1])
	}
	if d := r.Decision; d.Allowed || d.Remaining != 2 || d.Limit != 5 || d.RetryAfter != 12*time.Minute {
		t.Fatalf("denying decision %+v, want denied, 2 left, retry in 12m", d)
	}
	for i, c := range r.Checks {
		want := []chk{tenant, endpoint, ip}[i]
		if c.Policy != want.policy || c.Key != want.key || c.Cost != want.cost || c.Spent != 0 || c.ShadowDenied {
			t.Fatalf("check %d: %+v, want %+v with nothing spent", i, c, want)
		}
	}
	if !r.Checks[0].Decision.Allowed || r.Checks[0].Decision.Remaining != 8 || !r.Checks[2].Decision.Allowed {
		t.Fatalf("checks 0 and 2 alone would have been allowed: %+v", r.Checks)
	}

	// Every check allows: each is charged exactly its cost.
	t2 := []chk{{"tenant", "{t2}:tenant", 2}, {"endpoint", "{t2}:api", 3}, {"ip", "{t2}:ip:5.6.7.8", 1}}
	r = a.decide(t0, admitOpts{}, t2...)
	if !r.Decision.Allowed || r.DeniedCheck != -1 || r.Decision != r.Checks[0].Decision || r.PolicyVersion != 1 {
		t.Fatalf("allowed multi-check: %+v", r)
	}
	for i, c := range t2 {
		tat := tenantPolicy.EmissionInterval() * c.cost // ip has the same interval
		if c.policy == "endpoint" {
			tat = endpointPolicy.EmissionInterval() * c.cost
		}
		if got := a.f.State(c.policy, c.key); got.TAT != t0+tat || r.Checks[i].Spent != c.cost || !r.Checks[i].Decision.Allowed {
			t.Fatalf("check %d %+v: TAT +%v, spent %d; want +%v, %d", i, c, time.Duration(got.TAT-t0), r.Checks[i].Spent, time.Duration(tat), c.cost)
		}
	}

	// The same (policy, key) twice: the second sees the first's spend.
	a.putPolicies(t0, tokenBucket("cap3", 3, time.Hour, 3, 3)) // T = 20m
	twice := chk{"cap3", "{k}", 2}
	res = a.unchanged("same key twice, denied", multiEnv(t0, admitOpts{}, twice, twice), twice)
	r = *res.(*fsm.AdmitResult)
	if r.DeniedCheck != 1 || r.Decision.Allowed || r.Decision.Remaining != 1 || r.Decision.RetryAfter != 20*time.Minute {
		t.Fatalf("same key twice: %+v, want the second check denied with 1 left, retry in 20m", r)
	}
	r = a.decide(t0, admitOpts{}, chk{"cap3", "{k}", 1}, twice)
	if !r.Decision.Allowed || r.Checks[1].Decision.Remaining != 0 || a.f.State("cap3", "{k}").TAT != t0+int64(time.Hour) {
		t.Fatalf("same key, costs 1 and 2: %+v, TAT +%v; want both charged", r, time.Duration(a.f.State("cap3", "{k}").TAT-t0))
	}

	// Refusals before any decision: nothing charged either.
	fresh := []chk{{"tenant", "{t3}:tenant", 1}, {"ip", "{t3}:ip", 1}}
	nine := make([]chk, admission.MaxChecks+1)
	for i := range nine {
		nine[i] = chk{"ip", fmt.Sprintf("{t3}:ip:%d", i), 1}
	}
	for _, c := range []struct {
		name   string
		checks []chk
		want   error
		field  string
	}{
		{"unknown policy in also[1]", append(slices.Clone(fresh), chk{"nope", "{t3}:x", 1}), fsm.ErrUnknownPolicy, ""},
		{"cost 0 in also[0]", []chk{fresh[0], {"ip", "{t3}:ip", 0}}, admission.ErrInvalidRequest, "also[0].cost"},
		{"cost above max_cost in also[1]", append(slices.Clone(fresh), chk{"endpoint", "{t3}:api", 5}), admission.ErrInvalidRequest, "also[1].cost"},
		{"empty key in also[0]", []chk{fresh[0], {"ip", "", 1}}, admission.ErrInvalidRequest, "also[0].key"},
		{"bad cost in the own check", []chk{{"tenant", "{t3}:tenant", -1}, fresh[1]}, admission.ErrInvalidRequest, "cost"},
		{"more than MaxChecks", nine, admission.ErrInvalidRequest, "also"},
	} {
		res := a.unchanged(c.name, multiEnv(t0, admitOpts{caller: "svc", rid: "refused-" + c.name}, c.checks...), c.checks...)
		err, ok := res.(error)
		if !ok || !errors.Is(err, c.want) || fieldOf(err) != c.field {
			t.Fatalf("%s: %v (field %q), want errors.Is %v and field %q", c.name, res, fieldOf(err), c.want, c.field)
		}
	}
	if a.f.DedupeLen() != 0 {
		t.Fatalf("refused requests were recorded: DedupeLen %d", a.f.DedupeLen())
	}
	// Exactly MaxChecks is fine.
	if r := a.decide(t0, admitOpts{}, nine[:admission.MaxChecks]...); !r.Decision.Allowed || len(r.Checks) != admission.MaxChecks {
		t.Fatalf("%d checks: %+v", admission.MaxChecks, r)
	}
	// A single check is not Multi but still lists itself.
	if r := a.decide(t0, admitOpts{}, chk{"ip", "solo", 1}); r.Multi || len(r.Checks) != 1 || r.DeniedCheck != -1 || r.Checks[0].Spent != 1 {
		t.Fatalf("single check: %+v", r)
	}
}

// A multi-check request that does not fit the group's bounds is refused
// whole: no check is charged and nothing is recorded.
func TestMultiCheckRefusedWhenGroupFull(t *testing.T) {
	a := newApplier(t, fsm.Options{MaxBuckets: 4, MaxDedupeEntries: 1})
	a.putPolicies(t0, tenantPolicy, ipPolicy)
	a.decide(t0, admitOpts{caller: "svc", rid: "only"}, chk{"tenant", "{x}:t", 1}, chk{"ip", "{x}:ip", 1})
	// Three new states where two fit.
	three := []chk{{"tenant", "{x}:t", 1}, {"ip", "{x}:a", 1}, {"ip", "{x}:b", 1}, {"ip", "{x}:c", 1}}
	if err := a.unchanged("group full", multiEnv(t0, admitOpts{}, three...), three...).(error); !errors.Is(err, fsm.ErrGroupFull) {
		t.Fatalf("three new states over MaxBuckets: %v, want ErrGroupFull", err)
	}
	// A new request ID where the table is full.
	two := three[:2]
	if err := a.unchanged("dedupe full", multiEnv(t0, admitOpts{caller: "svc", rid: "more"}, two...), two...).(error); !errors.Is(err, fsm.ErrDedupeFull) {
		t.Fatalf("request ID over MaxDedupeEntries: %v, want ErrDedupeFull", err)
	}
	if r := a.decide(t0, admitOpts{}, two...); !r.Decision.Allowed || a.f.BucketCount() != 3 {
		t.Fatalf("without a request ID: %+v, BucketCount %d", r, a.f.BucketCount())
	}
}

func TestMultiCheckRequestID(t *testing.T) {
	a := multiGroup(t)
	checks := []chk{{"tenant", "{t1}:tenant", 1}, {"endpoint", "{t1}:api", 4}, {"ip", "{t1}:ip", 1}}
	o := admitOpts{caller: "gw", rid: "m1"}
	first := a.decide(t0, o, checks...)
	if !first.Decision.Allowed || !first.Multi || first.DeniedCheck != -1 || first.Duplicate {
		t.Fatalf("first: %+v", first)
	}
	denied := a.decide(t0, admitOpts{caller: "gw", rid: "m2"}, checks...) // endpoint has 1 left
	if denied.Decision.Allowed || denied.DeniedCheck != 1 {
		t.Fatalf("second: %+v, want denied by check 1", denied)
	}
	for _, now := range []int64{t0, t0 + int64(9*time.Minute)} { // within the 10m retention; buckets refilled some
		for _, c := range []struct {
			rid  string
			want fsm.AdmitResult
		}{{"m1", first}, {"m2", denied}} {
			got := a.decide(now, admitOpts{caller: "gw", rid: c.rid}, checks...)
			if !reflect.DeepEqual(got, dupOf(c.want)) {
				t.Fatalf("retry of %s at +%v: %+v, want %+v", c.rid, time.Duration(now-t0), got, dupOf(c.want))
			}
		}
	}
	now := a.f.LastNow()
	for _, c := range []struct {
		name   string
		o      admitOpts
		checks []chk
	}{
		{"other key in also[0]", o, []chk{checks[0], {"endpoint", "{t1}:web", 4}, checks[2]}},
		{"other cost in also[1]", o, []chk{checks[0], checks[1], {"ip", "{t1}:ip", 2}}},
		{"one check fewer", o, checks[:2]},
		{"one check more", o, append(slices.Clone(checks), chk{"ip", "{t1}:ip2", 1})},
		{"checks reordered", o, []chk{checks[0], checks[2], checks[1]}},
		{"single check", o, checks[:1]},
		{"with max_wait", admitOpts{caller: "gw", rid: "m1", maxWait: time.Second}, checks},
	} {
		checkReused(t, c.name, a.unchanged(c.name, multiEnv(now, c.o, c.checks...), c.checks...).(error))
	}
}

func TestPacing(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("pace", 10, time.Second, 1, 1)) // T = 100ms, burst 1
	const T = 100 * time.Millisecond
	pace := chk{"pace", "{p}", 1}
	var slots []int64 // when each admitted request may proceed
	admitAt := func(now int64, maxWait time.Duration, wantWait time.Duration) {
		t.Helper()
		r := a.decide(now, admitOpts{maxWait: maxWait}, pace)
		d := r.Decision
		if !d.Allowed || r.Wait != wantWait || d.Remaining != 0 || d.ResetAfter != wantWait+T || r.Checks[0].Spent != 1 {
			t.Fatalf("at +%v with max_wait %v: %+v, want allowed with wait %v", time.Duration(now-t0), maxWait, r, wantWait)
		}
		slots = append(slots, now+int64(r.Wait))
		if tat := a.f.State("pace", "{p}").TAT; tat != now+int64(wantWait+T) {
			t.Fatalf("after a wait of %v the TAT is +%v, want the slot reserved", wantWait, time.Duration(tat-now))
		}
	}
	for i := range 5 {
		admitAt(t0, time.Second, time.Duration(i)*T)
	}
	// The next slot is 500ms away: beyond 450ms it is denied, spending nothing.
	res := a.unchanged("beyond max_wait", multiEnv(t0, admitOpts{maxWait: 450 * time.Millisecond}, pace), pace)
	if r := res.(*fsm.AdmitResult); r.Decision.Allowed || r.Wait != 0 || r.Decision.RetryAfter != 5*T || r.DeniedCheck != 0 {
		t.Fatalf("beyond max_wait: %+v, want denied, retry after 500ms", r)
	}
	// Without max_wait it is a plain denial.
	res = a.unchanged("no max_wait", multiEnv(t0, admitOpts{}, pace), pace)
	if r := res.(*fsm.AdmitResult); r.Decision.Allowed || r.Wait != 0 {
		t.Fatalf("no max_wait: %+v, want denied", r)
	}
	admitAt(t0, 5*T, 5*T) // max_wait equal to the wait is enough
	admitAt(t0+int64(250*time.Millisecond), time.Second, 350*time.Millisecond)
	admitAt(t0+int64(2*time.Second), time.Second, 0) // conforms now: no wait
	admitAt(t0+int64(2*time.Second), time.Second, T)

	// GCRA over the slots: in any [s_i, s_j], at most burst + (s_j−s_i)/T units.
	slices.Sort(slots)
	for i := range slots {
		for j := i; j < len(slots); j++ {
			if n, bound := int64(j-i+1), 1+(slots[j]-slots[i])/int64(T); n > bound {
				t.Fatalf("%d units proceed in [+%v, +%v], more than %d", n, time.Duration(slots[i]-t0), time.Duration(slots[j]-t0), bound)
			}
		}
	}
	if len(slices.Compact(slices.Clone(slots))) != len(slots) {
		t.Fatalf("two paced requests share a slot: %v", slots)
	}

	// Pacing is for token_bucket only.
	fw := admission.Policy{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 1, Period: time.Second}
	if fw.Validate() == nil {
		a.putPolicies(a.f.LastNow(), fw)
		now := a.f.LastNow()
		a.decide(now, admitOpts{}, chk{"fw", "k", 1})
		if r := a.decide(now, admitOpts{maxWait: time.Minute}, chk{"fw", "k", 1}); r.Decision.Allowed || r.Wait != 0 {
			t.Fatalf("fixed_window with max_wait: %+v, want denied without pacing", r)
		}
	}
}

// A paced multi-check request proceeds at now+wait, so every check must be
// charged as of that slot: a check decided at now lets its bucket refill
// during the wait, and more than its burst then proceeds at the slot.
func TestPacingMultiCheckChargesEveryCheckAtTheSlot(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("pace", 10, time.Second, 1, 1), tokenBucket("other", 10, time.Second, 1, 1)) // T = 100ms, burst 1
	// The next slot of pace/{u}:a is +100ms.
	a.decide(t0, admitOpts{}, chk{"pace", "{u}:a", 1})
	r := a.decide(t0, admitOpts{maxWait: time.Second}, chk{"pace", "{u}:a", 1}, chk{"other", "{u}:b", 1})
	if !r.Decision.Allowed || r.Wait != 100*time.Millisecond {
		t.Fatalf("paced multi-check: %+v, want allowed with a 100ms wait", r)
	}
	// The request proceeds at +100ms using one unit of other/{u}:b (burst 1):
	// nothing else may proceed on that key at +100ms.
	slot := t0 + int64(r.Wait)
	if got := a.decide(slot, admitOpts{}, chk{"other", "{u}:b", 1}); got.Decision.Allowed {
		t.Fatalf("at the slot other/{u}:b admitted a second unit: %+v; burst is 1", got)
	}
}

func TestShadow(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, shadowOf(tokenBucket("sh", 2, time.Hour, 2, 2)), tokenBucket("hard", 2, time.Hour, 2, 2)) // T = 30m
	sh := chk{"sh", "{u}:sh", 1}
	for i, want := range []int64{1, 0} {
		if r := a.decide(t0, admitOpts{}, sh); !r.Decision.Allowed || r.ShadowDenied || r.Decision.Remaining != want {
			t.Fatalf("request %d: %+v, want allowed with %d left", i+1, r, want)
		}
	}
	full := a.f.State("sh", "{u}:sh")
	for i := range 3 {
		res := a.unchanged("shadow-denied", multiEnv(t0, admitOpts{}, sh), sh)
		r := res.(*fsm.AdmitResult)
		if !r.Decision.Allowed || !r.ShadowDenied || r.Decision.Remaining != 0 || r.DeniedCheck != -1 || !r.Checks[0].ShadowDenied || r.Checks[0].Spent != 0 {
			t.Fatalf("request %d beyond the limit: %+v, want allowed, shadow_denied, nothing spent", i+3, r)
		}
		// With a request ID: recorded as shadow-denied, and retried as such.
		rec := a.decide(t0, admitOpts{caller: "c", rid: fmt.Sprint("s", i)}, sh)
		rec.Duplicate = false
		if r.DecidedAt = rec.DecidedAt; !reflect.DeepEqual(rec, *r) {
			t.Fatalf("shadow denial with a request ID: %+v, want %+v", rec, *r)
		}
		if got := a.decide(t0, admitOpts{caller: "c", rid: fmt.Sprint("s", i)}, sh); !reflect.DeepEqual(got, dupOf(rec)) {
			t.Fatalf("retry of a shadow denial: %+v, want %+v", got, dupOf(rec))
		}
	}
	if got := a.f.State("sh", "{u}:sh"); !statesEqual(got, full) {
		t.Fatalf("shadow denials spent: %+v -> %+v", full, got)
	}
	// One unit refills in 30m: exactly one more is allowed without shadow.
	later := t0 + int64(30*time.Minute)
	if r := a.decide(later, admitOpts{}, sh); !r.Decision.Allowed || r.ShadowDenied || r.Decision.Remaining != 0 {
		t.Fatalf("after one refill: %+v, want a real admission", r)
	}
	if r := a.decide(later, admitOpts{}, sh); !r.ShadowDenied {
		t.Fatalf("second after one refill: %+v, want shadow_denied", r)
	}

	// In a multi-check request a shadow check does not deny...
	hard := chk{"hard", "{u}:hard", 1}
	before := a.f.State("sh", "{u}:sh")
	r := a.decide(later, admitOpts{}, hard, sh)
	if !r.Decision.Allowed || r.DeniedCheck != -1 || r.ShadowDenied || !r.Checks[1].ShadowDenied || !r.Checks[1].Decision.Allowed ||
		r.Checks[0].Spent != 1 || r.Checks[1].Spent != 0 {
		t.Fatalf("hard + shadow-denied: %+v, want allowed, check 1 shadow_denied", r)
	}
	if got := a.f.State("sh", "{u}:sh"); !statesEqual(got, before) || a.f.State("hard", "{u}:hard").TAT != later+int64(30*time.Minute) {
		t.Fatalf("hard + shadow-denied: shadow state %+v (was %+v), hard TAT +%v", got, before, time.Duration(a.f.State("hard", "{u}:hard").TAT-later))
	}
	// ... while a non-shadow check still does.
	a.decide(later, admitOpts{}, hard)
	res := a.unchanged("shadow + denying hard", multiEnv(later, admitOpts{}, sh, hard), sh, hard)
	r = *res.(*fsm.AdmitResult)
	if r.Decision.Allowed || r.DeniedCheck != 1 || r.ShadowDenied || !r.Checks[0].ShadowDenied || r.Checks[0].Spent != 0 || r.Checks[1].Spent != 0 {
		t.Fatalf("shadow-denied + denying hard: %+v, want denied by check 1", r)
	}
}
