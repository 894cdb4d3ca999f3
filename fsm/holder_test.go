package fsm_test

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/lease"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// A reservation belongs to the caller that reserved it, with the secret its
// ID carries: a Commit by another caller, with another secret, of a
// malformed ID, or of an ID made as they were before they carried a secret
// is refused exactly as an unknown reservation and changes nothing. The
// holder and secret survive a snapshot: the restored FSM refuses the same
// and lets the holder commit.
func TestReservationBelongsToItsHolder(t *testing.T) {
	quota := admission.Policy{Name: "tokens", Algorithm: admission.AlgorithmQuota, Limit: 100, MaxCost: 50, Calendar: admission.CalendarYear}
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, quota)
	r := a.reserve(t, reserveEnv(t0+1, "tokens", "k", 30, time.Hour, "res-1"))
	if !r.Allowed {
		t.Fatalf("reserve: %+v", r)
	}
	policy, key, name, secret, ok := fsm.ParseReservationID(r.ReservationID)
	if !ok || policy != "tokens" || key != "k" || secret != [16]byte(testSecret) {
		t.Fatalf("ID %q parses to %q %q %q %x %v", r.ReservationID, policy, key, name, secret, ok)
	}
	other := secret
	other[15] ^= 1
	forged := []struct {
		what, id, caller string
	}{
		{"another caller with the real ID", r.ReservationID, "gw"},
		{"the holder with another secret", fsm.ReservationID("tokens", "k", name, other), "llm"},
		{"the holder with no secret", fsm.ReservationID("tokens", "k", name, [16]byte{}), "llm"},
		{"another key's name", fsm.ReservationID("tokens", "k2", name, secret), "llm"},
		{"an ID as it was made before", base64.RawURLEncoding.EncodeToString([]byte("tokens\x00k\x00" + name)), "llm"},
		{"a lease ID", fsm.LeaseID("tokens", "k", 2, secret), "llm"},
	}
	try := func(a *applier, now int64) {
		t.Helper()
		a.expire(now) // the snapshot holds the log time: take it at now
		before := snapshotBytes(t, a.f)
		for _, f := range forged {
			res := a.apply(&raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Commit{Commit: &raftcmdv1.Commit{
				ReservationId: f.id, Actual: 0, Caller: f.caller}}})
			if err, _ := res.(error); !errors.Is(err, fsm.ErrNoReservation) {
				t.Fatalf("commit by %s: %v, want ErrNoReservation", f.what, res)
			}
		}
		if a.f.ReservationCount() != 1 || string(snapshotBytes(t, a.f)) != string(before) {
			t.Fatal("a refused commit changed the state")
		}
	}
	try(a, t0+2)

	// A retry of the Reserve, whose handler drew another secret, gets the
	// first answer: the first ID.
	retry := reserveEnv(t0+3, "tokens", "k", 30, time.Hour, "res-1")
	retry.GetReserve().Secret = []byte("another secret!!")
	if again := a.reserve(t, retry); !again.Duplicate || again.ReservationID != r.ReservationID {
		t.Fatalf("retried reserve: %+v, want the first ID", again)
	}

	b := newApplier(t, fsm.Options{})
	restoreFrom(t, b.f, snapshotBytes(t, a.f))
	b.index = a.index
	try(b, t0+4)
	c := b.reserve(t, commitEnv(t0+5, r.ReservationID, 10, ""))
	if c.Charged != 10 || c.Released != 20 {
		t.Fatalf("the holder's commit after a restore: %+v", c)
	}
	wantErr(t, "second commit", b.apply(commitEnv(t0+6, r.ReservationID, 10, "")), fsm.ErrNoReservation)

	// A Reserve without a secret of the leader's is refused.
	for _, s := range [][]byte{nil, make([]byte, 16), []byte("short")} {
		env := reserveEnv(t0+7, "tokens", "k", 1, time.Hour, "")
		env.GetReserve().Secret = s
		if fe := new(admission.FieldError); !errors.As(asErr(b.apply(env)), &fe) || fe.Field != "secret" {
			t.Fatalf("reserve with secret %x: want refused naming secret", s)
		}
	}
}

// A lease acts only for its holder: the caller that acquired it with its
// secret. Another caller, another secret or none gets what a token never
// issued gets, and nothing changes; an acquire without a secret is
// refused; a retried acquire gets the first lease, secret included; the
// holder survives a snapshot.
func TestLeaseBelongsToItsHolder(t *testing.T) {
	l := newTermFSM(t, concurrency("db", 1, 10*time.Second))
	acq := acquireOp("db", "k").withID("gw2", "a-1")
	first := l.acquire(t0, acq)
	if first.Holder.Caller != "gw2" || first.Holder.Secret != [16]byte(testSecret) {
		t.Fatalf("lease holder %+v", first.Holder)
	}
	retry := acq.env(t0 + 1)
	retry.GetLease().Secret, retry.GetLease().TokenJitter = []byte("another secret!!"), 12345
	if r, ok := l.apply(retry).(*fsm.LeaseResult); !ok || !r.Duplicate || r.Lease != first {
		t.Fatalf("retried acquire: %+v, want the first lease", r)
	}
	others := []leaseOp{
		renewOp("db", "k", first.Token).withID("gw", ""),
		releaseOp("db", "k", first.Token).withID("gw", "rel"),
		checkOp("db", "k", first.Token).withID("gw", ""),
		{kind: kRenew, policy: "db", key: "k", token: first.Token, caller: "gw2", badSecret: true},
		{kind: kRelease, policy: "db", key: "k", token: first.Token, caller: "gw2", badSecret: true},
		{kind: kCheck, policy: "db", key: "k", token: first.Token, caller: "gw2", badSecret: true},
	}
	try := func(l *termFSM, now int64) {
		t.Helper()
		for _, op := range others {
			res := l.unchanged(now, op)
			if r, ok := res.(*fsm.LeaseResult); ok && op.kind == kCheck && !r.Allowed && r.Lease == (lease.Lease{}) && r.Held == 1 {
				continue
			}
			if !errors.Is(asErr(res), lease.ErrStale) {
				t.Fatalf("%+v = %v, want refused as stale", op, res)
			}
		}
		if r := l.ok(now, checkOp("db", "k", first.Token).withID("gw2", "")); !r.Allowed || r.Lease != first {
			t.Fatalf("the holder's check: %+v", r)
		}
	}
	try(l, t0+2)
	noSecret := acquireOp("db", "k2").env(t0 + 3)
	noSecret.GetLease().Secret = nil
	if fe := new(admission.FieldError); !errors.As(asErr(l.apply(noSecret)), &fe) || fe.Field != "secret" {
		t.Fatal("an acquire without a secret is not refused naming secret")
	}

	r := newTermFSM(t)
	restoreFrom(t, r.f, snapshotBytes(t, l.f))
	r.index, r.term = l.index, l.term
	try(r, t0+4)
	if res := r.ok(t0+5, releaseOp("db", "k", first.Token).withID("gw2", "")); !res.Allowed {
		t.Fatalf("the holder's release after a restore: %+v", res)
	}
}

// The ID codec is strict: what LeaseID and ReservationID make parses back,
// anything else (another kind, lengths out of bounds, bytes left over, an
// unparsable or non-canonical token) does not.
func TestHoldIDCodec(t *testing.T) {
	s := [16]byte{9, 8, 7}
	key := "k\x00with a nul, and ünïcode"
	id := fsm.LeaseID("db", key, 42, s)
	if p, k, tok, sec, ok := fsm.ParseLeaseID(id); !ok || p != "db" || k != key || tok != 42 || sec != s {
		t.Fatalf("ParseLeaseID(LeaseID) = %q %q %d %x %v", p, k, tok, sec, ok)
	}
	rid := fsm.ReservationID("q", key, "7@3", s)
	if p, k, n, sec, ok := fsm.ParseReservationID(rid); !ok || p != "q" || k != key || n != "7@3" || sec != s {
		t.Fatalf("ParseReservationID(ReservationID) = %q %q %q %x %v", p, k, n, sec, ok)
	}
	if fsm.ReservationKey(rid) != key || fsm.ReservationPolicy(rid) != "q" {
		t.Fatal("ReservationKey/ReservationPolicy")
	}
	raw, _ := base64.RawURLEncoding.DecodeString(id)
	enc := base64.RawURLEncoding.EncodeToString
	for what, bad := range map[string]string{
		"a reservation ID":   rid,
		"empty":              "",
		"not base64":         "!!",
		"a byte more":        enc(append(append([]byte(nil), raw...), 0)),
		"a byte less":        enc(raw[:len(raw)-1]),
		"token 0":            fsm.LeaseID("db", "k", 0, s),
		"token not in canon": enc(append([]byte{'L', 2, 'd', 'b', 1, 'k', 2, '0', '7'}, s[:]...)),
		"empty policy":       enc(append([]byte{'L', 0, 1, 'k', 1, '7'}, s[:]...)),
		"policy too long":    enc(append([]byte{'L', 0xff, 0x7f}, s[:]...)),
	} {
		if _, _, _, _, ok := fsm.ParseLeaseID(bad); ok {
			t.Errorf("%s parses as a lease ID", what)
		}
	}
	if _, _, _, _, ok := fsm.ParseReservationID(id); ok {
		t.Error("a lease ID parses as a reservation ID")
	}
}
