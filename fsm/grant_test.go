package fsm_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
)

func TestGrantTopsUpAndRenews(t *testing.T) {
	a := grantApplier(t)
	now := t0 + int64(time.Millisecond)
	r := a.grant(now, gcall{policy: "tb", key: "k", holder: "h1", want: 30, demand: 1000})
	if r.Total != 30 || r.Added != 30 || r.Used != 0 || r.StartedAt != now || r.ExpiresAt != now+int64(5*time.Second) ||
		r.DecidedAt != now || r.Decision.Remaining != 70 || !r.Decision.Allowed || r.Duplicate || r.ShareMicro != 1_000_000 {
		t.Fatalf("first grant = %+v", r)
	}
	// A renewal tops up to want, at most max_grant unspent, and extends.
	later := now + int64(time.Second)
	r = a.grant(later, gcall{policy: "tb", key: "k", holder: "h1", seq: 1, want: 100, used: 20, demand: 1000})
	if r.Total != 30+30 || r.Added != 30 || r.Used != 20 || r.StartedAt != now || r.ExpiresAt != later+int64(5*time.Second) {
		t.Fatalf("renewal = %+v, want 30 more (40 unspent at most)", r)
	}
	// Nothing to add: the expiry still moves.
	r = a.grant(later+1, gcall{policy: "tb", key: "k", holder: "h1", seq: 2, want: 10, used: 20, demand: 1000})
	if r.Added != 0 || r.Total != 60 || r.ExpiresAt != later+1+int64(5*time.Second) || !r.Decision.Allowed {
		t.Fatalf("renewal with enough unspent = %+v", r)
	}
	if live, units, wasted := a.f.GrantStats(); live != 1 || units != 40 || wasted != 0 {
		t.Errorf("GrantStats = %d, %d, %d; want 1, 40, 0", live, units, wasted)
	}
	infos := a.f.GrantsOf("tb", "k")
	if len(infos) != 1 || infos[0] != (fsm.GrantInfo{Holder: "h1", Caller: "gw", Total: 60, Used: 20, DemandMilli: 1000, StartedAt: now, ExpiresAt: r.ExpiresAt}) {
		t.Errorf("GrantsOf = %+v", infos)
	}
}

func TestGrantSizingByDemand(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	const burst = 1_000_000
	a.putPolicies(t0, leased(tokenBucket("big", burst, time.Hour, burst, 10), burst, time.Minute))
	now := t0 + 1
	for i, d := range []int64{700, 200, 100} {
		a.grant(now, gcall{policy: "big", key: "k", holder: fmt.Sprint("h", i), want: 1, demand: d})
	}
	snap := snapshotBytes(t, a.f)
	avail := a.peekRemaining(now, "big", "k")
	ask := func(b *applier, i int, d int64) int64 {
		r := b.grant(now, gcall{policy: "big", key: "k", holder: fmt.Sprint("h", i), seq: 1, want: burst, used: 1, demand: d})
		if want := (avail*d + 999) / 1000; r.Added != want || r.ShareMicro != d*1000 {
			t.Errorf("holder %d (demand %d of 1000): added %d, share %d; want %d (of %d), %d", i, d, r.Added, r.ShareMicro, want, avail, d*1000)
		}
		return r.Added
	}
	for i, d := range []int64{700, 200, 100} {
		// Each from the same state: before and after a restore (the
		// per-key aggregates are rebuilt).
		b := newApplier(t, fsm.Options{})
		restoreFrom(t, b.f, snap)
		ask(b, i, d)
		c := newApplier(t, fsm.Options{})
		restoreFrom(t, c.f, snapshotBytes(t, b.f))
		restoreFrom(t, b.f, snap)
		ask(b, i, d)
	}
	// One after the other: each gets its share of what is left.
	left := avail
	for i, d := range []int64{700, 200, 100} {
		avail = a.peekRemaining(now, "big", "k")
		if avail != left {
			t.Fatalf("avail %d, want %d", avail, left)
		}
		left -= ask(a, i, d)
	}
}

func TestGrantReleaseRefundsUnused(t *testing.T) {
	for _, p := range []string{"tb", "fw", "sw", "qu"} {
		t.Run(p, func(t *testing.T) {
			a := grantApplier(t)
			now := t0 + int64(time.Millisecond)
			before := a.peekRemaining(now, p, "k")
			a.grant(now, gcall{policy: p, key: "k", holder: "h", want: 30, demand: 5})
			if got := a.peekRemaining(now, p, "k"); got != before-30 {
				t.Fatalf("after a grant of 30: remaining %d, want %d", got, before-30)
			}
			r := a.grant(now+1, gcall{policy: p, key: "k", holder: "h", seq: 1, used: 12, release: true})
			if r.Returned != 18 || r.Total != 30 || r.Used != 12 || r.ExpiresAt != now+1 {
				t.Fatalf("release = %+v, want 18 returned", r)
			}
			if got := a.peekRemaining(now+1, p, "k"); got < before-12-1 || got > before-12 {
				t.Errorf("after the release: remaining %d, want about %d", got, before-12)
			}
			if live, _, wasted := a.f.GrantStats(); live != 0 || wasted != 0 {
				t.Errorf("GrantStats after release: live %d, wasted %d", live, wasted)
			}
			// Releasing again: nothing held, nothing returned.
			if r := a.grant(now+2, gcall{policy: p, key: "k", holder: "h", seq: 2, used: 12, release: true}); r.Returned != 0 || r.Total != 0 {
				t.Errorf("second release = %+v", r)
			}
		})
	}
}

// A release gives back only what the grant's top-ups still hold ahead in
// a token bucket's schedule: units of an earlier top-up whose span partly
// rolled out (later spends stacked on what was left of it) do not come
// back as if they were the last top-up's. Here a full bucket (burst 50,
// one unit per 10ms) grants 10 at 0, strict admits take 40 at 50ms, the
// grant tops up 1 and is released unspent: without the grant the 40 would
// have left 10 units, so 10 more admits at most, not 15.
func TestGrantReleaseOfSeveralTopUps(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, leased(tokenBucket("tb", 100, time.Second, 50, 5), 20, 5*time.Second))
	now := t0 + int64(time.Millisecond)
	if r := a.grant(now, gcall{policy: "tb", key: "k", holder: "h", want: 10, demand: 1000}); r.Added != 10 {
		t.Fatalf("grant = %+v, want 10 added", r)
	}
	now += int64(50 * time.Millisecond)
	for range 8 {
		if !a.mustAdmit(now, "tb", "k", 5).Decision.Allowed {
			t.Fatal("an admit of 5 of the 40 was denied")
		}
	}
	if r := a.grant(now, gcall{policy: "tb", key: "k", holder: "h", seq: 1, want: 11, demand: 1000}); r.Added != 1 || r.Total != 11 {
		t.Fatalf("renewal = %+v, want 1 added", r)
	}
	if r := a.grant(now, gcall{policy: "tb", key: "k", holder: "h", seq: 2, release: true}); r.Returned != 11 {
		t.Fatalf("release = %+v, want 11 returned", r)
	}
	admitted := int64(0)
	for a.mustAdmit(now, "tb", "k", 1).Decision.Allowed {
		admitted++
	}
	if admitted != 10 {
		t.Errorf("after the release %d more admitted at once, want 10 (burst 50, 40 admitted)", admitted)
	}
}

func TestGrantExpiryWastesAndRestarts(t *testing.T) {
	a := grantApplier(t)
	now := t0 + int64(time.Millisecond)
	first := a.grant(now, gcall{policy: "fw", key: "k", holder: "h", want: 30})
	a.grant(now+1, gcall{policy: "fw", key: "k", holder: "h", seq: 1, want: 20, used: 10})
	rem := a.peekRemaining(now+1, "fw", "k")
	end := first.ExpiresAt + 1
	a.apply(expireEnv(end))
	if got := a.peekRemaining(end, "fw", "k"); got != rem {
		t.Errorf("expiry gave units back: remaining %d, want %d", got, rem)
	}
	if live, units, wasted := a.f.GrantStats(); live != 0 || units != 0 || wasted != 20 {
		t.Errorf("GrantStats = %d, %d, %d; want 0, 0, 20", live, units, wasted)
	}
	// The holder's next call starts a new grant, whatever its seq and used.
	r := a.grant(end+1, gcall{policy: "fw", key: "k", holder: "h", seq: 2, want: 5, used: 25})
	if r.StartedAt != end+1 || r.Total != 5 || r.Used != 0 {
		t.Errorf("grant after expiry = %+v, want a new one", r)
	}
}

func TestGrantWindowEndsAtWindowEnd(t *testing.T) {
	minute := int64(time.Minute)
	end := (t0/minute + 1) * minute
	now := end - int64(2*time.Second)
	for _, p := range []string{"fw", "sw"} {
		a := grantApplier(t)
		r := a.grant(now, gcall{policy: p, key: "k", holder: "h", want: 10})
		if r.ExpiresAt != end {
			t.Errorf("%s: grant 2s before the window end expires at %d, want %d", p, r.ExpiresAt, end)
		}
		r = a.grant(end-1, gcall{policy: p, key: "k", holder: "h", seq: 1, want: 40, used: 10})
		if r.ExpiresAt != end {
			t.Errorf("%s: renewal expires at %d, want %d", p, r.ExpiresAt, end)
		}
		r = a.grant(end, gcall{policy: p, key: "k", holder: "h", seq: 2, want: 10, used: 10})
		if r.StartedAt != end || r.ExpiresAt != end+int64(5*time.Second) {
			t.Errorf("%s: in the next window = %+v, want a new grant", p, r)
		}
	}
}

func TestGrantDuplicateAndStaleSeq(t *testing.T) {
	a := grantApplier(t)
	now := t0 + 1
	c := gcall{policy: "tb", key: "k", holder: "h", want: 10, demand: 3}
	first := a.grant(now, c)
	c.seq, c.used, c.want = 1, 4, 20
	second := a.grant(now+5, c)
	before := snapshotBytes(t, a.f)
	again := a.grant(now+5, c)
	if !again.Duplicate {
		t.Errorf("retry not marked Duplicate: %+v", again)
	}
	again.Duplicate = false
	if again != second {
		t.Errorf("retry = %+v, want %+v", again, second)
	}
	if after := snapshotBytes(t, a.f); string(after) != string(before) {
		t.Error("a retry changed the state")
	}
	c.seq = 0
	err := a.grantErr(now+6, c)
	if !errors.Is(err, fsm.ErrGrantSeq) {
		t.Errorf("stale seq: %v, want ErrGrantSeq", err)
	}
	_ = first
}

func TestGrantRefusals(t *testing.T) {
	a := grantApplier(t)
	now := t0 + 1
	a.grant(now, gcall{policy: "tb", key: "k", holder: "h", want: 10})
	for _, tc := range []struct {
		c     gcall
		field string
		is    error
	}{
		{gcall{policy: "nope", key: "k", holder: "h", want: 1}, "", fsm.ErrUnknownPolicy},
		{gcall{policy: "plain", key: "k", holder: "h", want: 1}, "policy", admission.ErrInvalidRequest},
		{gcall{policy: "tb", key: "k", holder: "h", seq: 1, want: 1, used: 11}, "used", admission.ErrInvalidRequest},
		{gcall{policy: "tb", key: "k", holder: "h", seq: 1, want: 1, used: -1}, "used", admission.ErrInvalidRequest},
		{gcall{policy: "tb", key: "k", holder: "h", seq: 1, want: 0, used: 1}, "want", admission.ErrInvalidRequest},
		{gcall{policy: "tb", key: "k", holder: "", want: 1}, "holder", admission.ErrInvalidRequest},
		{gcall{policy: "tb", key: "", holder: "h", want: 1}, "key", admission.ErrInvalidRequest},
		{gcall{policy: "tb", key: "k", holder: "h2", want: 1, demand: -1}, "demand_milli", admission.ErrInvalidRequest},
	} {
		err := a.grantErr(now, tc.c)
		if !errors.Is(err, tc.is) {
			t.Errorf("%+v: %v, want %v", tc.c, err, tc.is)
		}
		var fe *admission.FieldError
		if tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field) {
			t.Errorf("%+v: %v, want a field error for %q", tc.c, err, tc.field)
		}
	}
	// used below the recorded used.
	a.grant(now+1, gcall{policy: "tb", key: "k", holder: "h", seq: 1, want: 1, used: 5})
	if err := a.grantErr(now+2, gcall{policy: "tb", key: "k", holder: "h", seq: 2, want: 1, used: 4}); !errors.Is(err, admission.ErrInvalidRequest) {
		t.Errorf("used below the recorded: %v", err)
	}
}

func TestGrantNothingLeftIsNotStored(t *testing.T) {
	a := grantApplier(t)
	now := t0 + 1
	for range 10 {
		a.mustAdmit(now, "tb", "k", 10)
	}
	r := a.grant(now, gcall{policy: "tb", key: "k", holder: "h", want: 5})
	if r.Total != 0 || r.Added != 0 || r.StartedAt != 0 || r.Decision.Allowed || r.Decision.RetryAfter <= 0 {
		t.Errorf("grant of an empty bucket = %+v, want nothing and a RetryAfter", r)
	}
	if live, _, _ := a.f.GrantStats(); live != 0 {
		t.Errorf("%d grants stored, want 0", live)
	}
}

func TestGrantCapPerKey(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, leased(tokenBucket("big", 100_000, time.Hour, 100_000, 10), 1, time.Minute))
	now := t0 + 1
	caller := func(i int) string { return fmt.Sprint("c", i/fsm.MaxGrantsPerCaller) }
	for i := range fsm.MaxGrantsPerKey {
		a.grant(now, gcall{policy: "big", key: "k", holder: fmt.Sprint("h", i), caller: caller(i), want: 1})
	}
	err := a.grantErr(now, gcall{policy: "big", key: "k", holder: "one-more", caller: "newcomer", want: 1})
	if !errors.Is(err, fsm.ErrTooManyGrants) || errors.Is(err, fsm.ErrGroupFull) {
		t.Errorf("grant %d of one key: %v, want ErrTooManyGrants, not ErrGroupFull", fsm.MaxGrantsPerKey+1, err)
	}
	const want = `budget lease refused: a new holder "one-more" for caller "newcomer": key "k" of "big" already grants to 1024 holders, the most one key grants to`
	if err.Error() != want {
		t.Errorf("grant %d of one key: %q, want %q", fsm.MaxGrantsPerKey+1, err, want)
	}
	a.grant(now, gcall{policy: "big", key: "other", holder: "one-more", caller: "newcomer", want: 1})
	// A holder that leaves makes room.
	a.grant(now, gcall{policy: "big", key: "k", holder: "h0", caller: caller(0), seq: 1, release: true})
	a.grant(now, gcall{policy: "big", key: "k", holder: "one-more", caller: "newcomer", want: 1})
}

// TestGrantCapPerCaller: one caller holds grants of a key under at most
// MaxGrantsPerCaller holders; one more is refused, naming the caller and
// the bound, and changes nothing, while another caller still gets grants
// of the key and the caller still gets grants of another key; a holder of
// the caller that leaves makes room, and so does one that expires.
func TestGrantCapPerCaller(t *testing.T) {
	for _, mode := range []admission.LocalMode{admission.LocalGrant, admission.LocalSync} {
		t.Run(string(mode), func(t *testing.T) {
			a := newApplier(t, fsm.Options{})
			p := leased(tokenBucket("big", 100_000, time.Hour, 100_000, 10), 1, time.Minute)
			if mode == admission.LocalSync {
				p.Local = admission.Local{Mode: admission.LocalSync, SyncInterval: time.Second}
			}
			a.putPolicies(t0, p)
			now := t0 + 1
			for i := range fsm.MaxGrantsPerCaller {
				// (A sync allowance may be 0 once the policy's bound is
				// given out: the record is stored all the same.)
				if r := a.grant(now, gcall{policy: "big", key: "k", holder: fmt.Sprint("h", i), caller: "greedy", want: 1}); r.StartedAt != now {
					t.Fatalf("grant %d: %+v", i, r)
				}
			}
			err := a.grantErr(now, gcall{policy: "big", key: "k", holder: "one-more", caller: "greedy", want: 1})
			want := fmt.Sprintf(`budget lease refused: a new holder "one-more" for caller "greedy": it already holds grants of "big" on key "k" under %d holders, `+
				"the most one caller may (one holder per process is enough: reuse it, or release the grants of holders that are gone)", fsm.MaxGrantsPerCaller)
			if !errors.Is(err, fsm.ErrTooManyGrants) || err.Error() != want {
				t.Errorf("holder %d of one caller: %v, want %q", fsm.MaxGrantsPerCaller+1, err, want)
			}
			if r := a.grant(now, gcall{policy: "big", key: "k", holder: "h0", caller: "honest", want: 1}); r.StartedAt != now {
				t.Errorf("another caller's grant: %+v", r)
			}
			if r := a.grant(now, gcall{policy: "big", key: "other", holder: "one-more", caller: "greedy", want: 1}); r.Total != 1 {
				t.Errorf("the caller's grant of another key: %+v", r)
			}
			// A renewal of a holder the caller has is not a new holder.
			if r := a.grant(now+1, gcall{policy: "big", key: "k", holder: "h1", caller: "greedy", seq: 1, want: 1}); r.Duplicate {
				t.Errorf("renewal: %+v", r)
			}
			a.grant(now+1, gcall{policy: "big", key: "k", holder: "h0", caller: "greedy", seq: 1, release: true})
			a.grant(now+1, gcall{policy: "big", key: "k", holder: "one-more", caller: "greedy", want: 1})
			a.grantErr(now+1, gcall{policy: "big", key: "k", holder: "two-more", caller: "greedy", want: 1})
			// Once they expired, a new holder takes the place of an expired one.
			later := now + int64(time.Hour)
			if r := a.grant(later, gcall{policy: "big", key: "k", holder: "two-more", caller: "greedy", want: 1}); r.Total != 1 {
				t.Errorf("after the others expired: %+v", r)
			}
		})
	}
}

func TestGrantSnapshotRoundTrip(t *testing.T) {
	a := grantApplier(t)
	now := t0 + 1
	for i, p := range []string{"tb", "fw", "sw", "qu"} {
		for h := range 3 {
			a.grant(now, gcall{policy: p, key: fmt.Sprint("k", i%2), holder: fmt.Sprint("h", h), want: int64(3 + h), demand: int64(100 * h)})
		}
	}
	snap := snapshotBytes(t, a.f)
	b := newApplier(t, fsm.Options{})
	restoreFrom(t, b.f, snap)
	if got := snapshotBytes(t, b.f); string(got) != string(snap) {
		t.Fatal("restore then snapshot differs")
	}
	la, ua, _ := a.f.GrantStats()
	lb, ub, _ := b.f.GrantStats()
	if la != 12 || la != lb || ua != ub {
		t.Errorf("GrantStats: %d, %d before, %d, %d after the restore", la, ua, lb, ub)
	}
	if fmt.Sprint(a.f.GrantsOf("fw", "k0")) != fmt.Sprint(b.f.GrantsOf("fw", "k0")) {
		t.Error("GrantsOf differs after the restore")
	}
	// The same calls decide alike.
	c := gcall{policy: "tb", key: "k0", holder: "h1", seq: 1, want: 40, used: 2, demand: 500}
	if ra, rb := a.grant(now+5, c), b.grant(now+5, c); ra != rb {
		t.Errorf("after the restore: %+v, before: %+v", rb, ra)
	}
}

func TestGrantSlotLossDeletesGrants(t *testing.T) {
	g1 := newApplier(t, fsm.Options{DataGroup: true})
	g1.setPolicies(t0, grantPolicies()...)
	g1.own(t0, 1, 1, g1Before()...)
	now := t0 + 1
	moving := keysIn(t, "m", 2, migR)
	staying := keysIn(t, "s", 1, lowHalf, migR)
	for _, k := range append(moving, staying...) {
		res := g1.apply(stamp(gcall{policy: "tb", key: k, holder: "h", want: 7}.env(now), 1))
		if r, ok := res.(*fsm.GrantResult); !ok || r.Total != 7 {
			t.Fatalf("grant of %s: %#v", k, res)
		}
	}
	g1.own(now+1, 1, 2, g1After()...)
	if live, units, wasted := g1.f.GrantStats(); live != 1 || units != 7 || wasted != 14 {
		t.Errorf("after losing migR: GrantStats %d, %d, %d; want 1, 7, 14", live, units, wasted)
	}
	if len(g1.f.GrantsOf("tb", moving[0])) != 0 || len(g1.f.GrantsOf("tb", staying[0])) != 1 {
		t.Error("GrantsOf after the slot loss")
	}
	res := g1.apply(stamp(gcall{policy: "tb", key: moving[0], holder: "h", seq: 1, want: 1}.env(now+2), 2))
	if !errors.Is(res.(error), fsm.ErrWrongGroup) {
		t.Errorf("grant of a lost slot: %v", res)
	}
}

// Every Grant answer carries the window and quota of the policy version it
// was decided with, read at apply time, for each algorithm and mode: a
// first grant, a renewal, a release, a local-plus-global allowance; after
// the policy changes, the new version's.
func TestGrantAnswerCarriesWindowAndQuota(t *testing.T) {
	a := grantApplier(t)
	a.putPolicies(t0, synced(tokenBucket("ts", 100, 2*time.Second, 100, 10), 100*time.Millisecond))
	now := t0 + int64(time.Millisecond)
	day := 24 * time.Hour
	for _, tc := range []struct {
		policy string
		window time.Duration
		quota  int64
	}{{"tb", time.Second, 100}, {"fw", time.Minute, 100}, {"sw", time.Minute, 100}, {"qu", day, 1000}, {"ts", 2 * time.Second, 100}} {
		for i, c := range []gcall{
			{policy: tc.policy, key: "k", holder: "h", want: 5, demand: 1000},
			{policy: tc.policy, key: "k", holder: "h", seq: 1, want: 5, used: 2, demand: 1000},
			{policy: tc.policy, key: "k", holder: "h", seq: 2, used: 3, release: true},
		} {
			if r := a.grant(now, c); r.Window != tc.window || r.Quota != tc.quota {
				t.Errorf("%s call %d: window %v, quota %d; want %v, %d", tc.policy, i, r.Window, r.Quota, tc.window, tc.quota)
			}
		}
	}
	// The policy changes: the next answer is the new version's.
	a.putPolicies(now+1, leased(admission.Policy{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 50, Period: 10 * time.Second, MaxCost: 10}, 40, 5*time.Second))
	if r := a.grant(now+2, gcall{policy: "fw", key: "k2", holder: "h", want: 5, demand: 1000}); r.Window != 10*time.Second || r.Quota != 50 || r.PolicyVersion != 2 {
		t.Errorf("after the change: window %v, quota %d, version %d; want 10s, 50, 2", r.Window, r.Quota, r.PolicyVersion)
	}
}
