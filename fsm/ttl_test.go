package fsm_test

import (
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
)

// State TTL per algorithm (the seed: "TTL is part of capacity management"):
// a decision sets the key's expiry to the algorithm's ExpiresAt, the next
// decision refreshes it, and once it passes the key is reclaimed and
// decides exactly like a key never seen.
func TestStateTTLSetRefreshedAndReclaimed(t *testing.T) {
	base := t0 - t0%int64(24*time.Hour) + int64(time.Hour) // 01:00 UTC: inside one day, one minute window
	for _, p := range []admission.Policy{
		{Name: "tb", Algorithm: admission.AlgorithmTokenBucket, Limit: 10, Period: time.Minute, Burst: 5},
		{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 5, Period: time.Minute},
		{Name: "sw", Algorithm: admission.AlgorithmSlidingWindow, Limit: 5, Period: time.Minute},
		{Name: "sl", Algorithm: admission.AlgorithmSlidingLog, Limit: 5, Period: time.Minute},
		{Name: "q", Algorithm: admission.AlgorithmQuota, Limit: 5, Calendar: admission.CalendarDay},
	} {
		t.Run(string(p.Algorithm), func(t *testing.T) {
			a := newApplier(t, fsm.Options{})
			a.putPolicies(base, p)
			if _, ok := a.f.NextExpiry(); ok {
				t.Fatal("an empty group has an expiry")
			}
			a.mustAdmit(base+int64(time.Second), p.Name, "k", 1)
			first, ok := a.f.NextExpiry()
			if want := admission.ExpiresAt(p, a.f.State(p.Name, "k")); !ok || first != want || first <= base {
				t.Fatalf("TTL after the first decision: %d (%v), want %d", first-base, ok, want-base)
			}
			a.mustAdmit(base+int64(2*time.Second), p.Name, "k", 1)
			second, _ := a.f.NextExpiry()
			if want := admission.ExpiresAt(p, a.f.State(p.Name, "k")); second != want || second < first {
				t.Fatalf("TTL after the second decision: %d, want %d (not before %d)", second-base, want-base, first-base)
			}
			// Window algorithms expire with their window, whatever happens in
			// it; the token bucket and the log move with every spend.
			moves := p.Algorithm == admission.AlgorithmTokenBucket || p.Algorithm == admission.AlgorithmSlidingLog
			if moves && second == first {
				t.Fatalf("the second decision did not refresh the TTL (%d)", second-base)
			}
			a.expire(second - 1)
			if a.f.BucketCount() != 1 {
				t.Fatal("the state was reclaimed before its TTL")
			}
			a.expire(second)
			if a.f.BucketCount() != 0 {
				t.Fatal("the state outlived its TTL")
			}
			fresh := newApplier(t, fsm.Options{})
			fresh.putPolicies(base, p)
			got := a.mustAdmit(second, p.Name, "k", 1)
			want := fresh.mustAdmit(second, p.Name, "k", 1)
			if got.Decision != want.Decision {
				t.Fatalf("an expired key decided %+v, a new key %+v", got.Decision, want.Decision)
			}
		})
	}
}
