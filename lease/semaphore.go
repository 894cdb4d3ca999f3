package lease

import (
	"cmp"
	"crypto/subtle"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Sentinel errors of this package. Returned errors wrap one of them with
// details; test with errors.Is, never with the message text.
var (
	// ErrStale means the token is not a live lease of this key at now: it
	// expired, was released, or was never issued for this key. The server
	// answers FailedPrecondition.
	ErrStale = errors.New("not the holder")
	// ErrInvalid means the request is malformed, e.g. a ttl out of range
	// (see Check). The server answers InvalidArgument.
	ErrInvalid = errors.New("lease: invalid request")
)

// Bounds on requests, checked by Check (and by Acquire and Renew, which fail
// closed on values outside them). They keep every sum in this package far
// from int64 overflow for any log time before the year 2261 and bound a
// key's state to MaxLimit leases.
const (
	// MaxLimit is the largest number of slots of one key.
	MaxLimit = 10_000
	// MaxTTL is the longest lease, in nanoseconds: 366 days.
	MaxTTL = int64(366 * 24 * time.Hour)
)

// NeverRetry is the RetryAfter of an Acquire that can never be allowed: its
// limit or ttl is invalid (see Check), or the key has used up its tokens
// (LastToken is math.MaxInt64).
const NeverRetry = time.Duration(math.MaxInt64)

// SecretSize is the length of a lease's secret in bytes.
const SecretSize = 16

// Holder is who holds a lease: the caller that acquired it and the secret
// its lease ID carries (drawn at random by the leader before proposing).
// Renew, Release and Holds act only for the same Holder; to anyone else the
// lease does not exist (ErrStale, false), so that a refusal does not confirm
// it does.
type Holder struct {
	Caller string
	Secret [SecretSize]byte
}

// Is reports whether h and o are the same holder; the secrets are compared
// in constant time. The zero secret is no one's: a lease without a secret
// (the FSM never issues one) is held by nobody, and a request without one
// holds nothing.
func (h Holder) Is(o Holder) bool {
	var zero [SecretSize]byte
	same := subtle.ConstantTimeCompare(h.Secret[:], o.Secret[:]) == 1
	return same && h.Secret != zero && h.Caller == o.Caller
}

// Claim is what an Acquire asks beyond a slot: the holder of the new lease,
// and how far above the log time its token starts (a value the leader drew
// at random, so that a token does not follow from the times a denial
// shows: expiry − ttl is the acquire's log time, not its token).
type Claim struct {
	Holder Holder
	Jitter uint32 // ns
}

// Lease is one held slot. Times are Unix nanoseconds of log time; a lease is
// live at now iff now < ExpiresAt.
type Lease struct {
	Token      int64 // fencing token: unique and strictly increasing per key
	AcquiredAt int64 // Unix ns (log time)
	ExpiresAt  int64 // Unix ns (log time)
	TTL        int64 // ns, as granted (renewals extend by this unless a new ttl is given)
	Holder     Holder
}

// Semaphore is one key's state: its leases, sorted by strictly increasing
// Token, and the last token issued (every Token ≤ LastToken). Leases may
// still hold expired leases until the next Acquire, Renew or Release drops
// them; expired leases count for nothing. The zero Semaphore is a key never
// seen. A Semaphore returned by this package may share its Leases array with
// the argument it came from: treat Leases as read-only and copy it before
// changing it.
type Semaphore struct {
	LastToken int64
	Leases    []Lease
}

// Decision is an Acquire's answer.
type Decision struct {
	// Allowed reports whether a slot was taken; when false nothing changed.
	Allowed bool
	// Lease is the new lease when allowed, the zero Lease otherwise.
	Lease Lease
	// Limit is the number of slots (Acquire's limit argument).
	Limit int64
	// Held is the number of live leases after the decision.
	Held int64
	// RetryAfter is zero when allowed. When denied, it is the exact time
	// until a slot frees if nothing else changes (≥ 1ns): at
	// now+RetryAfter−1 the same Acquire is still denied, at now+RetryAfter
	// it is allowed. With Held == Limit that is when the earliest live lease
	// expires; with Held > Limit (the limit was lowered) it is when the
	// (Held−Limit+1)-th earliest expires. NeverRetry when it can never be
	// allowed.
	RetryAfter time.Duration
}

// Check reports whether Acquire's limit (1..MaxLimit) and ttl (1..MaxTTL
// nanoseconds) are valid. The error wraps ErrInvalid and names the field.
func Check(limit, ttl int64) error {
	if !validLimit(limit) {
		return fmt.Errorf("%w: limit must be between 1 and %d (got %d)", ErrInvalid, MaxLimit, limit)
	}
	return checkTTL(ttl)
}

func checkTTL(ttl int64) error {
	if !validTTL(ttl) {
		return fmt.Errorf("%w: ttl must be between 1ns and %v (got %dns)", ErrInvalid, time.Duration(MaxTTL), ttl)
	}
	return nil
}

func validLimit(limit int64) bool { return limit >= 1 && limit <= MaxLimit }
func validTTL(ttl int64) bool     { return ttl >= 1 && ttl <= MaxTTL }

// Acquire takes one of limit slots at now for ttl nanoseconds if fewer than
// limit leases are live at now. The new lease has c's Holder, AcquiredAt
// now, ExpiresAt now+ttl and Token max(s.LastToken+1, now+c.Jitter):
// strictly greater than every token issued before for this key, and never
// below the log time, so still greater after the key's state was reclaimed
// at ExpiresAt(s) and recreated (see ExpiresAt). The returned state has the
// new lease and the live leases of s; expired ones are dropped.
//
// Denied, it returns s itself and a Decision with the exact RetryAfter. An
// invalid limit or ttl (see Check), or a key whose LastToken is
// math.MaxInt64, is denied with NeverRetry: Acquire fails closed.
func Acquire(s Semaphore, limit, ttl, now int64, c Claim) (Semaphore, Decision) {
	live := Live(s, now)
	d := Decision{Limit: limit, Held: live}
	if !validLimit(limit) || !validTTL(ttl) || s.LastToken == math.MaxInt64 {
		d.RetryAfter = NeverRetry
		return s, d
	}
	if live >= limit {
		d.RetryAfter = time.Duration(freeAt(s, live-limit+1, now) - now)
		return s, d
	}
	l := Lease{
		Token:      max(s.LastToken+1, addSat(now, int64(c.Jitter))),
		AcquiredAt: now,
		ExpiresAt:  addSat(now, ttl),
		TTL:        ttl,
		Holder:     c.Holder,
	}
	leases := appendLive(make([]Lease, 0, live+1), s.Leases, now, live)
	d.Allowed, d.Lease, d.Held = true, l, live+1
	return Semaphore{LastToken: l.Token, Leases: append(leases, l)}, d
}

// appendLive appends to dst the leases of src live at now, of which there
// are live.
func appendLive(dst, src []Lease, now, live int64) []Lease {
	if live == int64(len(src)) {
		return append(dst, src...)
	}
	for _, x := range src {
		if now < x.ExpiresAt {
			dst = append(dst, x)
		}
	}
	return dst
}

// freeAt returns the k-th smallest ExpiresAt among the leases live at now
// (1 ≤ k ≤ their number): the first time at which k of them have expired.
func freeAt(s Semaphore, k, now int64) int64 {
	if k == 1 {
		at := int64(math.MaxInt64)
		for _, l := range s.Leases {
			if now < l.ExpiresAt {
				at = min(at, l.ExpiresAt)
			}
		}
		return at
	}
	exp := make([]int64, 0, len(s.Leases))
	for _, l := range s.Leases {
		if now < l.ExpiresAt {
			exp = append(exp, l.ExpiresAt)
		}
	}
	slices.Sort(exp)
	return exp[k-1]
}

// Renew sets the expiry of h's live lease with this token to now+ttl and
// returns the renewed lease. ttl 0 means the lease's own TTL; any other ttl
// must be 1..MaxTTL and becomes the lease's TTL. Renewing sets, it does not
// add: a smaller ttl than the time left shortens the lease. Token and
// AcquiredAt do not change, and expired leases are dropped from the
// returned state.
//
// Errors: ErrInvalid for a ttl out of range, ErrStale if token is not a live
// lease of s at now held by h; s is then returned unchanged.
func Renew(s Semaphore, token, ttl, now int64, h Holder) (Semaphore, Lease, error) {
	if ttl != 0 {
		if err := checkTTL(ttl); err != nil {
			return s, Lease{}, err
		}
	}
	i, ok := find(s, token, now, h)
	if !ok {
		return s, Lease{}, staleError(token, now)
	}
	l := s.Leases[i]
	if ttl != 0 {
		l.TTL = ttl
	}
	l.ExpiresAt = addSat(now, l.TTL)
	leases := make([]Lease, 0, len(s.Leases))
	for j, x := range s.Leases {
		switch {
		case j == i:
			leases = append(leases, l)
		case now < x.ExpiresAt:
			leases = append(leases, x)
		}
	}
	return Semaphore{LastToken: s.LastToken, Leases: leases}, l, nil
}

// Release frees h's live lease with this token and returns it as it was.
// Expired leases are dropped from the returned state. ErrStale if token is
// not a live lease of s at now held by h (s is then returned unchanged): a
// second Release of the same token is ErrStale; retries of one Release
// request are answered by the request-ID table before they reach here.
func Release(s Semaphore, token, now int64, h Holder) (Semaphore, Lease, error) {
	i, ok := find(s, token, now, h)
	if !ok {
		return s, Lease{}, staleError(token, now)
	}
	leases := make([]Lease, 0, len(s.Leases)-1)
	for j, x := range s.Leases {
		if j != i && now < x.ExpiresAt {
			leases = append(leases, x)
		}
	}
	return Semaphore{LastToken: s.LastToken, Leases: leases}, s.Leases[i], nil
}

// Holds returns h's live lease of s at now with this token, if there is
// one: the answer to CheckFence.
func Holds(s Semaphore, token, now int64, h Holder) (Lease, bool) {
	i, ok := find(s, token, now, h)
	if !ok {
		return Lease{}, false
	}
	return s.Leases[i], true
}

// Live returns the number of leases of s live at now.
func Live(s Semaphore, now int64) int64 {
	var n int64
	for _, l := range s.Leases {
		if now < l.ExpiresAt {
			n++
		}
	}
	return n
}

// ExpiresAt returns the earliest log time from which s decides exactly like
// the zero Semaphore, so that the caller may reclaim it (replace it by the
// zero Semaphore) at any now ≥ ExpiresAt(s) without changing any later
// answer: the latest ExpiresAt of its leases, and at least LastToken+1, so
// that Acquire's max(LastToken+1, now) equals the zero Semaphore's
// max(1, now) from then on. It is 0 for the zero Semaphore.
//
// LastToken+1 matters when the last lease issued was released before its
// ExpiresAt, or when tokens ran ahead of the log time (many Acquires at one
// now): reclaiming at the leases' expiry alone could then reissue a token.
func ExpiresAt(s Semaphore) int64 {
	var at int64
	if s.LastToken > 0 {
		at = addSat(s.LastToken, 1)
	}
	for _, l := range s.Leases {
		at = max(at, l.ExpiresAt)
	}
	return at
}

// Shift returns s with every lease's ExpiresAt moved d ≥ 0 nanoseconds
// later (saturating at math.MaxInt64); d ≤ 0 returns s unchanged.
//
// The FSM calls it on a leader change, with d = N − L where L is the last
// log time of the old leader and N ≥ L the first of the new one, on the state
// as it stood at L: a new leader never expires a lease earlier than the old
// leader would have. Each lease live at L has exactly the time it had left
// at L, measured in the old leader's log time, left at N; a lease expired at
// L (ExpiresAt ≤ L) is still expired at N (ExpiresAt+d ≤ N). The live set at
// N is the live set at L, so Shift never puts more than limit leases live.
func Shift(s Semaphore, d int64) Semaphore {
	if d <= 0 || len(s.Leases) == 0 {
		return s
	}
	leases := make([]Lease, len(s.Leases))
	for i, l := range s.Leases {
		l.ExpiresAt = addSat(l.ExpiresAt, d)
		leases[i] = l
	}
	return Semaphore{LastToken: s.LastToken, Leases: leases}
}

// find returns the index of the lease with this token if it is live at now
// and h holds it.
func find(s Semaphore, token, now int64, h Holder) (int, bool) {
	i, ok := slices.BinarySearchFunc(s.Leases, token, func(l Lease, t int64) int {
		return cmp.Compare(l.Token, t)
	})
	if !ok || now >= s.Leases[i].ExpiresAt || !s.Leases[i].Holder.Is(h) {
		return 0, false
	}
	return i, true
}

// staleError is the one refusal of a token that is not h's live lease,
// whatever the reason: another holder's lease is refused as one that never
// existed. It names the log time now in RFC 3339 (UTC).
func staleError(token, now int64) error {
	return fmt.Errorf("%w: token %d is not a live lease of yours at %s (expired, released or never issued)",
		ErrStale, token, time.Unix(0, now).UTC().Format(time.RFC3339Nano))
}

// addSat returns a+b for b ≥ 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
