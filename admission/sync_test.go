package admission_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

func syncPolicy(edit func(p *admission.Policy)) admission.Policy {
	return with(func(p *admission.Policy) { p.Local.Mode = admission.LocalSync; edit(p) })
}

func TestSyncDefaultsAndValidate(t *testing.T) {
	p := syncPolicy(func(*admission.Policy) {}).WithDefaults()
	if p.Local.SyncInterval != admission.DefaultSyncInterval || p.Local.MaxGrant != 0 || p.Local.TTL != 0 {
		t.Errorf("sync defaults = %+v, want sync_interval 1s only", p.Local)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("Validate(defaulted sync policy) = %v", err)
	}
	if p != p.WithDefaults() {
		t.Error("WithDefaults is not idempotent in sync mode")
	}
	for _, tc := range []struct {
		name  string
		p     admission.Policy
		field string
		in    string
	}{
		{"max_grant in sync mode", syncPolicy(func(p *admission.Policy) { p.Local.MaxGrant = 3 }), "local.max_grant", "grant mode only"},
		{"ttl in sync mode", syncPolicy(func(p *admission.Policy) { p.Local.TTL = time.Second }), "local.ttl", "grant mode only"},
		{"sync_interval in grant mode", with(func(p *admission.Policy) {
			p.Local.Mode, p.Local.SyncInterval = admission.LocalGrant, time.Second
		}), "local.sync_interval", "sync only"},
		{"sync_interval without mode", with(func(p *admission.Policy) { p.Local.SyncInterval = time.Second }), "local.sync_interval", "local mode"},
		{"sync_interval too short", syncPolicy(func(p *admission.Policy) { p.Local.SyncInterval = 9 * time.Millisecond }), "local.sync_interval", "9ms"},
		{"sync_interval too long", syncPolicy(func(p *admission.Policy) { p.Local.SyncInterval = time.Minute + 1 }), "local.sync_interval", "between"},
		{"negative sync_interval", syncPolicy(func(p *admission.Policy) { p.Local.SyncInterval = -time.Second }), "local.sync_interval", "between"},
		{"sliding_log", syncPolicy(func(p *admission.Policy) { p.Algorithm = admission.AlgorithmSlidingLog; p.Burst = 0; p.MaxCost = 0 }), "local.mode", "sliding_log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			wantFieldError(t, err, tc.field, admission.ErrInvalidPolicy)
			if err != nil && !strings.Contains(err.Error(), tc.in) {
				t.Errorf("error %q does not mention %q", err, tc.in)
			}
		})
	}
	for _, iv := range []time.Duration{admission.MinSyncInterval, admission.MaxSyncInterval} {
		if err := syncPolicy(func(p *admission.Policy) { p.Local.SyncInterval = iv }).Validate(); err != nil {
			t.Errorf("Validate(sync_interval %v) = %v", iv, err)
		}
	}
}

func TestSyncBound(t *testing.T) {
	loc := func(iv time.Duration) admission.Local {
		return admission.Local{Mode: admission.LocalSync, SyncInterval: iv}
	}
	for _, tc := range []struct {
		name string
		p    admission.Policy
		want int64
	}{
		{"60/min every 1s", syncPolicy(func(*admission.Policy) {}), 1},
		{"60/min every 2.5s", syncPolicy(func(p *admission.Policy) { p.Local.SyncInterval = 2500 * time.Millisecond }), 3},
		{"at least 1", syncPolicy(func(p *admission.Policy) { p.Local.SyncInterval = 10 * time.Millisecond }), 1},
		{"1e9/ms every 1m (128-bit)", admission.Policy{Algorithm: admission.AlgorithmTokenBucket, Limit: 1e9, Period: time.Second,
			Local: loc(time.Minute)}, 60e9},
		{"fixed window 100/min every 1s", admission.Policy{Algorithm: admission.AlgorithmFixedWindow, Limit: 100, Period: time.Minute,
			Local: loc(time.Second)}, 2},
		{"quota day", admission.Policy{Algorithm: admission.AlgorithmQuota, Limit: 86400, Calendar: admission.CalendarDay, Local: loc(time.Second)}, 1},
		{"quota week", admission.Policy{Algorithm: admission.AlgorithmQuota, Limit: 7 * 86400 * 10, Calendar: admission.CalendarWeek, Local: loc(time.Second)}, 10},
		{"quota month: 28 days", admission.Policy{Algorithm: admission.AlgorithmQuota, Limit: 28 * 86400 * 3, Calendar: admission.CalendarMonth, Local: loc(time.Minute)}, 180},
		{"quota year: 365 days", admission.Policy{Algorithm: admission.AlgorithmQuota, Limit: 1e12, Calendar: admission.CalendarYear, Local: loc(time.Minute)}, 1902588},
	} {
		if got := tc.p.SyncBound(); got != tc.want {
			t.Errorf("%s: SyncBound = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestSyncExpiry(t *testing.T) {
	const minute = int64(time.Minute)
	now := 10*minute + 59*int64(time.Second)
	tb := syncPolicy(func(*admission.Policy) {}).WithDefaults()
	if got := tb.SyncExpiry(now); got != now+2*int64(time.Second) {
		t.Errorf("token bucket: SyncExpiry = %d, want now+2s", got)
	}
	fw := admission.Policy{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 100, Period: time.Minute,
		Local: admission.Local{Mode: admission.LocalSync}}.WithDefaults()
	if got := fw.SyncExpiry(now); got != 11*minute {
		t.Errorf("fixed window: SyncExpiry = %d, want the window end", got)
	}
	if got := fw.SyncExpiry(11 * minute); got != 11*minute+2*int64(time.Second) {
		t.Errorf("fixed window at a window start: SyncExpiry = %d, want +2s", got)
	}
	if got := tb.SyncExpiry(math.MaxInt64 - 1); got != math.MaxInt64 {
		t.Errorf("SyncExpiry near the end of time = %d, want saturated", got)
	}
}

func TestChargeTokenBucket(t *testing.T) {
	p := apiFree() // T = 1s, burst 20
	const sec = int64(time.Second)
	now := 1000 * sec
	s := admission.Charge(p, admission.State{}, 5, now)
	if s.Kind != admission.KindTokenBucket || s.TAT != now+5*sec {
		t.Fatalf("Charge(5) of a full bucket = %+v, want TAT now+5s", s)
	}
	// Past the burst: 30 units of a 20-unit bucket.
	s = admission.Charge(p, s, 25, now)
	if s.TAT != now+30*sec {
		t.Fatalf("Charge past the burst: TAT = %d, want now+30s", s.TAT-now)
	}
	if d := admission.Peek(p, s, now); d.Allowed || d.Remaining != 0 || d.RetryAfter != 11*time.Second {
		t.Errorf("after a charge past the burst: %+v, want denied for 11s", d)
	}
	if got := admission.Charge(p, s, 0, now); got.TAT != s.TAT {
		t.Error("a charge of 0 changed the state")
	}
	huge := admission.Charge(p, s, math.MaxInt64, now)
	if huge.TAT <= s.TAT || huge.TAT < now {
		t.Errorf("a huge charge: TAT %d, want saturated ahead", huge.TAT)
	}
	if again := admission.Charge(p, huge, math.MaxInt64, now); again.TAT != huge.TAT {
		t.Errorf("a saturated schedule moved: %d → %d", huge.TAT, again.TAT)
	}
}

func TestChargeFixedWindowAndQuota(t *testing.T) {
	fw := admission.Policy{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 10, Period: time.Minute}
	const minute = int64(time.Minute)
	s, _ := admission.Decide(fw, admission.State{}, 8, 5*minute+1)
	s = admission.Charge(fw, s, 7, 5*minute+2)
	if s.Count != 15 || s.Start != 5*minute {
		t.Fatalf("Charge in the same window = %+v, want count 15", s)
	}
	if d := admission.Peek(fw, s, 5*minute+3); d.Allowed || d.Remaining != 0 {
		t.Errorf("over the limit after a charge: %+v", d)
	}
	if s2 := admission.Charge(fw, s, 3, 6*minute); s2.Count != 3 || s2.Start != 6*minute {
		t.Errorf("Charge in the next window = %+v, want a fresh count of 3", s2)
	}
	if s3 := admission.Charge(fw, admission.State{Kind: admission.KindFixedWindow, Count: math.MaxInt64 - 1, Start: 5 * minute}, 10, 5*minute); s3.Count != 1<<62 {
		t.Errorf("a charge saturates the count at 2^62, got %d", s3.Count)
	}
	q := admission.Policy{Name: "q", Algorithm: admission.AlgorithmQuota, Limit: 100, Calendar: admission.CalendarDay}
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC).UnixNano()
	sq := admission.Charge(q, admission.State{}, 150, now)
	if sq.Kind != admission.KindQuota || sq.Count != 150 || sq.Start != time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC).UnixNano() {
		t.Errorf("quota Charge = %+v", sq)
	}
	if d := admission.Peek(q, sq, now); d.Allowed {
		t.Errorf("quota over its limit allows: %+v", d)
	}
	// Another algorithm's state counts as a new key.
	if s4 := admission.Charge(fw, sq, 2, 5*minute); s4.Kind != admission.KindFixedWindow || s4.Count != 2 {
		t.Errorf("Charge over another kind's state = %+v", s4)
	}
}

func TestChargeSlidingWindow(t *testing.T) {
	sw := admission.Policy{Name: "sw", Algorithm: admission.AlgorithmSlidingWindow, Limit: 10, Period: time.Minute}
	const minute = int64(time.Minute)
	s, _ := admission.Decide(sw, admission.State{}, 6, 5*minute)
	s = admission.Charge(sw, s, 9, 5*minute+1)
	if s.Count != 15 || s.Prev != 0 {
		t.Fatalf("Charge = %+v, want count 15", s)
	}
	// Next window: the 15 roll into prev and weigh on it.
	s = admission.Charge(sw, s, 1, 6*minute)
	if s.Start != 6*minute || s.Count != 1 || s.Prev != 15 {
		t.Fatalf("Charge in the next window = %+v, want count 1 prev 15", s)
	}
	if d := admission.Peek(sw, s, 6*minute+minute/6); d.Allowed {
		t.Errorf("a sixth into the next window, ceil(15×⅚) + 1 ≥ 10 must deny: %+v", d)
	}
	if d := admission.Peek(sw, s, 6*minute+minute/2); d.Remaining != 1 {
		t.Errorf("half into the next window: %+v, want 10 − ceil(15×½) − 1 = 1 left", d)
	}
	if d := admission.Peek(sw, s, 7*minute); !d.Allowed || d.Remaining != 9 {
		t.Errorf("two windows on: %+v, want 9 left", d)
	}
	if got := admission.Charge(sw, s, 3, -1); got.Count != s.Count || got.Start != s.Start {
		t.Error("a now before 0 changed the state")
	}
}

func TestChargeOtherAlgorithms(t *testing.T) {
	sl := admission.Policy{Name: "sl", Algorithm: admission.AlgorithmSlidingLog, Limit: 10, Period: time.Minute}
	s, _ := admission.Decide(sl, admission.State{}, 1, 5)
	if got := admission.Charge(sl, s, 3, 6); len(got.Log) != 1 {
		t.Errorf("Charge of a sliding log = %+v, want unchanged", got)
	}
}
