package fsm_test

import (
	"errors"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
)

// synced returns p in local.mode sync, reporting every interval.
func synced(p admission.Policy, interval time.Duration) admission.Policy {
	p.Local = admission.Local{Mode: admission.LocalSync, SyncInterval: interval}
	return p
}

// syncApplier holds "ts": a token bucket of 100/s, burst 100, synced every
// 100ms (bound 10), and "fs": a fixed window of 100/min synced every 1s
// (bound 2).
func syncApplier(tb testing.TB) *applier {
	tb.Helper()
	a := newApplier(tb, fsm.Options{})
	a.putPolicies(t0, synced(tokenBucket("ts", 100, time.Second, 100, 10), 100*time.Millisecond),
		synced(admission.Policy{Name: "fs", Algorithm: admission.AlgorithmFixedWindow, Limit: 100, Period: time.Minute, MaxCost: 10}, time.Second))
	return a
}

func TestSyncAllowancesShareTheBound(t *testing.T) {
	a := syncApplier(t)
	now := t0 + 1
	r := a.grant(now, gcall{policy: "ts", key: "k", holder: "h1", want: 50, demand: 1000})
	if r.Total != 10 || r.Added != 10 || r.Used != 0 || r.StartedAt != now || r.ExpiresAt != now+int64(200*time.Millisecond) ||
		r.Decision.Remaining != 100 || !r.Decision.Allowed || r.ShareMicro != 1_000_000 {
		t.Fatalf("first allowance = %+v, want the whole bound 10, nothing spent", r)
	}
	// The bound is held by h1 until it reports again.
	r = a.grant(now, gcall{policy: "ts", key: "k", holder: "h2", want: 50, demand: 1000})
	if r.Total != 0 || r.StartedAt != now || r.ShareMicro != 500_000 {
		t.Fatalf("second holder while the first holds the bound = %+v", r)
	}
	// h1 reports 4 admitted: charged; its allowance is now its fair share.
	now += int64(100 * time.Millisecond)
	r = a.grant(now, gcall{policy: "ts", key: "k", holder: "h1", seq: 1, want: 50, used: 4, demand: 1000})
	if r.Total != 5 || r.Added != 5 || r.Used != 4 || r.Decision.Remaining != 96 {
		t.Fatalf("report of 4 = %+v, want allowance 5, 96 left", r)
	}
	r = a.grant(now, gcall{policy: "ts", key: "k", holder: "h2", seq: 1, want: 50, demand: 1000})
	if r.Total != 5 {
		t.Fatalf("h2's share = %+v, want 5", r)
	}
	// A retry is answered from the record.
	again := a.grant(now+1, gcall{policy: "ts", key: "k", holder: "h2", seq: 1, want: 50, demand: 1000})
	if !again.Duplicate || again.Total != 5 || again.DecidedAt != now {
		t.Errorf("retry = %+v", again)
	}
	infos := a.f.GrantsOf("ts", "k")
	if len(infos) != 2 || !infos[0].Sync || infos[0].Total != 5 || infos[0].Used != 4 {
		t.Errorf("GrantsOf = %+v", infos)
	}
	if live, units, wasted := a.f.GrantStats(); live != 2 || units != 0 || wasted != 0 {
		t.Errorf("GrantStats = %d, %d, %d; want 2 records, nothing held spent, no waste", live, units, wasted)
	}
	// used below the recorded one is refused; so is a negative used.
	if err := a.grantErr(now+2, gcall{policy: "ts", key: "k", holder: "h1", seq: 2, want: 5, used: 3}); !errors.Is(err, admission.ErrInvalidRequest) {
		t.Errorf("used below the recorded = %v", err)
	}
	if err := a.grantErr(now+2, gcall{policy: "ts", key: "k", holder: "h9", want: 5, used: -1}); !errors.Is(err, admission.ErrInvalidRequest) {
		t.Errorf("negative used = %v", err)
	}
}

func TestSyncChargesPastTheLimit(t *testing.T) {
	a := syncApplier(t)
	now := t0 + 1
	a.grant(now, gcall{policy: "fs", key: "k", holder: "h1", want: 50, demand: 1000})
	for range 10 {
		a.mustAdmit(now, "fs", "k", 10)
	}
	// The key is exhausted; h1 reports 2 admitted from its allowance.
	r := a.grant(now+1, gcall{policy: "fs", key: "k", holder: "h1", seq: 1, want: 50, used: 2, demand: 1000})
	if r.Total != 0 || r.Decision.Remaining != 0 || r.Decision.Allowed || r.Decision.RetryAfter <= 0 {
		t.Fatalf("report on an exhausted key = %+v, want no allowance and a retry_after", r)
	}
	if got := a.f.SyncStats(); got != 2 {
		t.Errorf("SyncStats = %d, want an overshoot of 2", got)
	}
	// A new record's used is its baseline: what it reports belongs to a
	// record that is gone, charged when that one ended.
	r = a.grant(now+2, gcall{policy: "fs", key: "k", holder: "h3", want: 5, used: 3, demand: 1})
	if r.Total != 0 || r.Used != 3 || r.StartedAt != now+2 {
		t.Fatalf("new record reporting 3 = %+v", r)
	}
	if got := a.f.SyncStats(); got != 2 {
		t.Errorf("SyncStats = %d, want 2", got)
	}
	// Records with no allowance expire wasting nothing.
	a.apply(expireEnv(now + int64(time.Minute)))
	if live, _, wasted := a.f.GrantStats(); live != 0 || wasted != 0 {
		t.Errorf("after expiry: %d records, %d wasted; want none", live, wasted)
	}
}

func TestSyncExpiryChargesTheAllowance(t *testing.T) {
	a := syncApplier(t)
	now := t0 + 1
	a.grant(now, gcall{policy: "ts", key: "k", holder: "h1", want: 50, demand: 1000})
	if r := a.grant(now, gcall{policy: "ts", key: "k", holder: "h2", want: 50, demand: 1000}); r.Total != 0 {
		t.Fatalf("h2 = %+v, want nothing while h1 holds the bound", r)
	}
	// h1 dies. Its record's end (here by the sweep of the next entry)
	// charges all of its allowance as waste: it may have admitted it.
	exp := now + int64(200*time.Millisecond)
	r := a.grant(exp, gcall{policy: "ts", key: "k", holder: "h2", seq: 1, want: 50, demand: 1000})
	if r.Total != 10 || r.Decision.Remaining != 90 {
		t.Fatalf("h2 once h1's allowance ended = %+v, want the bound, 90 left", r)
	}
	if _, _, wasted := a.f.GrantStats(); wasted != 10 {
		t.Errorf("wasted %d, want 10", wasted)
	}
	// A late call of h1 starts a new record; what it reports is not
	// charged again.
	r = a.grant(exp+1, gcall{policy: "ts", key: "k", holder: "h1", seq: 1, want: 50, used: 4, demand: 1000})
	if r.StartedAt != exp+1 || r.Used != 4 || r.Total != 0 || r.Decision.Remaining != 90 {
		t.Fatalf("late call of h1 = %+v, want a new record, nothing charged", r)
	}
}

func TestSyncWindowExpiry(t *testing.T) {
	a := syncApplier(t)
	end := (t0/int64(time.Minute) + 1) * int64(time.Minute)
	r := a.grant(end-int64(time.Second), gcall{policy: "fs", key: "k", holder: "h", want: 5, demand: 1})
	if r.ExpiresAt != end || r.Total != 2 {
		t.Fatalf("allowance a second before the window ends = %+v, want it to end with the window (%d)", r, end)
	}
}

func TestSyncRelease(t *testing.T) {
	a := syncApplier(t)
	now := t0 + 1
	a.grant(now, gcall{policy: "ts", key: "k", holder: "h1", want: 50, demand: 1000})
	r := a.grant(now+1, gcall{policy: "ts", key: "k", holder: "h1", seq: 1, used: 7, release: true})
	if r.Returned != 0 || r.Used != 7 || r.Total != 10 || r.Decision.Remaining != 93 {
		t.Fatalf("release = %+v, want 7 charged, nothing returned", r)
	}
	if len(a.f.GrantsOf("ts", "k")) != 0 {
		t.Error("a released allowance is still recorded")
	}
	// A release with no record charges nothing.
	r = a.grant(now+2, gcall{policy: "ts", key: "k", holder: "h2", used: 3, release: true})
	if r.Decision.Remaining != 93 || r.StartedAt != 0 {
		t.Fatalf("release without a record = %+v, want nothing charged", r)
	}
}

func TestSyncModeChange(t *testing.T) {
	a := syncApplier(t)
	now := t0 + 1
	a.grant(now, gcall{policy: "ts", key: "k", holder: "h1", want: 50, demand: 1000})
	// The policy goes to reserve: the sync record ends, charged what the
	// call reports, and a reserve grant starts.
	a.putPolicies(now+1, leased(tokenBucket("ts", 100, time.Second, 100, 10), 40, 5*time.Second))
	r := a.grant(now+2, gcall{policy: "ts", key: "k", holder: "h1", seq: 1, want: 30, used: 6, demand: 1000})
	if r.Total != 30 || r.Added != 30 || r.StartedAt != now+2 || r.Decision.Remaining != 100-6-30 {
		t.Fatalf("reserve grant after sync = %+v", r)
	}
	if _, units, _ := a.f.GrantStats(); units != 30 {
		t.Errorf("units held = %d, want 30", units)
	}
	// Back to sync: the reserve grant ends as waste, its used not charged again.
	a.putPolicies(now+3, synced(tokenBucket("ts", 100, time.Second, 100, 10), 100*time.Millisecond))
	r = a.grant(now+4, gcall{policy: "ts", key: "k", holder: "h1", seq: 2, want: 50, used: 10, demand: 1000})
	if r.Total != 10 || r.StartedAt != now+4 || r.Decision.Remaining != 64 {
		t.Fatalf("sync allowance after reserve = %+v", r)
	}
	if _, units, wasted := a.f.GrantStats(); units != 0 || wasted != 20 {
		t.Errorf("GrantStats units %d, wasted %d; want 0, 20", units, wasted)
	}
	infos := a.f.GrantsOf("ts", "k")
	if len(infos) != 1 || !infos[0].Sync || infos[0].Used != 10 {
		t.Errorf("GrantsOf = %+v", infos)
	}
	// Snapshots keep the mode of a record.
	b := newApplier(t, fsm.Options{})
	restoreFrom(t, b.f, snapshotBytes(t, a.f))
	if got := b.f.GrantsOf("ts", "k"); len(got) != 1 || got[0] != infos[0] {
		t.Errorf("after a restore: %+v, want %+v", got, infos)
	}
}
