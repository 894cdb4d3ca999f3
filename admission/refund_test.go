package admission_test

import (
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

// For every algorithm: a refund right after a spend restores what Peek saw
// before it; a refund of a spend that has rolled out gives nothing back; a
// refund never frees what a later request spent.
func TestRefundEveryAlgorithm(t *testing.T) {
	const t0 = int64(1_800_000_000) * int64(time.Second) // aligned to minutes and days
	policies := []admission.Policy{
		{Name: "tb", Algorithm: admission.AlgorithmTokenBucket, Limit: 10, Period: time.Minute, Burst: 5},
		{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 5, Period: time.Minute},
		{Name: "sw", Algorithm: admission.AlgorithmSlidingWindow, Limit: 5, Period: time.Minute},
		{Name: "sl", Algorithm: admission.AlgorithmSlidingLog, Limit: 5, Period: time.Minute},
		{Name: "q", Algorithm: admission.AlgorithmQuota, Limit: 5, Calendar: admission.CalendarDay},
	}
	for _, p := range policies {
		t.Run(string(p.Algorithm), func(t *testing.T) {
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			var s admission.State
			now := t0 + int64(time.Second)
			s, _ = admission.Decide(p, s, 1, now) // someone else's spend
			before := admission.Peek(p, s, now)
			after, d := admission.Decide(p, s, 3, now)
			if !d.Allowed {
				t.Fatalf("spend of 3 denied: %+v", d)
			}
			sp := admission.Spend{Cost: 3, At: now, Until: now + int64(d.ResetAfter)}
			back := admission.Refund(p, after, sp, now)
			if got := admission.Peek(p, back, now); got.Remaining != before.Remaining {
				t.Fatalf("after the refund %d remain, before the spend %d", got.Remaining, before.Remaining)
			}
			// A later request spends 1 more; refunding the 3 leaves exactly
			// that request's 1 and the first 1 spent.
			later, d2 := admission.Decide(p, after, 1, now+1)
			if !d2.Allowed {
				t.Fatalf("later spend denied: %+v", d2)
			}
			got := admission.Peek(p, admission.Refund(p, later, sp, now+1), now+1)
			want := admission.Peek(p, mustDecide(t, p, mustDecide(t, p, admission.State{}, 1, now), 1, now+1), now+1)
			if got.Remaining != want.Remaining {
				t.Fatalf("refund under a later spend: %d remain, want %d", got.Remaining, want.Remaining)
			}
			// Long after, the spend has rolled out: nothing changes.
			far := now + int64(48*time.Hour)
			if r := admission.Refund(p, after, sp, far); admission.Peek(p, r, far) != admission.Peek(p, after, far) {
				t.Fatalf("a refund after the spend rolled out changed the state")
			}
		})
	}
}

func mustDecide(tb testing.TB, p admission.Policy, s admission.State, cost, now int64) admission.State {
	tb.Helper()
	next, d := admission.Decide(p, s, cost, now)
	if !d.Allowed {
		tb.Fatalf("%s: cost %d denied", p.Name, cost)
	}
	return next
}

// Refundable counts a token bucket spend's whole intervals still ahead of
// now, at most its cost; for a window, its cost.
func TestRefundable(t *testing.T) {
	tb := admission.Policy{Name: "tb", Algorithm: admission.AlgorithmTokenBucket, Limit: 100, Period: time.Second, Burst: 50}
	fw := admission.Policy{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 5, Period: time.Minute}
	ms := int64(time.Millisecond)
	sp := admission.Spend{Cost: 10, At: 0, Until: 100 * ms} // 10 units of 10ms
	after := admission.State{Kind: admission.KindTokenBucket, TAT: 100 * ms}
	for _, c := range []struct {
		p         admission.Policy
		sp        admission.Spend
		now, want int64
	}{
		{tb, sp, 0, 10},
		{tb, sp, 35 * ms, 6}, // 65ms ahead: 6 whole intervals
		{tb, sp, 99 * ms, 0},
		{tb, sp, 100 * ms, 0},
		{tb, admission.Spend{Cost: 3, At: 0, Until: 100 * ms}, 0, 3},
		{tb, admission.Spend{Cost: 0, Until: 100 * ms}, 0, 0},
		{fw, sp, 35 * ms, 10},
	} {
		if got := admission.Refundable(c.p, after, c.sp, c.now); got != c.want {
			t.Errorf("Refundable(%s, %+v, %d) = %d, want %d", c.p.Name, c.sp, c.now, got, c.want)
		}
	}
}
