package lease_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/quorate/quorate/lease"
)

// TestOtherHolderRefused: a lease acts only for the holder that acquired it.
// Another caller, or the same caller with another secret, is refused as if
// the token had never been issued (ErrStale, not held), and nothing
// changes; the holder itself still renews, checks and releases it.
func TestOtherHolderRefused(t *testing.T) {
	gw2 := lease.Holder{Caller: "gw2", Secret: [lease.SecretSize]byte{1, 2, 3}}
	s, d := lease.Acquire(lease.Semaphore{}, 1, 100, t0, lease.Claim{Holder: gw2})
	if !d.Allowed || d.Lease.Holder != gw2 {
		t.Fatalf("Acquire = %+v", d)
	}
	tok := d.Lease.Token
	others := []lease.Holder{
		{Caller: "gw", Secret: gw2.Secret},      // the secret leaked to another caller
		{Caller: "gw2", Secret: [16]byte{1, 2}}, // a guessed secret
		{Caller: "gw2"},                         // none
		{},
	}
	// A lease without a secret is no one's, not even a request's without one.
	s0, d0 := lease.Acquire(lease.Semaphore{}, 1, 100, t0, lease.Claim{})
	if _, ok := lease.Holds(s0, d0.Lease.Token, t0, lease.Holder{}); !d0.Allowed || ok {
		t.Fatalf("a lease without a secret is held: %+v", d0)
	}
	for _, o := range others {
		if s2, _, err := lease.Renew(s, tok, 0, t0+10, o); !errors.Is(err, lease.ErrStale) || !sameState(s2, s) {
			t.Fatalf("Renew by %+v = %v; want ErrStale and no change", o, err)
		}
		if s2, _, err := lease.Release(s, tok, t0+10, o); !errors.Is(err, lease.ErrStale) || !sameState(s2, s) {
			t.Fatalf("Release by %+v = %v; want ErrStale and no change", o, err)
		}
		if _, ok := lease.Holds(s, tok, t0+10, o); ok {
			t.Fatalf("Holds by %+v = true", o)
		}
		// What another holder is told is what a token never issued gets.
		_, _, errOther := lease.Renew(s, tok, 0, t0+10, o)
		_, _, errNone := lease.Renew(s, tok+1, 0, t0+10, o)
		if errOther.Error() != strings.Replace(errNone.Error(), strconv.FormatInt(tok+1, 10), strconv.FormatInt(tok, 10), 1) {
			t.Fatalf("refusals differ: %v / %v", errOther, errNone)
		}
	}
	if l, ok := lease.Holds(s, tok, t0+10, gw2); !ok || l.Token != tok {
		t.Fatalf("Holds by the holder = %+v, %v", l, ok)
	}
	s, l, err := lease.Renew(s, tok, 0, t0+10, gw2)
	if err != nil || l.ExpiresAt != t0+110 || l.Holder != gw2 {
		t.Fatalf("Renew by the holder = %+v, %v", l, err)
	}
	if _, _, err := lease.Release(s, tok, t0+20, gw2); err != nil {
		t.Fatalf("Release by the holder: %v", err)
	}
}

// TestJitterTokens: with a random jitter per acquire, tokens stay unique and
// strictly increasing per key, never below the log time and at most the
// jitter above it when no earlier token is higher, across releases, expiry
// and the key's state reclaimed at ExpiresAt and recreated; and the token no
// longer follows from the acquire's log time (expiry − ttl).
func TestJitterTokens(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 29))
	var s lease.Semaphore
	now, high := t0, int64(0)
	var above int // acquires whose token is not the log time
	for i := range 50000 {
		now += r.Int64N(1 << 31)
		switch r.IntN(4) {
		case 0:
			if at := lease.ExpiresAt(s); now >= at {
				s = lease.Semaphore{} // reclaimed
			} else if r.IntN(2) == 0 {
				now, s = at, lease.Semaphore{}
			}
		case 1:
			if len(s.Leases) > 0 {
				s, _, _ = lease.Release(s, s.Leases[r.IntN(len(s.Leases))].Token, now, holder)
			}
		default:
			j := r.Uint32()
			var d lease.Decision
			s, d = lease.Acquire(s, 1+r.Int64N(3), 1+r.Int64N(1<<33), now, lease.Claim{Holder: holder, Jitter: j})
			if !d.Allowed {
				continue
			}
			tok := d.Lease.Token
			if tok <= high || tok < now || (tok > now+int64(j) && tok != high+1) {
				t.Fatalf("step %d: token %d, earlier %d, now %d, jitter %d", i, tok, high, now, j)
			}
			if tok != d.Lease.ExpiresAt-d.Lease.TTL {
				above++
			}
			high = tok
		}
	}
	if above == 0 {
		t.Fatal("every token was the acquire's log time")
	}
	// Jitter near the end of time saturates instead of wrapping.
	_, d := lease.Acquire(lease.Semaphore{}, 1, 1, math.MaxInt64-5, lease.Claim{Holder: holder, Jitter: math.MaxUint32})
	if !d.Allowed || d.Lease.Token != math.MaxInt64 {
		t.Fatalf("Acquire at the end of time = %+v", d)
	}
}
