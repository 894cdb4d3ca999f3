package fsm_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
)

const sec = int64(time.Second)

// TestTimeNeverRunsBackwards checks now = max(lastNow, entry now): an entry
// stamped earlier (a new leader with a slow clock) is decided at the later
// time, and LastNow never decreases.
func TestTimeNeverRunsBackwards(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("one", 1, time.Second, 1, 0)) // one per second, no burst

	steps := []struct {
		now         int64 // the entry's stamp
		wantAt      int64 // DecidedAt and LastNow afterwards
		wantAllowed bool
		wantRetry   time.Duration
	}{
		{t0 + 10*sec, t0 + 10*sec, true, 0},
		{t0 + 10*sec + sec/2, t0 + 10*sec + sec/2, false, 500 * time.Millisecond},
		// Behind: decided at t0+10.5s, so the wait is 0.5s, not 6s.
		{t0 + 5*sec, t0 + 10*sec + sec/2, false, 500 * time.Millisecond},
		{0, t0 + 10*sec + sec/2, false, 500 * time.Millisecond},
		{-1 << 62, t0 + 10*sec + sec/2, false, 500 * time.Millisecond},
		{t0 + 11*sec, t0 + 11*sec, true, 0},
		{t0 + 11*sec - 1, t0 + 11*sec, false, time.Second},
	}
	for i, s := range steps {
		r := a.mustAdmit(s.now, "one", "k", 1)
		if r.DecidedAt != s.wantAt || r.Decision.Allowed != s.wantAllowed || r.Decision.RetryAfter != s.wantRetry {
			t.Fatalf("step %d (stamp %d): DecidedAt %d allowed %v retry %v; want %d %v %v",
				i, s.now, r.DecidedAt, r.Decision.Allowed, r.Decision.RetryAfter, s.wantAt, s.wantAllowed, s.wantRetry)
		}
		if got := a.f.LastNow(); got != s.wantAt {
			t.Fatalf("step %d: LastNow %d, want %d", i, got, s.wantAt)
		}
	}

	// Entries of every kind advance the clock, and none moves it back.
	a.apply(registerNodeEnv(t0, "n1", "r", "a"))
	if got := a.f.LastNow(); got != t0+11*sec {
		t.Fatalf("after an older RegisterNode: LastNow %d, want %d", got, t0+11*sec)
	}
	a.putPolicies(t0+20*sec, tokenBucket("two", 2, time.Second, 0, 0))
	if got := a.f.LastNow(); got != t0+20*sec {
		t.Fatalf("after a newer PutPolicies: LastNow %d, want %d", got, t0+20*sec)
	}
	if r := a.mustAdmit(t0+12*sec, "one", "k", 1); r.DecidedAt != t0+20*sec || !r.Decision.Allowed {
		t.Fatalf("admit stamped before a PutPolicies: %+v, want allowed at %d", r, t0+20*sec)
	}
}

// TestLateEntryDecidesLikeOnTime compares an FSM that receives a late-stamped
// entry with one that receives the same entry stamped at the FSM's time.
func TestLateEntryDecidesLikeOnTime(t *testing.T) {
	late, onTime := newApplier(t, fsm.Options{}), newApplier(t, fsm.Options{})
	for _, a := range []*applier{late, onTime} {
		a.putPolicies(t0, tokenBucket("api", 60, time.Minute, 20, 10))
		a.mustAdmit(t0+30*sec, "api", "k", 10)
	}
	for i, stamp := range []int64{t0, t0 + sec, t0 + 29*sec} {
		got := late.mustAdmit(stamp, "api", "k", 3)
		want := onTime.mustAdmit(t0+30*sec, "api", "k", 3)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("entry %d stamped %d: %+v, want %+v", i, stamp, got, want)
		}
	}
	if late.f.Bucket("api", "k") != onTime.f.Bucket("api", "k") {
		t.Fatal("late and on-time logs left different buckets")
	}
}

func TestFirstEntryBeforeEpoch(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(-5*sec, tokenBucket("one", 1, time.Second, 1, 0))
	if got := a.f.LastNow(); got != 0 {
		t.Fatalf("LastNow %d after a negative stamp on a fresh FSM, want 0", got)
	}
	if r := a.mustAdmit(-sec, "one", "k", 1); r.DecidedAt != 0 || !r.Decision.Allowed {
		t.Fatalf("%+v, want allowed at 0", r)
	}
}

// TestLastNowSurvivesSnapshot restores a snapshot and checks that the
// restored replica never decides at an earlier time than the original did.
func TestLastNowSurvivesSnapshot(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("one", 1, time.Second, 1, 0))
	a.mustAdmit(t0+100*sec, "one", "k", 1)
	a.mustAdmit(t0+50*sec, "one", "other", 1)
	snap := snapshotBytes(t, a.f)

	for _, dirty := range []bool{false, true} {
		b := newApplier(t, fsm.Options{})
		b.index = a.index
		if dirty {
			// A replica whose own clock was ahead is rolled back to the
			// snapshot's time: Restore replaces the whole state.
			b.putPolicies(t0+1000*sec, tokenBucket("one", 1, time.Second, 1, 0))
		}
		restoreFrom(t, b.f, snap)
		if got := b.f.LastNow(); got != t0+100*sec {
			t.Fatalf("dirty=%v: restored LastNow %d, want %d", dirty, got, t0+100*sec)
		}
		got := b.mustAdmit(t0+sec, "one", "k", 1)
		if got.DecidedAt != t0+100*sec || got.Decision.Allowed || got.Decision.RetryAfter != time.Second {
			t.Fatalf("dirty=%v: restored replica decided an old entry as %+v; want denied at %d with 1s to wait", dirty, got, t0+100*sec)
		}
	}
	if got := a.mustAdmit(t0+sec, "one", "k", 1); got.DecidedAt != t0+100*sec {
		t.Fatalf("original replica: DecidedAt %d", got.DecidedAt)
	}
}
