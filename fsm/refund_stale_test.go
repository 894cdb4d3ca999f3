package fsm_test

import (
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
)

// The refunds of a token bucket: a spend's share of the schedule ends
// where it ended when it was made, moved back by every refund on the key
// since (admission.Refund). Each case has two spends on one key (burst 50,
// one unit per 10ms) at 1ms, of 20 and 14 units; the first comes back at
// 16ms, 19 units are spent at 41ms, and the second comes back at 59ms.
// Without the two spends the 19 would leave 32 units at 59ms; with the
// second spend's share taken to end where it ended at 1ms (341ms, though
// the first refund moved it back to 156ms), 35 were left.
func TestRefundAfterAnotherRefund(t *testing.T) {
	ms := int64(time.Millisecond)
	holders, reservations := []string{"h1", "h2"}, make([]string, 2)
	for _, c := range []struct {
		name string
		// spend takes n units as the i-th spend (0 or 1) at now; back
		// gives the i-th back at now; spend19 takes 19 at now.
		spend   func(a *applier, i int, n, now int64)
		back    func(a *applier, i int, now int64)
		spend19 func(a *applier, now int64)
	}{
		{"grant",
			func(a *applier, i int, n, now int64) {
				if r := a.grant(now, gcall{policy: "tb", key: "k", holder: holders[i], want: n, demand: 1000}); r.Added != n {
					a.tb.Fatalf("grant %d = %+v, want %d added", i, r, n)
				}
			},
			func(a *applier, i int, now int64) {
				a.grant(now, gcall{policy: "tb", key: "k", holder: holders[i], seq: 1, release: true})
			},
			func(a *applier, now int64) {
				if r := a.grant(now, gcall{policy: "tb", key: "k", holder: "h3", want: 19, demand: 1000}); r.Added != 19 {
					a.tb.Fatalf("grant h3 = %+v, want 19 added", r)
				}
			}},
		{"reservation",
			func(a *applier, i int, n, now int64) {
				r := a.reserve(a.tb, reserveEnv(now, "tb", "k", n, time.Minute, ""))
				if !r.Allowed {
					a.tb.Fatalf("reservation %d of %d denied", i, n)
				}
				reservations[i] = r.ReservationID
			},
			func(a *applier, i int, now int64) {
				if r := a.reserve(a.tb, commitEnv(now, reservations[i], 0, "")); r.Released == 0 {
					a.tb.Fatalf("commit of reservation %d at 0 = %+v", i, r)
				}
			},
			func(a *applier, now int64) { a.mustAdmit(now, "tb", "k", 19) }},
		{"admit",
			func(a *applier, i int, n, now int64) {
				a.mustAdmitID(now, req{caller: "c", rid: holders[i], policy: "tb", key: "k", cost: n})
			},
			func(a *applier, i int, now int64) {
				if r := a.refund(now, "c", holders[i]); !r.Refunded {
					a.tb.Fatalf("refund %d = %+v", i, r)
				}
			},
			func(a *applier, now int64) { a.mustAdmit(now, "tb", "k", 19) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newApplier(t, fsm.Options{})
			a.putPolicies(t0, leased(tokenBucket("tb", 100, time.Second, 50, 50), 20, 5*time.Second))
			c.spend(a, 0, 20, t0+1*ms)
			c.spend(a, 1, 14, t0+1*ms)
			c.back(a, 0, t0+16*ms)
			c.spend19(a, t0+41*ms)
			c.back(a, 1, t0+59*ms)
			if got := a.peekRemaining(t0+59*ms, "tb", "k"); got > 32 {
				t.Errorf("%d units remain at 59ms, want at most 32 (what the 19 alone leave)", got)
			}
		})
	}
}

// A spend of a token bucket's state that was swept and created again
// gives nothing back to the new one, however far ahead its recorded end
// lies: here reservation b's share ends at 200ms once a was cancelled,
// the state is swept at 250ms and a new one spends all 50 units; b's
// cancel must leave them spent (its recorded end, 400ms, is stale).
func TestRefundAfterSweep(t *testing.T) {
	ms := int64(time.Millisecond)
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("tb", 100, time.Second, 50, 50))
	ra := a.reserve(a.tb, reserveEnv(t0, "tb", "k", 20, time.Minute, ""))
	rb := a.reserve(a.tb, reserveEnv(t0, "tb", "k", 20, time.Minute, ""))
	if !ra.Allowed || !rb.Allowed {
		a.tb.Fatalf("reservations denied: %+v, %+v", ra, rb)
	}
	if r := a.reserve(a.tb, commitEnv(t0, ra.ReservationID, 0, "")); r.Released != 20 {
		a.tb.Fatalf("cancel of a = %+v", r)
	}
	now := t0 + 250*ms
	a.expire(now)
	if st := a.f.State("tb", "k"); st.TAT != 0 {
		a.tb.Fatalf("the state was not swept at 250ms: %+v", st)
	}
	a.mustAdmit(now, "tb", "k", 50)
	if r := a.reserve(a.tb, commitEnv(now, rb.ReservationID, 0, "")); r.Released != 20 {
		a.tb.Fatalf("cancel of b = %+v", r)
	}
	if got := a.peekRemaining(now, "tb", "k"); got != 0 {
		t.Errorf("%d units remain after the new state spent all 50, want 0", got)
	}
}
