package lease_test

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/quorate/quorate/lease"
)

// source yields the choices of a run: a *rand.Rand, or fuzz bytes.
type source interface{ Int64N(n int64) int64 }

// bytesSource reads choices from fuzz input; 0 once it is exhausted.
type bytesSource struct{ b []byte }

func (s *bytesSource) Int64N(n int64) int64 {
	var buf [8]byte
	k := 2
	if n > 1<<16 {
		k = 8
	}
	k = copy(buf[:k], s.b)
	s.b = s.b[k:]
	return int64(binary.LittleEndian.Uint64(buf[:]) % uint64(n))
}

type key struct {
	s         lease.Semaphore
	m         model
	stateLast int64 // LastToken of s as the model expects it (0 after a reclaim)
}

type keptState struct{ got, want lease.Semaphore }

type stats struct{ allowed, denied, renewed, released, stale, reclaimed, shifted int }

// harness drives random operations on a few keys through the package and the
// model, checking every answer and invariant.
type harness struct {
	tb         testing.TB
	src        source
	keys       []*key
	limit      int64
	fixedLimit bool
	now, scale int64
	steps      int
	kept       []keptState
	st         stats
}

func newHarness(tb testing.TB, src source, limit, scale int64, fixedLimit bool) *harness {
	h := &harness{tb: tb, src: src, limit: limit, fixedLimit: fixedLimit, now: t0, scale: scale}
	for range 3 {
		h.keys = append(h.keys, &key{})
	}
	return h
}

func clone(s lease.Semaphore) lease.Semaphore {
	return lease.Semaphore{LastToken: s.LastToken, Leases: slices.Clone(s.Leases)}
}

func sameState(a, b lease.Semaphore) bool {
	return a.LastToken == b.LastToken && slices.Equal(a.Leases, b.Leases)
}

// unchanged fails if the input of a call was modified.
func (h *harness) unchanged(what string, before, after lease.Semaphore) {
	h.tb.Helper()
	if !sameState(before, after) {
		h.tb.Fatalf("%s modified its input: %+v became %+v", what, before, after)
	}
}

func (h *harness) keep(s lease.Semaphore) { h.kept = append(h.kept, keptState{s, clone(s)}) }

func (h *harness) ttl() int64 {
	switch h.src.Int64N(50) {
	case 0:
		return lease.MaxTTL - h.src.Int64N(h.scale)
	case 1, 2, 3:
		return 1
	case 4, 5:
		return 2
	case 6, 7, 8, 9:
		return 1 + h.src.Int64N(3*h.scale)
	}
	return 1 + h.src.Int64N(30*h.scale)
}

// token picks a token to renew, release or check: live, ever issued,
// another key's, or never issued.
func (h *harness) token(k *key) int64 {
	var pool []int64
	switch h.src.Int64N(7) {
	case 0, 1, 5, 6:
		for _, l := range k.m.liveAt(h.now) {
			pool = append(pool, l.Token)
		}
	case 2:
		for _, l := range k.m.issued {
			pool = append(pool, l.Token)
		}
	case 3:
		for _, o := range h.keys {
			for _, l := range o.m.issued {
				pool = append(pool, l.Token)
			}
		}
	case 4:
		return k.m.lastToken() + 1 + h.src.Int64N(3)
	}
	if len(pool) == 0 {
		return h.now - 2 + h.src.Int64N(4)
	}
	return pool[h.src.Int64N(int64(len(pool)))]
}

func (h *harness) acquire(k *key, ttl int64) {
	h.tb.Helper()
	in := clone(k.s)
	s, d := lease.Acquire(k.s, h.limit, ttl, h.now, claim)
	if s2, d2 := lease.Acquire(k.s, h.limit, ttl, h.now, claim); !sameState(s, s2) || d != d2 {
		h.tb.Fatalf("Acquire not deterministic: %+v %+v then %+v %+v", s, d, s2, d2)
	}
	h.unchanged("Acquire", in, k.s)
	live := k.m.liveCount(h.now)
	want := lease.Decision{Limit: h.limit, Held: live}
	if live < h.limit {
		want.Allowed, want.Held = true, live+1
		want.Lease = lease.Lease{Token: max(k.stateLast+1, h.now), AcquiredAt: h.now, ExpiresAt: h.now + ttl, TTL: ttl, Holder: holder}
		for _, o := range k.m.issued {
			if want.Lease.Token <= o.Token {
				h.tb.Fatalf("token %d not above earlier token %d", want.Lease.Token, o.Token)
			}
		}
	} else {
		want.RetryAfter = k.m.retryAfter(h.tb, h.limit, h.now)
	}
	if d != want {
		h.tb.Fatalf("Acquire(%+v, limit %d, ttl %d, now %d) = %+v, model wants %+v", in, h.limit, ttl, h.now, d, want)
	}
	if d.Allowed {
		h.st.allowed++
		k.m.issued = append(k.m.issued, modelLease{Lease: d.Lease})
		k.stateLast = d.Lease.Token
	} else {
		h.st.denied++
		if !sameState(s, in) {
			h.tb.Fatalf("denial changed the state: %+v became %+v", in, s)
		}
		// Exact: denied one nanosecond early, allowed on time.
		if _, d1 := lease.Acquire(k.s, h.limit, ttl, h.now+int64(d.RetryAfter)-1, claim); d1.Allowed {
			h.tb.Fatalf("allowed at now+RetryAfter-1: %+v", d)
		}
		if _, d2 := lease.Acquire(k.s, h.limit, ttl, h.now+int64(d.RetryAfter), claim); !d2.Allowed {
			h.tb.Fatalf("denied at now+RetryAfter: %+v then %+v", d, d2)
		}
	}
	k.s = s
}

func (h *harness) renew(k *key, token, ttl int64) {
	h.tb.Helper()
	in := clone(k.s)
	s, l, err := lease.Renew(k.s, token, ttl, h.now, holder)
	h.unchanged("Renew", in, k.s)
	i := k.m.find(token, h.now)
	if i < 0 {
		h.stale("Renew", k, in, s, l, err, token)
		return
	}
	want := k.m.issued[i].Lease
	if ttl != 0 {
		want.TTL = ttl
	}
	want.ExpiresAt = h.now + want.TTL
	if err != nil || l != want {
		h.tb.Fatalf("Renew(token %d, ttl %d, now %d) = %+v, %v; want %+v", token, ttl, h.now, l, err, want)
	}
	k.m.issued[i].Lease = want
	k.s = s
	h.st.renewed++
}

func (h *harness) release(k *key, token int64) {
	h.tb.Helper()
	in := clone(k.s)
	s, l, err := lease.Release(k.s, token, h.now, holder)
	h.unchanged("Release", in, k.s)
	i := k.m.find(token, h.now)
	if i < 0 {
		h.stale("Release", k, in, s, l, err, token)
		return
	}
	if err != nil || l != k.m.issued[i].Lease {
		h.tb.Fatalf("Release(token %d, now %d) = %+v, %v; want %+v", token, h.now, l, err, k.m.issued[i].Lease)
	}
	k.m.issued[i].released = true
	k.s = s
	h.st.released++
}

func (h *harness) stale(what string, k *key, in, s lease.Semaphore, l lease.Lease, err error, token int64) {
	h.tb.Helper()
	if !errors.Is(err, lease.ErrStale) || l != (lease.Lease{}) || !sameState(s, in) {
		h.tb.Fatalf("%s(token %d, now %d) of a stale token = %+v, %+v, %v; want ErrStale and no change", what, token, h.now, s, l, err)
	}
	if holds(k.s, token, h.now) {
		h.tb.Fatalf("Holds(token %d) true for a stale token", token)
	}
	h.st.stale++
}

// shift is a leader change: every key is shifted by d, then the new leader's
// time runs from L+d on.
func (h *harness) shift(d int64) {
	h.tb.Helper()
	for _, k := range h.keys {
		in := clone(k.s)
		s := lease.Shift(k.s, d)
		h.unchanged("Shift", in, k.s)
		if s.LastToken != in.LastToken || len(s.Leases) != len(in.Leases) {
			h.tb.Fatalf("Shift(%d) changed more than expiries: %+v became %+v", d, in, s)
		}
		for i, l := range s.Leases {
			w := in.Leases[i]
			w.ExpiresAt += d
			if l != w {
				h.tb.Fatalf("Shift(%d): lease %+v became %+v, want %+v", d, in.Leases[i], l, w)
			}
			if !holds(s, l.Token, w.ExpiresAt-1) || holds(s, l.Token, w.ExpiresAt) {
				h.tb.Fatalf("Shift(%d): Holds disagrees with ExpiresAt %d for %+v", d, w.ExpiresAt, l)
			}
		}
		for i := range k.m.issued {
			if ml := &k.m.issued[i]; k.m.live(*ml, h.now) {
				ml.ExpiresAt += d
			}
		}
		k.s = s
	}
	h.now += d
	h.st.shifted++
	for _, k := range h.keys {
		h.check(k)
	}
}

// reclaim forgets the key's state once the log time reaches its ExpiresAt.
func (h *harness) reclaim(k *key) {
	h.tb.Helper()
	at := lease.ExpiresAt(k.s)
	if at > h.now && (at-h.now > 100*h.scale || h.src.Int64N(4) != 0) {
		return
	}
	h.now = max(h.now, at)
	if live := k.m.liveAt(h.now); len(live) > 0 {
		h.tb.Fatalf("ExpiresAt %d but %d leases still live: %+v", at, len(live), live)
	}
	k.s, k.stateLast = lease.Semaphore{}, 0
	h.st.reclaimed++
}

func (h *harness) advance() {
	switch h.src.Int64N(20) {
	case 0, 1, 2, 3, 4, 5: // same time
	case 6, 7:
		h.now++
	case 8, 9, 10, 11, 12, 13:
		h.now += h.src.Int64N(h.scale)
	case 14, 15, 16: // to just before or at an expiry
		if live := h.keys[h.src.Int64N(int64(len(h.keys)))].m.liveAt(h.now); len(live) > 0 {
			e := live[h.src.Int64N(int64(len(live)))].ExpiresAt
			if e-h.now <= 100*h.scale {
				h.now = max(h.now, e-1+h.src.Int64N(2))
			}
		}
	case 17, 18:
		h.now += h.src.Int64N(3 * h.scale)
	case 19: // sometimes a big jump: everything short expires
		if h.src.Int64N(4) == 0 {
			h.now += 100 * h.scale
		}
	}
}

func (h *harness) step() {
	h.tb.Helper()
	h.advance()
	k := h.keys[h.src.Int64N(int64(len(h.keys)))]
	switch op := h.src.Int64N(100); {
	case op < 45:
		h.acquire(k, h.ttl())
	case op < 60:
		var ttl int64
		if h.src.Int64N(2) == 0 {
			ttl = h.ttl()
		}
		h.renew(k, h.token(k), ttl)
	case op < 70:
		h.release(k, h.token(k))
	case op < 78:
		tok := h.token(k)
		if got, want := holds(k.s, tok, h.now), k.m.find(tok, h.now) >= 0; got != want {
			h.tb.Fatalf("Holds(token %d, now %d) = %v, model %v", tok, h.now, got, want)
		}
	case op < 82:
		if !h.fixedLimit {
			h.limit = 1 + h.src.Int64N(8)
		}
	case op < 87:
		h.shift(h.src.Int64N(3 * h.scale))
	case op < 95:
		h.reclaim(k)
	default: // acquire and release at one now: tokens run ahead of time
		for range 1 + h.src.Int64N(6) {
			h.acquire(k, 1+h.src.Int64N(3))
			if n := len(k.m.issued); n > 0 && k.m.find(k.m.issued[n-1].Token, h.now) >= 0 {
				h.release(k, k.m.issued[n-1].Token)
			}
		}
	}
	h.steps++
	for _, o := range h.keys {
		if o == k || h.steps%8 == 0 {
			h.check(o)
		}
		h.keep(o.s)
	}
}

// check compares a key's state with the model and checks its invariants.
func (h *harness) check(k *key) {
	h.tb.Helper()
	s := k.s
	if s.LastToken != k.stateLast {
		h.tb.Fatalf("LastToken %d, model %d", s.LastToken, k.stateLast)
	}
	for i, l := range s.Leases {
		if l.Token > s.LastToken || i > 0 && l.Token <= s.Leases[i-1].Token {
			h.tb.Fatalf("leases not sorted by unique tokens ≤ LastToken: %+v", s)
		}
	}
	var live []lease.Lease
	for _, l := range s.Leases {
		if h.now < l.ExpiresAt {
			live = append(live, l)
		}
	}
	if want := k.m.liveAt(h.now); !slices.Equal(live, want) {
		h.tb.Fatalf("live leases at %d: %+v, model %+v", h.now, live, want)
	}
	probes := []int64{h.now, h.now + 1}
	for _, l := range live {
		probes = append(probes, l.ExpiresAt-1, l.ExpiresAt)
	}
	for _, at := range probes {
		n := lease.Live(s, at)
		if want := k.m.liveCount(at); n != want {
			h.tb.Fatalf("Live(%d) = %d, model %d", at, n, want)
		}
		if h.fixedLimit && n > h.limit {
			h.tb.Fatalf("%d leases live at %d, limit %d", n, at, h.limit)
		}
	}
	if e := lease.ExpiresAt(s); s.LastToken > 0 && e <= s.LastToken || len(live) > 0 && e < live[len(live)-1].ExpiresAt {
		h.tb.Fatalf("ExpiresAt %d below LastToken+1 or a live expiry: %+v", e, s)
	}
	for _, o := range h.keys {
		for _, l := range o.m.issued[max(0, len(o.m.issued)-16):] {
			if got, want := holds(s, l.Token, h.now), k.m.find(l.Token, h.now) >= 0; got != want {
				h.tb.Fatalf("Holds(token %d, now %d) = %v, model %v", l.Token, h.now, got, want)
			}
		}
	}
}

// finish checks that no state returned earlier was changed since.
func (h *harness) finish() {
	h.tb.Helper()
	for i, k := range h.kept {
		if !sameState(k.got, k.want) {
			h.tb.Fatalf("state %d changed after it was returned: %+v, was %+v", i, k.got, k.want)
		}
	}
}
