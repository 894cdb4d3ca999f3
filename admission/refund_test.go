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
			sp := admission.Spent(p, after, 3, now)
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
		s := admission.State{Kind: admission.KindTokenBucket, TAT: 100 * ms}
		if c.p.Algorithm != admission.AlgorithmTokenBucket {
			s = admission.State{Kind: admission.KindFixedWindow, Count: 10}
		}
		if got := admission.Refundable(c.p, s, c.sp, c.now); got != c.want {
			t.Errorf("Refundable(%s, %+v, %d) = %d, want %d", c.p.Name, c.sp, c.now, got, c.want)
		}
	}
}

// A refund corrects a token bucket spend's recorded end by how far other
// refunds moved the schedule back since it: here a (burst 50, one unit per
// 10ms) spends 20 then b 14 at 1ms; a's refund moves b's share 200ms
// earlier, so b's later refund gives back only what b still holds (its
// share now ends at 156ms, not 341ms). Without the correction its refund
// would move the schedule back by 140ms and leave 35 units at 59ms, where
// c's 19 (at 41ms) alone leave 32.
func TestRefundAfterAnotherRefund(t *testing.T) {
	p := admission.Policy{Name: "tb", Algorithm: admission.AlgorithmTokenBucket, Limit: 100, Period: time.Second, Burst: 50}
	ms := int64(time.Millisecond)
	s := mustDecide(t, p, admission.State{}, 20, 1*ms)
	a := admission.Spent(p, s, 20, 1*ms)
	s = mustDecide(t, p, s, 14, 1*ms)
	b := admission.Spent(p, s, 14, 1*ms)
	s = admission.Refund(p, s, a, 16*ms)
	if s.Refunded != 185*ms {
		t.Fatalf("after a's refund Refunded = %d, want 185ms (its share ended at 201ms)", s.Refunded)
	}
	s = mustDecide(t, p, s, 19, 41*ms)
	s = admission.Refund(p, s, b, 59*ms)
	if got := admission.Peek(p, s, 59*ms).Remaining; got > 32 {
		t.Errorf("after both refunds %d remain at 59ms, want at most 32 (c's 19 alone leave 32)", got)
	}
}

// A spend of a state that was swept and created again (another Start)
// gives nothing back, however much its recorded end lies ahead; a full
// state kept rather than swept is decided as a new one.
func TestRefundOfAnotherIncarnation(t *testing.T) {
	p := admission.Policy{Name: "tb", Algorithm: admission.AlgorithmTokenBucket, Limit: 100, Period: time.Second, Burst: 50}
	ms := int64(time.Millisecond)
	old := mustDecide(t, p, admission.State{}, 50, 1*ms)
	sp := admission.Spent(p, old, 50, 1*ms)
	// The old state expired at 501ms and was swept; a new one starts at 600ms.
	s := mustDecide(t, p, admission.State{}, 50, 600*ms)
	if s.Start == sp.Start {
		t.Fatalf("the new state has the old one's Start %d", s.Start)
	}
	if got := admission.Refund(p, s, sp, 600*ms); got.TAT != s.TAT || got.Refunded != s.Refunded {
		t.Errorf("a refund of the old state's spend changed the new one: %+v, was %+v", got, s)
	}
	if got := admission.Refundable(p, s, sp, 600*ms); got != 0 {
		t.Errorf("Refundable of the old state's spend = %d, want 0", got)
	}
	// Kept rather than swept, the old state is full at 600ms: deciding from
	// it starts a new incarnation all the same.
	kept := mustDecide(t, p, old, 50, 600*ms)
	if kept.TAT != s.TAT || kept.Start != s.Start || kept.Refunded != s.Refunded {
		t.Errorf("deciding from the full old state = %+v, from none %+v", kept, s)
	}
	// The same spend on its own state still comes back whole.
	if got := admission.Refund(p, old, sp, 1*ms); got.TAT != 1*ms || got.Refunded != 500*ms {
		t.Errorf("refund on its own state = %+v, want TAT 1ms, Refunded 500ms", got)
	}
}
