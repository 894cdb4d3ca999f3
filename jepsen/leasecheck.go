package jepsen

import (
	"fmt"
	"sort"
	"strings"
)

// CheckLeases checks a history of concurrency-lease calls (Kind acquire,
// renew, release, check) against limit slots per key:
//
//  1. Unique tokens: granted acquires of distinct request IDs never share a
//     fencing token (or a lease ID) of a key, and every granted answer to
//     one request ID names the same lease and token.
//  2. Increasing tokens: if granted acquire A was answered before granted
//     acquire B was first sent (client wall clock), token(A) < token(B);
//     likewise if A was decided at an earlier log time than B.
//  3. At most limit holders: per key, the intervals over which leases are
//     certainly held (see leaseHeld) never overlap more than limit deep at
//     any log time.
//  4. Stale tokens rejected: a renew, release or check first sent after the
//     lease's release was acknowledged is not answered allowed/held; no
//     renew or held check is decided at a log time after that release; and
//     a lease is released by one request ID at most.
//  5. Live tokens accepted: a refusal or not-held answer carrying a log
//     time is not decided inside the lease's certainly-held interval.
//
// Unanswered calls (fail or unknown) are treated as maybe applied: they
// only ever shorten what is known to be held, so they never cause a
// violation by themselves.
func CheckLeases(ops []Op, limit int64) Verdict {
	c := &leaseChecker{v: Verdict{Checker: "leases", OK: true}, counts: map[string]int{}}
	c.run(ops, limit)
	return c.v
}

// heldLease is one granted acquire and what the history shows of its life.
type heldLease struct {
	key     string
	token   int64
	id      string
	acquire *mergedReq
	call    int64 // acquire first sent (wall clock)
	ret     int64 // acquire first answered (wall clock)
	at      int64 // acquire DecidedAt (log time)

	release      *mergedReq // first acknowledged release
	heldAt       int64      // latest log time at which an answer showed it live
	heldExpires  int64      // the ExpiresAt in that answer (the smallest, if several)
	unsure       bool       // a renew or release of it went unanswered
	end          int64      // end of the certainly-held interval [at, end)
	others       []*mergedReq
	releaseCount int
}

type leaseChecker struct {
	v      Verdict
	counts map[string]int // violations per check, for capping the list
}

const maxViolationsPerCheck = 20

func (c *leaseChecker) violate(check, format string, args ...any) {
	c.v.OK = false
	c.counts[check]++
	if c.counts[check] <= maxViolationsPerCheck {
		c.v.Violations = append(c.v.Violations, check+": "+fmt.Sprintf(format, args...))
	}
}

func isLeaseOp(op Op) bool {
	switch op.Kind {
	case KindAcquire, KindRenew, KindRelease, KindCheck:
		return true
	}
	return false
}

func (c *leaseChecker) run(ops []Op, limit int64) {
	reqs := mergeAttempts(ops, isLeaseOp)
	byToken := map[string]map[int64]*heldLease{} // key → token → lease
	byID := map[string]*heldLease{}              // lease ID → lease
	var leases []*heldLease
	counts := map[OpKind]int{}
	for _, r := range reqs {
		counts[r.attempts[0].Kind]++
		if r.attempts[0].Kind != KindAcquire || r.answer == nil || r.answer.Outcome != OutcomeAllowed {
			continue
		}
		a := r.answer
		for _, o := range r.attempts {
			if o.Outcome == OutcomeAllowed && (o.Token != a.Token || o.LeaseID != a.LeaseID) {
				c.violate("unique-tokens", "acquire %s on key %q: op %d answered lease %s token %d, but the first answer (op %d) was lease %s token %d",
					r.name, r.key, o.ID, o.LeaseID, o.Token, a.ID, a.LeaseID, a.Token)
			}
		}
		l := &heldLease{key: r.key, token: a.Token, id: a.LeaseID, acquire: r, call: r.call, ret: r.ret(), at: a.DecidedAt,
			heldAt: a.DecidedAt, heldExpires: a.ExpiresAt}
		if byToken[l.key] == nil {
			byToken[l.key] = map[int64]*heldLease{}
		}
		if prev := byToken[l.key][l.token]; prev != nil {
			c.violate("unique-tokens", "key %q: acquires %s and %s were both granted token %d", l.key, prev.acquire.name, r.name, l.token)
			continue
		}
		if prev := byID[l.id]; l.id != "" && prev != nil {
			c.violate("unique-tokens", "acquires %s and %s were both granted lease %s", prev.acquire.name, r.name, l.id)
			continue
		}
		byToken[l.key][l.token] = l
		if l.id != "" {
			byID[l.id] = l
		}
		leases = append(leases, l)
	}

	// Attach renews, releases and checks to their lease.
	orphans := 0
	for _, r := range reqs {
		first := r.attempts[0]
		if first.Kind == KindAcquire {
			continue
		}
		l := byToken[first.Key][first.Token]
		if l == nil {
			l = byID[first.LeaseID]
		}
		if l == nil {
			orphans++
			continue
		}
		l.others = append(l.others, r)
		if r.answer == nil {
			if first.Kind != KindCheck {
				l.unsure = true // a renew may have shortened it, a release ended it
			}
			continue
		}
		a := r.answer
		if a.Outcome != OutcomeAllowed {
			continue
		}
		switch first.Kind {
		case KindRelease:
			l.releaseCount++
			if l.release == nil || a.DecidedAt < l.release.answer.DecidedAt {
				l.release = r
			}
		case KindRenew, KindCheck:
			switch {
			case a.DecidedAt > l.heldAt:
				l.heldAt, l.heldExpires = a.DecidedAt, a.ExpiresAt
			case a.DecidedAt == l.heldAt && a.ExpiresAt < l.heldExpires:
				l.heldExpires = a.ExpiresAt
			}
		}
	}

	c.checkIncreasing(leases)
	released, maxHeld := 0, int64(0)
	for _, l := range leases {
		l.end = leaseHeld(l)
		if l.release != nil {
			released++
		}
		c.checkStale(l)
	}
	for _, key := range sortedKeys(byToken) {
		var ls []*heldLease
		for _, l := range byToken[key] {
			ls = append(ls, l)
		}
		maxHeld = max(maxHeld, c.checkHolders(key, ls, limit))
	}
	for _, check := range []string{"unique-tokens", "increasing-tokens", "at-most-limit-holders", "stale-tokens-rejected", "live-tokens-accepted"} {
		if n := c.counts[check]; n > maxViolationsPerCheck {
			c.v.Violations = append(c.v.Violations, fmt.Sprintf("%s: … and %d more", check, n-maxViolationsPerCheck))
		}
	}
	c.v.Summary = fmt.Sprintf("%d keys, %d granted acquires (%d released), %d acquire / %d renew / %d check / %d release requests, "+
		"at most %d certainly held at once (limit %d)", len(byToken), len(leases), released,
		counts[KindAcquire], counts[KindRenew], counts[KindCheck], counts[KindRelease], maxHeld, limit)
	if orphans > 0 {
		c.v.Summary += fmt.Sprintf("; %d calls on leases never seen granted", orphans)
	}
}

// leaseHeld returns the end of the log-time interval [l.at, end) over
// which l was certainly held.
//
// Soundness: a lease is live at log time now iff now < its ExpiresAt. Only
// a renew (which sets ExpiresAt to now+ttl, possibly shortening it) or a
// release changes that, and both require the lease live; a leader change
// only moves the ExpiresAt of live leases later (lease.Shift), so a lease
// may outlive its TTL in wall-clock time but never ends before the expiry
// it was last given, and once not live it never becomes live again. Hence:
//   - an acknowledged release decided at r: live on [at, r] (the release
//     found it live) and not after r; [at, r) is exact;
//   - else, if a renew or release of it went unanswered, it may have been
//     shortened or ended at any later log time: it was certainly live at
//     every log time an answer showed it live, so [at, latest such) holds;
//   - else its expiry is the one in the answer decided last (acquire, renew
//     or held check), only ever moved later by leader changes: [at, that).
//
// Half-open intervals keep ties safe: an acquire decided at the very log
// time of another lease's release or expiry does not overlap it.
func leaseHeld(l *heldLease) int64 {
	switch {
	case l.release != nil:
		return l.release.answer.DecidedAt
	case l.unsure || l.heldExpires == 0:
		return l.heldAt
	default:
		return l.heldExpires
	}
}

// checkIncreasing checks that tokens increase per key in real-time order
// and in log order.
func (c *leaseChecker) checkIncreasing(leases []*heldLease) {
	byKey := map[string][]*heldLease{}
	for _, l := range leases {
		byKey[l.key] = append(byKey[l.key], l)
	}
	for _, key := range sortedKeys(byKey) {
		ls := byKey[key]
		// Real time: sweep acquires by first send, keeping the one with the
		// greatest token among those answered strictly before.
		byRet := append([]*heldLease(nil), ls...)
		sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
		byCall := append([]*heldLease(nil), ls...)
		sort.Slice(byCall, func(i, j int) bool { return byCall[i].call < byCall[j].call })
		var best *heldLease
		i := 0
		for _, b := range byCall {
			for ; i < len(byRet) && byRet[i].ret < b.call; i++ {
				if best == nil || byRet[i].token > best.token {
					best = byRet[i]
				}
			}
			if best != nil && best.token >= b.token {
				c.violate("increasing-tokens", "key %q: acquire %s got token %d at %s, before acquire %s was sent at %s, which got token %d",
					key, best.acquire.name, best.token, fmtWall(best.ret), b.acquire.name, fmtWall(b.call), b.token)
			}
		}
		// Log order: tokens strictly increase along the log.
		byAt := append([]*heldLease(nil), ls...)
		sort.Slice(byAt, func(i, j int) bool { return byAt[i].at < byAt[j].at })
		best = nil
		i = 0
		for _, b := range byAt {
			for ; i < len(byAt) && byAt[i].at < b.at; i++ {
				if best == nil || byAt[i].token > best.token {
					best = byAt[i]
				}
			}
			if best != nil && best.token >= b.token {
				c.violate("increasing-tokens", "key %q: acquire %s decided at %s got token %d, not above token %d of acquire %s decided earlier at %s",
					key, b.acquire.name, fmtNanos(b.at), b.token, best.token, best.acquire.name, fmtNanos(best.at))
			}
		}
	}
}

// checkHolders sweeps one key's certainly-held intervals and returns the
// greatest number held at once.
func (c *leaseChecker) checkHolders(key string, ls []*heldLease, limit int64) int64 {
	type event struct {
		at    int64
		delta int
		l     *heldLease
	}
	var evs []event
	for _, l := range ls {
		if l.end > l.at {
			evs = append(evs, event{l.at, +1, l}, event{l.end, -1, l})
		}
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return evs[i].delta < evs[j].delta // ends before starts
	})
	live := map[*heldLease]bool{}
	over, most := false, int64(0)
	for _, e := range evs {
		if e.delta < 0 {
			delete(live, e.l)
			over = over && int64(len(live)) > limit
			continue
		}
		live[e.l] = true
		n := int64(len(live))
		most = max(most, n)
		if n > limit && !over {
			over = true // report once per stretch above the limit
			var held []string
			for l := range live {
				held = append(held, fmt.Sprintf("token %d [%s, %s)", l.token, fmtNanos(l.at), fmtNanos(l.end)))
			}
			sort.Strings(held)
			c.violate("at-most-limit-holders", "key %q: %d leases certainly held at %s > limit %d: %s",
				key, n, fmtNanos(e.at), limit, strings.Join(held, ", "))
		}
	}
	return most
}

// checkStale checks the calls on l against its release and its
// certainly-held interval.
func (c *leaseChecker) checkStale(l *heldLease) {
	if l.releaseCount > 1 {
		c.violate("stale-tokens-rejected", "key %q token %d: released by %d distinct requests", l.key, l.token, l.releaseCount)
	}
	for _, r := range l.others {
		a := r.answer
		if a == nil {
			continue
		}
		kind := r.attempts[0].Kind
		if rel := l.release; rel != nil && r != rel && a.Outcome == OutcomeAllowed {
			if r.call > rel.ret() {
				c.violate("stale-tokens-rejected", "key %q token %d: %s %s sent at %s, after the release %s was acknowledged at %s, was answered %s",
					l.key, l.token, kind, r.name, fmtWall(r.call), rel.name, fmtWall(rel.ret()), allowedWord(kind))
			} else if kind != KindRelease && a.DecidedAt > rel.answer.DecidedAt {
				c.violate("stale-tokens-rejected", "key %q token %d: %s %s was answered %s at log time %s, after the release %s at %s",
					l.key, l.token, kind, r.name, allowedWord(kind), fmtNanos(a.DecidedAt), rel.name, fmtNanos(rel.answer.DecidedAt))
			}
		}
		if a.Outcome == OutcomeDenied && a.DecidedAt != 0 && a.DecidedAt >= l.at && a.DecidedAt < l.end {
			c.violate("live-tokens-accepted", "key %q token %d: %s %s was refused at log time %s, inside the lease's certainly-held [%s, %s)",
				l.key, l.token, kind, r.name, fmtNanos(a.DecidedAt), fmtNanos(l.at), fmtNanos(l.end))
		}
	}
}

func allowedWord(k OpKind) string {
	switch k {
	case KindCheck:
		return "held"
	case KindRelease:
		return "released"
	}
	return "renewed"
}
