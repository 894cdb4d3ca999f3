package fsm_test

import (
	"errors"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/lease"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// TestLeaseAcquireDenyReleaseExpire fills a key's slots, is denied with the
// exact RetryAfter, frees slots by Release and by expiry of logged time, and
// checks that fencing tokens strictly increase throughout, across the
// semaphore being reclaimed by Expire entries and recreated.
func TestLeaseAcquireDenyReleaseExpire(t *testing.T) {
	l := newTermFSM(t, withRetention(concurrency("db", 3, 10*time.Second), 15*time.Second))
	var last int64
	issued := func(now int64, what string, ls lease.Lease) {
		t.Helper()
		if ls.Token <= last {
			t.Fatalf("%s: token %d, want > %d (the last issued)", what, ls.Token, last)
		}
		if ls.Token < now {
			t.Fatalf("%s: token %d below the log time %d", what, ls.Token, now)
		}
		last = ls.Token
	}

	a := l.acquire(t0+1*sec, acquireOp("db", "k"))
	issued(t0+1*sec, "a", a)
	if want := (lease.Lease{Token: a.Token, AcquiredAt: t0 + 1*sec, ExpiresAt: t0 + 11*sec, TTL: 10 * sec, Holder: svcHolder}); a != want {
		t.Fatalf("lease %+v, want %+v (the policy's ttl)", a, want)
	}
	b := l.acquire(t0+2*sec, acquireOp("db", "k").withID("svc", "b"))
	issued(t0+2*sec, "b", b)
	c := l.acquire(t0+3*sec, acquireOp("db", "k").withTTL(5*time.Second))
	issued(t0+3*sec, "c", c)
	if c.ExpiresAt != t0+8*sec || c.TTL != 5*sec {
		t.Fatalf("c = %+v, want ExpiresAt +8s and TTL 5s (the request's ttl)", c)
	}
	// A lease of another key takes none of k's slots (tokens are per key).
	l.acquire(t0+3*sec, acquireOp("db", "other"))

	// Full: denied until the earliest end (c, at +8s).
	r := l.ok(t0+4*sec, acquireOp("db", "k"))
	if r.Allowed || r.Held != 3 || r.Limit != 3 || r.RetryAfter != 4*time.Second || r.Lease != (lease.Lease{}) || r.DecidedAt != t0+4*sec {
		t.Fatalf("acquire on a full key = %+v, want denied, Held 3, Limit 3, RetryAfter 4s, no lease", r)
	}

	// Release frees a slot at once.
	r = l.ok(t0+4*sec, releaseOp("db", "k", b.Token))
	if !r.Allowed || r.Lease != b || r.Held != 2 || r.Duplicate {
		t.Fatalf("release b = %+v, want allowed, the released lease %+v, Held 2", r, b)
	}
	d := l.acquire(t0+4*sec, acquireOp("db", "k"))
	issued(t0+4*sec, "d", d)

	// Expiry by logged time: 1ns before c's end denied, at its end allowed.
	r = l.ok(t0+8*sec-1, acquireOp("db", "k"))
	if r.Allowed || r.RetryAfter != 1 || r.Held != 3 {
		t.Fatalf("acquire 1ns before the earliest end = %+v, want denied with RetryAfter 1ns", r)
	}
	if !l.holds(t0+8*sec-1, "db", "k", c.Token) {
		t.Fatal("c does not hold 1ns before its end")
	}
	e := l.acquire(t0+8*sec, acquireOp("db", "k"))
	issued(t0+8*sec, "e", e)
	if r := l.ok(t0+8*sec, checkOp("db", "k", c.Token)); r.Allowed || r.Held != 3 {
		t.Fatalf("check c at its end = %+v, want not held, Held 3 (a, d, e)", r)
	}

	// Reclaim: the last lease (e) ends at +18s; b's request ID at +17s.
	if l.f.SemaphoreCount() != 2 || l.f.DedupeLen() != 1 {
		t.Fatalf("%d semaphores, %d request IDs; want 2 and 1", l.f.SemaphoreCount(), l.f.DedupeLen())
	}
	l.expire(t0 + 18*sec - 1)
	if next, ok := l.f.NextExpiry(); l.f.SemaphoreCount() != 1 || l.f.DedupeLen() != 0 || !ok || next != e.ExpiresAt {
		t.Fatalf("at e's end - 1ns: %d semaphores, %d request IDs, next expiry %d,%v; want 1, 0, %d",
			l.f.SemaphoreCount(), l.f.DedupeLen(), next, ok, e.ExpiresAt)
	}
	l.expire(t0 + 18*sec)
	if next, ok := l.f.NextExpiry(); l.f.SemaphoreCount() != 0 || ok {
		t.Fatalf("after reclaiming: %d semaphores, next expiry %d,%v; want none", l.f.SemaphoreCount(), next, ok)
	}
	f := l.acquire(t0+18*sec, acquireOp("db", "k"))
	issued(t0+18*sec, "f after reclaim", f)
	if r := l.ok(t0+18*sec, checkOp("db", "k", f.Token)); !r.Allowed || r.Held != 1 || r.Lease != f {
		t.Fatalf("check f = %+v, want held alone", r)
	}
}

// TestLeaseTokensRunAheadOfTime takes several leases at one log time (the
// tokens run ahead of it), releases them and checks that the semaphore is
// kept until the log time passes its last token, so that a recreated one
// never reissues a token.
func TestLeaseTokensRunAheadOfTime(t *testing.T) {
	l := newTermFSM(t, concurrency("db", 4, time.Second))
	now := t0 + 5*sec
	var toks []int64
	for range 4 {
		toks = append(toks, l.acquire(now, acquireOp("db", "k")).Token)
	}
	for i := 1; i < len(toks); i++ {
		if toks[i] <= toks[i-1] {
			t.Fatalf("tokens %v not strictly increasing", toks)
		}
	}
	for _, tok := range toks {
		l.ok(now, releaseOp("db", "k", tok))
	}
	lastTok := toks[len(toks)-1]
	if lastTok < now+3 {
		t.Fatalf("tokens %v at one now %d, want now, now+1, …", toks, now)
	}
	if next, ok := l.f.NextExpiry(); !ok || next != lastTok+1 {
		t.Fatalf("next expiry %d,%v with every lease released; want the last token + 1 = %d", next, ok, lastTok+1)
	}
	l.expire(lastTok)
	if l.f.SemaphoreCount() != 1 {
		t.Fatalf("semaphore reclaimed at its last token %d: a recreated one could reissue it", lastTok)
	}
	l.expire(lastTok + 1)
	if l.f.SemaphoreCount() != 0 {
		t.Fatalf("%d semaphores after the last token + 1, want 0", l.f.SemaphoreCount())
	}
	if tok := l.acquire(lastTok+1, acquireOp("db", "k")).Token; tok <= lastTok {
		t.Fatalf("token %d after reclaim, want > %d", tok, lastTok)
	}
}

// TestLeaseRenew extends, shortens and re-TTLs a live lease.
func TestLeaseRenew(t *testing.T) {
	l := newTermFSM(t, concurrency("db", 2, 10*time.Second))
	a := l.acquire(t0, acquireOp("db", "k"))
	r := l.ok(t0+4*sec, renewOp("db", "k", a.Token))
	want := lease.Lease{Token: a.Token, AcquiredAt: t0, ExpiresAt: t0 + 14*sec, TTL: 10 * sec, Holder: svcHolder}
	if !r.Allowed || r.Lease != want || r.Held != 1 || r.Limit != 2 || r.DecidedAt != t0+4*sec {
		t.Fatalf("renew with ttl 0 = %+v, want allowed, lease %+v, Held 1", r, want)
	}
	r = l.ok(t0+5*sec, renewOp("db", "k", a.Token).withTTL(2*time.Second))
	want = lease.Lease{Token: a.Token, AcquiredAt: t0, ExpiresAt: t0 + 7*sec, TTL: 2 * sec, Holder: svcHolder}
	if !r.Allowed || r.Lease != want {
		t.Fatalf("renew with ttl 2s = %+v, want the lease shortened to %+v", r, want)
	}
	r = l.ok(t0+6*sec, renewOp("db", "k", a.Token))
	if r.Lease.ExpiresAt != t0+8*sec || r.Lease.TTL != 2*sec {
		t.Fatalf("renew with ttl 0 after a 2s renew = %+v, want the lease's new TTL (ends +8s)", r.Lease)
	}
	if !l.holds(t0+8*sec-1, "db", "k", a.Token) || l.holds(t0+8*sec, "db", "k", a.Token) {
		t.Fatal("the renewed lease does not end exactly at +8s")
	}
}

// TestLeaseStaleHolders refuses Renew and Release of released, expired,
// never issued and other keys' tokens with lease.ErrStale, changing nothing,
// and answers CheckFence false for them.
func TestLeaseStaleHolders(t *testing.T) {
	l := newTermFSM(t, concurrency("db", 3, 10*time.Second))
	keep := l.acquire(t0, acquireOp("db", "k")) // keeps k's semaphore alive
	rel := l.acquire(t0, acquireOp("db", "k"))
	short := l.acquire(t0+1*sec, acquireOp("db", "k").withTTL(2*time.Second))
	other := l.acquire(t0+1*sec, acquireOp("db", "other"))
	l.ok(t0+2*sec, releaseOp("db", "k", rel.Token))

	now := short.ExpiresAt // short has just expired
	cases := []struct {
		name  string
		key   string
		token int64
	}{
		{"released", "k", rel.Token},
		{"expired", "k", short.Token},
		{"never issued", "k", other.Token + 1000},
		{"another key's", "k", other.Token},
		{"zero", "k", 0},
		{"of a key never seen", "nobody", keep.Token},
	}
	for _, c := range cases {
		for _, op := range []leaseOp{
			renewOp("db", c.key, c.token),
			releaseOp("db", c.key, c.token),
			releaseOp("db", c.key, c.token).withID("svc", "stale-"+c.name),
			renewOp("db", c.key, c.token).withTTL(5*time.Second).withID("svc", "stale-renew-"+c.name),
		} {
			err, ok := l.unchanged(now, op).(error)
			if !ok || !errors.Is(err, lease.ErrStale) {
				t.Fatalf("%s token: %+v = %v, want lease.ErrStale", c.name, op, err)
			}
		}
		wantHeld := int64(1) // keep
		if c.key != "k" {
			wantHeld = 0
		}
		res := l.unchanged(now, checkOp("db", c.key, c.token))
		if r, ok := res.(*fsm.LeaseResult); !ok || r.Allowed || r.Lease != (lease.Lease{}) || r.Held != wantHeld {
			t.Fatalf("%s token: check = %+v, want not held, no lease, Held %d", c.name, res, wantHeld)
		}
	}
	// A stale Release with a request ID is not recorded: its retry is stale
	// again, and the request ID is still free for a real release.
	if err := l.err(now, releaseOp("db", "k", rel.Token).withID("svc", "r")); !errors.Is(err, lease.ErrStale) {
		t.Fatalf("stale release = %v, want ErrStale", err)
	}
	if err := l.err(now, releaseOp("db", "k", rel.Token).withID("svc", "r")); !errors.Is(err, lease.ErrStale) {
		t.Fatalf("retried stale release = %v, want ErrStale", err)
	}
	if r := l.ok(now, releaseOp("db", "k", keep.Token).withID("svc", "stale-released")); !r.Allowed || r.Duplicate {
		t.Fatalf("release under a request ID that only a stale release used = %+v, want allowed afresh", r)
	}
	if r := l.ok(now, checkOp("db", "other", other.Token)); !r.Allowed || r.Lease != other || r.Held != 1 {
		t.Fatalf("check other = %+v, want held with its lease", r)
	}
}

// TestLeaseRequestIDs answers a repeated Acquire, Renew or Release with its
// first answer, taking nothing again, and refuses a request ID reused for
// another operation.
func TestLeaseRequestIDs(t *testing.T) {
	l := newTermFSM(t, concurrency("db", 2, 10*time.Second), tokenBucket("api", 10, time.Second, 0, 0))
	acq := acquireOp("db", "k").withID("svc", "r1")
	first := l.ok(t0, acq)
	if !first.Allowed || first.Duplicate || first.Held != 1 {
		t.Fatalf("first acquire = %+v", first)
	}
	again := l.ok(t0+1*sec, acq)
	want := first
	want.Duplicate = true
	if again != want {
		t.Fatalf("repeated acquire = %+v, want the first answer marked duplicate %+v", again, want)
	}
	if r := l.ok(t0+1*sec, checkOp("db", "k", first.Lease.Token)); !r.Allowed || r.Held != 1 {
		t.Fatalf("after a repeated acquire: check = %+v, want one lease held", r)
	}
	// Another caller's same request ID is another request.
	b := l.acquire(t0+1*sec, acquireOp("db", "k").withID("other-svc", "r1"))

	// A denied Acquire is not recorded (it took nothing): its retry is
	// decided afresh, denied while the key is full, allowed once a slot is
	// free; only then is the answer recorded.
	denied := acquireOp("db", "k").withID("svc", "r-denied")
	if r := l.ok(t0+2*sec, denied); r.Allowed || r.Duplicate || r.RetryAfter != 8*time.Second {
		t.Fatalf("acquire on a full key = %+v, want denied for 8s", r)
	}
	if r := l.ok(t0+2*sec+1, denied); r.Allowed || r.Duplicate || r.DecidedAt != t0+2*sec+1 || r.RetryAfter != 8*time.Second-1 {
		t.Fatalf("retried denied acquire on a full key = %+v, want denied afresh", r)
	}
	l.ok(t0+2*sec+1, releaseOp("db", "k", b.Token).withID("other-svc", ""))
	got := l.ok(t0+3*sec, denied)
	if !got.Allowed || got.Duplicate || got.Held != 2 {
		t.Fatalf("retried denied acquire once a slot is free = %+v, want allowed afresh", got)
	}
	want = got
	want.Duplicate = true
	if r := l.ok(t0+3*sec, denied); r != want {
		t.Fatalf("retried allowed acquire = %+v, want the recorded %+v", r, want)
	}
	if r := l.ok(t0+3*sec, checkOp("db", "k", first.Lease.Token)); r.Held != 2 {
		t.Fatalf("Held %d after the retries, want 2", r.Held)
	}
	l.ok(t0+3*sec, releaseOp("db", "k", got.Lease.Token))

	// Renew: the retry does not extend again.
	ren := renewOp("db", "k", first.Lease.Token).withID("svc", "r-renew")
	r1 := l.ok(t0+4*sec, ren)
	r2 := l.ok(t0+6*sec, ren)
	if !r1.Allowed || r1.Lease.ExpiresAt != t0+14*sec || !r2.Duplicate || r2.Lease != r1.Lease {
		t.Fatalf("renew = %+v, retried = %+v; want the same lease ending +14s", r1, r2)
	}
	if r := l.ok(t0+6*sec, checkOp("db", "k", first.Lease.Token)); r.Lease.ExpiresAt != t0+14*sec {
		t.Fatalf("after a retried renew the lease ends at +%v, want +14s", time.Duration(r.Lease.ExpiresAt-t0))
	}

	// Release: the retry answers as the first, not ErrStale.
	rel := releaseOp("db", "k", first.Lease.Token).withID("svc", "r-release")
	r1 = l.ok(t0+7*sec, rel)
	res := l.do(t0+8*sec, rel)
	r2p, ok := res.(*fsm.LeaseResult)
	if !ok {
		t.Fatalf("retried release = %v, want the first answer", res)
	}
	want = r1
	want.Duplicate = true
	if !r1.Allowed || r1.Held != 0 || r1.Lease.Token != first.Lease.Token || *r2p != want {
		t.Fatalf("release = %+v, retried = %+v; want the retry to answer as the first", r1, *r2p)
	}
	// A Check carries no record: its request ID stays free.
	dd := l.f.DedupeLen()
	l.ok(t0+8*sec, checkOp("db", "k", first.Lease.Token).withID("svc", "r-check"))
	if l.f.DedupeLen() != dd {
		t.Fatalf("a check recorded its request ID (%d → %d entries)", dd, l.f.DedupeLen())
	}

	// Reuse for another kind, key, ttl or token, or across Admit and leases.
	reuses := []leaseOp{
		releaseOp("db", "k", first.Lease.Token).withID("svc", "r1"),
		acquireOp("db", "k2").withID("svc", "r1"),
		acquireOp("db", "k").withTTL(3*time.Second).withID("svc", "r1"),
		renewOp("db", "k", first.Lease.Token+1).withID("svc", "r-renew"),
		checkOp("db", "k", first.Lease.Token).withID("svc", "r1"), // a check is never recorded nor refused
	}
	for i, op := range reuses {
		res := l.unchanged(t0+8*sec, op)
		if op.kind == kCheck {
			if _, ok := res.(*fsm.LeaseResult); !ok {
				t.Fatalf("check under a used request ID = %v, want answered", res)
			}
			continue
		}
		err, _ := res.(error)
		if !errors.Is(err, fsm.ErrRequestIDReused) || !errors.Is(err, admission.ErrInvalidRequest) || fieldOf(err) != "request_id" {
			t.Fatalf("reuse %d %+v = %v, want ErrRequestIDReused on field request_id", i, op, res)
		}
	}
	l.apply(admitIDEnv(t0+8*sec, "svc", "r-admit", "api", "k", 1))
	if err := l.err(t0+8*sec, acquireOp("db", "k").withID("svc", "r-admit")); !errors.Is(err, fsm.ErrRequestIDReused) {
		t.Fatalf("acquire under an Admit's request ID = %v, want ErrRequestIDReused", err)
	}
	if res := l.apply(admitIDEnv(t0+8*sec, "svc", "r1", "api", "k", 1)); !errors.Is(asErr(res), fsm.ErrRequestIDReused) {
		t.Fatalf("Admit under an Acquire's request ID = %v, want ErrRequestIDReused", res)
	}
}

func asErr(res any) error { err, _ := res.(error); return err }

// TestLeaseRequestErrors refuses lease operations on policies of other
// algorithms, unknown policies, bad keys and ttls, and Admit and Peek on a
// concurrency policy, changing nothing.
func TestLeaseRequestErrors(t *testing.T) {
	l := newTermFSM(t, concurrency("db", 2, 10*time.Second), tokenBucket("api", 10, time.Second, 0, 0))
	a := l.acquire(t0, acquireOp("db", "k"))
	now := t0 + sec
	field := func(what string, res any, want string, sentinel error) {
		t.Helper()
		err, ok := res.(error)
		var fe *admission.FieldError
		if !ok || !errors.As(err, &fe) || fe.Field != want || !errors.Is(err, sentinel) {
			t.Fatalf("%s = %v, want a FieldError on %q wrapping %v", what, res, want, sentinel)
		}
	}
	for _, op := range []leaseOp{
		acquireOp("api", "k"), renewOp("api", "k", a.Token), releaseOp("api", "k", a.Token), checkOp("api", "k", a.Token),
	} {
		field("lease op on a token-bucket policy", l.unchanged(now, op), "policy", admission.ErrInvalidRequest)
	}
	field("Admit on a concurrency policy", l.apply(admitEnv(now, "db", "k", 1)), "policy", admission.ErrInvalidRequest)
	field("Peek on a concurrency policy", l.apply(peekEnv(now, "db", "k")), "policy", admission.ErrInvalidRequest)
	for _, op := range []leaseOp{acquireOp("nope", "k"), renewOp("nope", "k", a.Token), checkOp("nope", "k", a.Token)} {
		if err, _ := l.unchanged(now, op).(error); !errors.Is(err, fsm.ErrUnknownPolicy) {
			t.Fatalf("%+v = %v, want ErrUnknownPolicy", op, err)
		}
	}
	field("empty key", l.unchanged(now, acquireOp("db", "")), "key", admission.ErrInvalidRequest)
	for _, ttl := range []time.Duration{time.Second - 1, -time.Second, admission.MaxLeaseTTL + 1} {
		field("acquire ttl "+ttl.String(), l.unchanged(now, acquireOp("db", "k").withTTL(ttl)), "ttl", admission.ErrInvalidRequest)
		field("renew ttl "+ttl.String(), l.unchanged(now, renewOp("db", "k", a.Token).withTTL(ttl)), "ttl", admission.ErrInvalidRequest)
	}
	// The bounds themselves are accepted.
	if r := l.ok(now, renewOp("db", "k", a.Token).withTTL(admission.MaxLeaseTTL)); !r.Allowed || r.Lease.ExpiresAt != now+int64(admission.MaxLeaseTTL) {
		t.Fatalf("renew for MaxLeaseTTL = %+v", r)
	}
	if r := l.ok(now, acquireOp("db", "k").withTTL(admission.MinLeaseTTL)); !r.Allowed || r.Lease.TTL != int64(admission.MinLeaseTTL) {
		t.Fatalf("acquire for MinLeaseTTL = %+v", r)
	}
}

// TestLeaseGroupFull: a new key's semaphore beyond Options.MaxBuckets is
// refused with ErrGroupFull, taking nothing; existing keys still acquire,
// and once a semaphore is reclaimable the new key gets its place.
func TestLeaseGroupFull(t *testing.T) {
	l := &termFSM{tb: t, f: fsm.New(fsm.Options{MaxBuckets: 2}), term: 1}
	l.apply(putPoliciesEnv(t0, concurrency("db", 2, 10*time.Second)))
	a := l.acquire(t0, acquireOp("db", "a").withTTL(time.Second))
	l.acquire(t0, acquireOp("db", "b"))
	if err := asErr(l.unchanged(t0, acquireOp("db", "c"))); !errors.Is(err, fsm.ErrGroupFull) {
		t.Fatalf("acquire on a third key = %v, want ErrGroupFull", err)
	}
	l.acquire(t0, acquireOp("db", "b"))
	if l.f.SemaphoreCount() != 2 {
		t.Fatalf("%d semaphores, want 2", l.f.SemaphoreCount())
	}
	c := l.acquire(a.ExpiresAt, acquireOp("db", "c"))
	if l.f.SemaphoreCount() != 2 || l.holds(a.ExpiresAt, "db", "a", a.Token) || !l.holds(a.ExpiresAt, "db", "c", c.Token) {
		t.Fatal("the expired key's place did not go to the new key")
	}
}

// TestLeaseUnknownKindPanics: a lease operation of a kind this binary does
// not know stops the node rather than diverging.
func TestLeaseUnknownKindPanics(t *testing.T) {
	for _, kind := range []raftcmdv1.LeaseOp_Kind{raftcmdv1.LeaseOp_KIND_UNSPECIFIED, 99} {
		l := newTermFSM(t, concurrency("db", 2, 10*time.Second))
		op := acquireOp("db", "k")
		op.kind = kind
		checkFSMPanic(t, expectPanic(t, func() { l.do(t0, op) }))
	}
}
