package jepsen

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// leaseCall is one attempt of a lease call over [start, end] ms of wall
// clock; an answered one is decided at log time linLog+decided ms and, for
// acquire/renew/check, expires at linLog+expires ms.
type leaseCall struct {
	kind             OpKind
	req              string
	client           int
	start, end       int
	out              Outcome
	token            int64
	decided, expires int
	stale, duplicate bool
	key              string // default "k"
	byLeaseIDOnly    bool   // recorded with lease ID k/<token> only: no key, no token
}

func (c leaseCall) op() Op {
	key := c.key
	if key == "" {
		key = "k"
	}
	op := Op{Kind: c.kind, RequestID: c.req, Caller: fmt.Sprintf("c%d", c.client), Client: c.client, Key: key, Node: "n1",
		Start:   linWall.Add(time.Duration(c.start) * time.Millisecond),
		End:     linWall.Add(time.Duration(c.end) * time.Millisecond),
		Outcome: c.out, Token: c.token, LeaseID: fmt.Sprintf("%s/%d", key, c.token), Stale: c.stale, Duplicate: c.duplicate}
	if c.byLeaseIDOnly {
		op.Key, op.Token, op.LeaseID = "", 0, fmt.Sprintf("k/%d", c.token)
	}
	if c.out.OK() && !c.stale {
		op.DecidedAt = linLog + int64(c.decided)*int64(time.Millisecond)
		if c.out == OutcomeAllowed && c.kind != KindRelease && c.expires != 0 {
			op.ExpiresAt = linLog + int64(c.expires)*int64(time.Millisecond)
		}
	}
	if !c.out.OK() {
		op.Error = "deadline exceeded"
	}
	return op
}

func leaseOps(calls ...leaseCall) []Op {
	ops := make([]Op, len(calls))
	for i, c := range calls {
		ops[i] = c.op()
	}
	return ops
}

func grantAt(req string, start, end int, token int64, decided, expires int) leaseCall {
	return leaseCall{kind: KindAcquire, req: req, start: start, end: end, out: OutcomeAllowed, token: token, decided: decided, expires: expires}
}

func leaseAt(kind OpKind, req string, start, end int, out Outcome, token int64, decided, expires int) leaseCall {
	return leaseCall{kind: kind, req: req, start: start, end: end, out: out, token: token, decided: decided, expires: expires}
}

// wantLeaseViolation checks that exactly the named checks are violated.
func wantLeaseViolation(t *testing.T, v Verdict, checks ...string) {
	t.Helper()
	if (len(checks) == 0) != v.OK {
		t.Fatalf("OK=%v, want violations of %v: %+v", v.OK, checks, v)
	}
	for _, s := range v.Violations {
		found := false
		for _, c := range checks {
			found = found || strings.HasPrefix(s, c+": ")
		}
		if !found {
			t.Errorf("unexpected violation %q (want only %v)", s, checks)
		}
	}
	for _, c := range checks {
		found := false
		for _, s := range v.Violations {
			found = found || strings.HasPrefix(s, c+": ")
		}
		if !found {
			t.Errorf("no %s violation in %q", c, v.Violations)
		}
	}
}

// goodLeases is a correct history of limit 2 on key k.
func goodLeases() []leaseCall {
	return []leaseCall{
		grantAt("a1", 0, 10, 100, 5, 1005),
		{kind: KindAcquire, req: "a1", start: 20, end: 30, out: OutcomeAllowed, token: 100, decided: 5, expires: 1005, duplicate: true},
		grantAt("a2", 0, 12, 101, 6, 1006),
		leaseAt(KindAcquire, "a3", 15, 20, OutcomeDenied, 0, 16, 0), // full
		leaseAt(KindRenew, "r2", 40, 50, OutcomeAllowed, 101, 45, 1045),
		leaseAt(KindCheck, "", 55, 60, OutcomeAllowed, 100, 57, 1005),
		leaseAt(KindRelease, "rel1", 70, 80, OutcomeAllowed, 100, 75, 0),
		{kind: KindRelease, req: "rel1", start: 85, end: 90, out: OutcomeAllowed, token: 100, decided: 75, duplicate: true},
		grantAt("a4", 90, 95, 102, 92, 1092), // the freed slot
		// Stale probes after the release: refused.
		{kind: KindRenew, req: "late", start: 100, end: 105, out: OutcomeDenied, token: 100, stale: true},
		leaseAt(KindCheck, "", 110, 115, OutcomeDenied, 100, 112, 0),
		// A renew that went unanswered: a2 is certainly held only until 45.
		leaseAt(KindRenew, "r3", 120, 130, OutcomeUnknown, 101, 0, 0),
		// Another key is independent.
		{kind: KindAcquire, req: "b1", start: 0, end: 10, out: OutcomeAllowed, token: 100, decided: 5, expires: 1005, key: "other"},
	}
}

func TestLeasesPass(t *testing.T) {
	v := CheckLeases(leaseOps(goodLeases()...), 2)
	wantLeaseViolation(t, v)
	for _, want := range []string{"2 keys", "4 granted acquires (1 released)", "at most 2 certainly held at once (limit 2)"} {
		if !strings.Contains(v.Summary, want) {
			t.Errorf("summary %q lacks %q", v.Summary, want)
		}
	}
}

func TestLeasesDuplicateToken(t *testing.T) {
	calls := append(goodLeases(), grantAt("a5", 200, 210, 102, 205, 1205))
	wantLeaseViolation(t, CheckLeases(leaseOps(calls...), 5), "unique-tokens")

	// A retry of one request must get the same lease.
	calls = goodLeases()
	calls[1].token = 99
	wantLeaseViolation(t, CheckLeases(leaseOps(calls...), 5), "unique-tokens")
}

func TestLeasesTokenDecreaseInRealTime(t *testing.T) {
	calls := append(goodLeases(), grantAt("a5", 200, 210, 90, 205, 1205)) // after a4 (token 102) in real and log time
	wantLeaseViolation(t, CheckLeases(leaseOps(calls...), 5), "increasing-tokens")

	// Concurrent acquires may be answered in either order, if the log agrees.
	calls = append(goodLeases(),
		grantAt("a5", 200, 230, 104, 220, 1220),
		grantAt("a6", 205, 215, 103, 210, 1210))
	wantLeaseViolation(t, CheckLeases(leaseOps(calls...), 5))
}

func TestLeasesOverLimit(t *testing.T) {
	x1, x2 := grantAt("x1", 0, 10, 10, 5, 1005), grantAt("x2", 0, 10, 11, 6, 1006)
	x3 := grantAt("x3", 45, 55, 12, 50, 1050) // a third holder while x1 and x2 live
	v := CheckLeases(leaseOps(x1, x2, x3), 2)
	wantLeaseViolation(t, v, "at-most-limit-holders")
	if !strings.Contains(v.Violations[0], "3 leases certainly held") {
		t.Fatalf("violation %q", v.Violations[0])
	}
	if v := CheckLeases(leaseOps(x1, x2, x3), 3); !v.OK {
		t.Fatalf("limit 3: %+v", v)
	}

	// Released (acknowledged) before x3 was acquired: fine.
	rel := leaseAt(KindRelease, "rel", 30, 40, OutcomeAllowed, 10, 35, 0)
	wantLeaseViolation(t, CheckLeases(leaseOps(x1, x2, x3, rel), 2))

	// A release or a renew (which may shorten it) sent but never answered:
	// x1 is certainly held only while answers showed it held.
	for _, kind := range []OpKind{KindRelease, KindRenew} {
		unsure := leaseAt(kind, "unsure", 30, 40, OutcomeUnknown, 10, 0, 0)
		wantLeaseViolation(t, CheckLeases(leaseOps(x1, x2, x3, unsure), 2))
		held := leaseAt(KindCheck, "", 55, 65, OutcomeAllowed, 10, 60, 1005) // x1 still held at 60, x3 since 50
		wantLeaseViolation(t, CheckLeases(leaseOps(x1, x2, x3, unsure, held), 2), "at-most-limit-holders")
	}

	// Expired before x3: x1 lived until 40 only.
	short := grantAt("x1", 0, 10, 10, 5, 40)
	wantLeaseViolation(t, CheckLeases(leaseOps(short, x2, x3), 2))
	// …unless a renew extended it.
	renew := leaseAt(KindRenew, "renew", 20, 30, OutcomeAllowed, 10, 25, 1025)
	wantLeaseViolation(t, CheckLeases(leaseOps(short, x2, x3, renew), 2), "at-most-limit-holders")
}

func TestLeasesStaleRenewAllowedAfterRelease(t *testing.T) {
	calls := goodLeases()
	calls[9] = leaseAt(KindRenew, "late", 100, 105, OutcomeAllowed, 100, 102, 1102)
	wantLeaseViolation(t, CheckLeases(leaseOps(calls...), 2), "stale-tokens-rejected")

	// Sent before the release was acknowledged, but decided after it.
	calls = goodLeases()
	calls = append(calls, leaseAt(KindRenew, "racing", 72, 100, OutcomeAllowed, 100, 76, 1076))
	wantLeaseViolation(t, CheckLeases(leaseOps(calls...), 2), "stale-tokens-rejected")

	// A second release request for a released token.
	calls = append(goodLeases(), leaseAt(KindRelease, "again", 100, 105, OutcomeAllowed, 100, 102, 0))
	wantLeaseViolation(t, CheckLeases(leaseOps(calls...), 2), "stale-tokens-rejected")
}

func TestLeasesLiveTokenRefused(t *testing.T) {
	calls := append(goodLeases(), leaseAt(KindCheck, "", 28, 32, OutcomeDenied, 101, 30, 0)) // a2 is certainly held over [6, 45)
	wantLeaseViolation(t, CheckLeases(leaseOps(calls...), 2), "live-tokens-accepted")
}

func TestLeasesResolveByLeaseID(t *testing.T) {
	// A renew recorded without key and token still finds its lease by ID.
	calls := goodLeases()
	calls[9] = leaseCall{kind: KindRenew, req: "late", start: 100, end: 105, out: OutcomeAllowed, token: 100, decided: 102, expires: 1102,
		byLeaseIDOnly: true}
	wantLeaseViolation(t, CheckLeases(leaseOps(calls...), 5), "stale-tokens-rejected")
}
