package lease_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quorate/quorate/lease"
)

func mustAcquire(tb testing.TB, s lease.Semaphore, limit, ttl, now int64) (lease.Semaphore, lease.Lease) {
	tb.Helper()
	s2, d := lease.Acquire(s, limit, ttl, now, claim)
	if !d.Allowed {
		tb.Fatalf("Acquire(%+v, %d, %d, %d) denied: %+v", s, limit, ttl, now, d)
	}
	return s2, d.Lease
}

func TestAcquireDenyRetry(t *testing.T) {
	var s lease.Semaphore
	s, a := mustAcquire(t, s, 2, 100, t0)
	s, b := mustAcquire(t, s, 2, 50, t0)
	if a.Token != t0 || b.Token != t0+1 {
		t.Fatalf("tokens %d, %d; want %d, %d", a.Token, b.Token, t0, t0+1)
	}
	want := lease.Lease{Token: t0 + 1, AcquiredAt: t0, ExpiresAt: t0 + 50, TTL: 50, Holder: holder}
	if b != want {
		t.Fatalf("lease %+v, want %+v", b, want)
	}
	s2, d := lease.Acquire(s, 2, 10, t0+10, claim)
	if d.Allowed || d.RetryAfter != 40 || d.Held != 2 || d.Limit != 2 || d.Lease != (lease.Lease{}) {
		t.Fatalf("full semaphore: %+v; want denied, RetryAfter 40ns, Held 2", d)
	}
	if !sameState(s2, s) {
		t.Fatalf("denial changed the state")
	}
	if _, d := lease.Acquire(s, 2, 10, t0+49, claim); d.Allowed {
		t.Fatalf("allowed 1ns before the earliest expiry")
	}
	s, c := mustAcquire(t, s, 2, 10, t0+50)
	if c.Token != t0+50 || len(s.Leases) != 2 || s.Leases[0] != a || s.Leases[1] != c {
		t.Fatalf("after the expiry: %+v; want the first lease and the new one (token %d)", s, t0+50)
	}
}

// A lowered limit: with 3 held and limit 1, a slot frees when the
// second-earliest lease expires.
func TestLoweredLimitRetryAfter(t *testing.T) {
	var s lease.Semaphore
	for _, ttl := range []int64{30, 10, 20} {
		s, _ = mustAcquire(t, s, 3, ttl, t0)
	}
	_, d := lease.Acquire(s, 1, 5, t0, claim)
	if d.Allowed || d.Held != 3 || d.RetryAfter != 30 {
		t.Fatalf("limit lowered to 1: %+v; want denied, Held 3, RetryAfter 30ns", d)
	}
	if _, d := lease.Acquire(s, 2, 5, t0+1, claim); d.RetryAfter != 19 {
		t.Fatalf("limit 2: RetryAfter %v, want 19ns", d.RetryAfter)
	}
}

func TestRenew(t *testing.T) {
	s, l := mustAcquire(t, lease.Semaphore{}, 1, 100, t0)
	s, r, err := lease.Renew(s, l.Token, 0, t0+60, holder)
	if want := (lease.Lease{Token: l.Token, AcquiredAt: t0, ExpiresAt: t0 + 160, TTL: 100, Holder: holder}); err != nil || r != want {
		t.Fatalf("Renew with the lease's TTL = %+v, %v; want %+v", r, err, want)
	}
	s, r, err = lease.Renew(s, l.Token, 7, t0+150, holder)
	if err != nil || r.TTL != 7 || r.ExpiresAt != t0+157 {
		t.Fatalf("Renew with ttl 7 = %+v, %v", r, err)
	}
	_, r, err = lease.Renew(s, l.Token, 0, t0+156, holder)
	if err != nil || r.ExpiresAt != t0+163 {
		t.Fatalf("ttl 0 after a new ttl: %+v, %v; want ExpiresAt t0+163", r, err)
	}
	if !holds(s, l.Token, t0+156) || holds(s, l.Token, t0+157) {
		t.Fatalf("Holds disagrees with ExpiresAt %d", s.Leases[0].ExpiresAt)
	}
}

// TestStaleTokens: expired, released, never issued and another key's tokens
// are refused with ErrStale and change nothing.
func TestStaleTokens(t *testing.T) {
	s, a := mustAcquire(t, lease.Semaphore{}, 3, 100, t0)
	s, b := mustAcquire(t, s, 3, 10, t0)
	_, o := mustAcquire(t, lease.Semaphore{}, 3, 100, t0+5)
	s, _, err := lease.Release(s, a.Token, t0+1, holder)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		token, now int64
	}{
		{"released", a.Token, t0 + 2},
		{"expired", b.Token, t0 + 10},
		{"never issued", b.Token + 1, t0 + 2},
		{"zero", 0, t0 + 2},
		{"another key's", o.Token, t0 + 6},
	}
	for _, c := range cases {
		in := clone(s)
		if holds(s, c.token, c.now) {
			t.Errorf("%s: Holds true", c.name)
		}
		s2, l, err := lease.Renew(s, c.token, 0, c.now, holder)
		if !errors.Is(err, lease.ErrStale) || l != (lease.Lease{}) || !sameState(s2, in) {
			t.Errorf("%s: Renew = %+v, %+v, %v; want ErrStale, no change", c.name, s2, l, err)
		}
		s2, l, err = lease.Release(s, c.token, c.now, holder)
		if !errors.Is(err, lease.ErrStale) || l != (lease.Lease{}) || !sameState(s2, in) {
			t.Errorf("%s: Release = %+v, %+v, %v; want ErrStale, no change", c.name, s2, l, err)
		}
		if !sameState(s, in) {
			t.Errorf("%s: input modified", c.name)
		}
	}
}

func TestInvalid(t *testing.T) {
	for _, c := range []struct{ limit, ttl int64 }{
		{0, 1}, {-1, 1}, {lease.MaxLimit + 1, 1}, {1, 0}, {1, -1}, {1, lease.MaxTTL + 1}, {1, math.MinInt64},
	} {
		if err := lease.Check(c.limit, c.ttl); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Check(%d, %d) = %v, want ErrInvalid", c.limit, c.ttl, err)
		}
		s, d := lease.Acquire(lease.Semaphore{}, c.limit, c.ttl, t0, claim)
		if d.Allowed || d.RetryAfter != lease.NeverRetry || s.LastToken != 0 || s.Leases != nil {
			t.Errorf("Acquire(limit %d, ttl %d) = %+v, %+v; want failed closed", c.limit, c.ttl, s, d)
		}
	}
	for _, c := range []struct{ limit, ttl int64 }{{1, 1}, {lease.MaxLimit, lease.MaxTTL}} {
		if err := lease.Check(c.limit, c.ttl); err != nil {
			t.Errorf("Check(%d, %d) = %v", c.limit, c.ttl, err)
		}
	}
	s, l := mustAcquire(t, lease.Semaphore{}, 1, 10, t0)
	for _, ttl := range []int64{-1, lease.MaxTTL + 1} {
		if s2, _, err := lease.Renew(s, l.Token, ttl, t0, holder); !errors.Is(err, lease.ErrInvalid) || !sameState(s2, s) {
			t.Errorf("Renew ttl %d = %v, want ErrInvalid", ttl, err)
		}
	}
	// Out of tokens: fail closed rather than wrap.
	full := lease.Semaphore{LastToken: math.MaxInt64}
	if _, d := lease.Acquire(full, 1, 1, t0, claim); d.Allowed || d.RetryAfter != lease.NeverRetry {
		t.Errorf("LastToken MaxInt64: %+v, want failed closed", d)
	}
}

func TestZeroSemaphore(t *testing.T) {
	var s lease.Semaphore
	if lease.ExpiresAt(s) != 0 || lease.Live(s, t0) != 0 || holds(s, 0, t0) {
		t.Fatal("the zero Semaphore is not empty")
	}
	if s2 := lease.Shift(s, 5); !sameState(s2, s) {
		t.Fatal("Shift changed the zero Semaphore")
	}
}

// TestReclaim drops a key's state at ExpiresAt and acquires again: the token
// is still above every earlier one, also when the last lease was released
// early and when tokens ran ahead of the log time.
func TestReclaim(t *testing.T) {
	t.Run("released early", func(t *testing.T) {
		s, a := mustAcquire(t, lease.Semaphore{}, 1, 1000, t0)
		s, _, err := lease.Release(s, a.Token, t0, holder)
		if err != nil {
			t.Fatal(err)
		}
		at := lease.ExpiresAt(s)
		if at > t0+1 || at <= a.Token {
			t.Fatalf("ExpiresAt %d; want %d", at, a.Token+1)
		}
		_, b := mustAcquire(t, lease.Semaphore{}, 1, 1000, max(t0, at))
		if b.Token <= a.Token {
			t.Fatalf("token %d after reclaim, not above %d", b.Token, a.Token)
		}
	})
	t.Run("tokens ahead of time", func(t *testing.T) {
		var s lease.Semaphore
		var last lease.Lease
		for range 5 { // five leases at one now, each released: tokens t0..t0+4
			s, last = mustAcquire(t, s, 1, 1, t0)
			s, _, _ = lease.Release(s, last.Token, t0, holder)
		}
		at := lease.ExpiresAt(s)
		if at != t0+5 {
			t.Fatalf("ExpiresAt %d, want t0+5", at)
		}
		_, l := mustAcquire(t, lease.Semaphore{}, 1, 1, at)
		if l.Token <= last.Token {
			t.Fatalf("token %d after reclaim, not above %d", l.Token, last.Token)
		}
	})
	t.Run("random", func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 7))
		var s lease.Semaphore
		now, high := t0, int64(0)
		for i := range 20000 {
			now += r.Int64N(3)
			switch r.IntN(4) {
			case 0:
				if at := lease.ExpiresAt(s); now >= at {
					s = lease.Semaphore{}
				} else if r.IntN(2) == 0 {
					now, s = at, lease.Semaphore{}
				}
			case 1:
				if len(s.Leases) > 0 {
					s, _, _ = lease.Release(s, s.Leases[r.IntN(len(s.Leases))].Token, now, holder)
				}
			default:
				var d lease.Decision
				s, d = lease.Acquire(s, 1+r.Int64N(3), 1+r.Int64N(4), now, claim)
				if d.Allowed {
					if d.Lease.Token <= high || d.Lease.Token < now {
						t.Fatalf("step %d: token %d, earlier %d, now %d", i, d.Lease.Token, high, now)
					}
					high = d.Lease.Token
				}
			}
		}
	})
}

// TestShift: after Shift(d) every lease lives exactly d longer, Holds agrees,
// and a lease expired at the old leader's last time L stays expired at L+d.
func TestShift(t *testing.T) {
	var s lease.Semaphore
	for _, ttl := range []int64{10, 50, 30} {
		s, _ = mustAcquire(t, s, 3, ttl, t0)
	}
	l := t0 + 20 // the old leader's last time: the first lease expired
	in := clone(s)
	for _, d := range []int64{1, 7, int64(time.Minute)} {
		sh := lease.Shift(s, d)
		if !sameState(s, in) {
			t.Fatal("Shift modified its input")
		}
		for i, x := range sh.Leases {
			old := s.Leases[i]
			if x.ExpiresAt != old.ExpiresAt+d || x.Token != old.Token || x.AcquiredAt != old.AcquiredAt || x.TTL != old.TTL {
				t.Fatalf("Shift(%d): %+v became %+v", d, old, x)
			}
			for _, at := range []int64{old.ExpiresAt - 1, old.ExpiresAt, old.ExpiresAt + d - 1, old.ExpiresAt + d} {
				if got, want := holds(sh, x.Token, at), at < old.ExpiresAt+d; got != want {
					t.Fatalf("Shift(%d): Holds(%d, %d) = %v, want %v", d, x.Token, at, got, want)
				}
			}
			// Remaining time at the new leader's first time equals the old.
			if old.ExpiresAt > l && x.ExpiresAt-(l+d) != old.ExpiresAt-l {
				t.Fatalf("Shift(%d): remaining time not preserved", d)
			}
		}
		if lease.Live(sh, l+d) != lease.Live(s, l) || holds(sh, s.Leases[0].Token, l+d) {
			t.Fatalf("Shift(%d): live set at L+d differs from L", d)
		}
	}
	for _, d := range []int64{0, -5} {
		if sh := lease.Shift(s, d); !sameState(sh, s) {
			t.Fatalf("Shift(%d) changed the state", d)
		}
	}
	if sh := lease.Shift(s, math.MaxInt64); sh.Leases[0].ExpiresAt != math.MaxInt64 {
		t.Fatalf("Shift did not saturate: %+v", sh.Leases[0])
	}
}

// holder holds the leases of the tests that are not about holders; claim
// acquires them for it without jitter.
var (
	holder = lease.Holder{Caller: "c", Secret: [lease.SecretSize]byte{1}}
	claim  = lease.Claim{Holder: holder}
)

// holds is Holds for holder, as a bool.
func holds(s lease.Semaphore, token, now int64) bool {
	_, ok := lease.Holds(s, token, now, holder)
	return ok
}
