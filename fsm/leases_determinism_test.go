package fsm_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/lease"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// leasePolicies are the policies of the randomized lease logs: three
// concurrency policies (two keep request IDs only a few seconds) and a
// token bucket that lease operations must refuse.
var leasePolicies = []admission.Policy{
	withRetention(concurrency("p1", 1, 2*time.Second), 3*time.Second),
	withRetention(concurrency("p3", 3, time.Second), 2*time.Second),
	concurrency("p5", 5, 5*time.Second),
	tokenBucket("api", 10, time.Second, 0, 0),
}

var leaseKeys = []string{"k0", "k1", "k2"}

// leaseModel tracks, from the results the FSM gave, which leases are live
// and what each request ID recorded, and checks every new result against
// it: never more than limit live leases per key, tokens strictly increasing
// per key (max(last+1, now+jitter) exactly), exact RetryAfter and Held,
// retries answered as recorded, and a lease acting only for its holder (the
// caller that acquired it, with its secret).
type leaseModel struct {
	tb       testing.TB
	policies map[string]admission.Policy
	lastNow  int64
	lastTerm uint64
	leases   map[string]map[int64]int64  // state key → token → ExpiresAt
	holders  map[string]map[int64]string // state key → token → caller that acquired it
	issued   map[string][]int64          // state key → every token issued
	lastTok  map[string]int64
	recorded map[string]recordedLease // caller/request ID
	recent   []leaseOp                // recent operations with a request ID
	tally    map[string]int
}

type recordedLease struct {
	op    leaseOp
	res   fsm.LeaseResult
	until int64
}

func newLeaseModel(tb testing.TB) *leaseModel {
	m := &leaseModel{tb: tb, policies: map[string]admission.Policy{}, leases: map[string]map[int64]int64{}, holders: map[string]map[int64]string{},
		issued: map[string][]int64{}, lastTok: map[string]int64{}, recorded: map[string]recordedLease{}, tally: map[string]int{}}
	for _, p := range leasePolicies {
		m.policies[p.Name] = p.WithDefaults()
	}
	return m
}

// advance moves the model to an entry of term stamped envNow and returns
// the FSM's now for it: clamped, and leases shifted on a term change.
func (m *leaseModel) advance(term uint64, envNow int64) int64 {
	prev := m.lastNow
	now := max(prev, envNow)
	if term > m.lastTerm {
		if m.lastTerm != 0 && now > prev {
			m.tally["term shift"]++
			for _, ls := range m.leases {
				for tok, exp := range ls {
					ls[tok] = exp + (now - prev)
				}
			}
		}
		m.lastTerm = term
	}
	m.lastNow = now
	for _, ls := range m.leases {
		for tok, exp := range ls {
			if exp <= now {
				delete(ls, tok)
			}
		}
	}
	return now
}

// live returns the number of live leases of key and the earliest end.
func (m *leaseModel) live(key string) (n, first int64) {
	for _, exp := range m.leases[key] {
		if n == 0 || exp < first {
			first = exp
		}
		n++
	}
	return n, first
}

// check checks res, the FSM's answer to op at now (expectErr: the field or
// class op must be refused for, "" if none), and updates the model.
func (m *leaseModel) check(op leaseOp, expectErr string, now int64, res any) {
	m.tb.Helper()
	fail := func(format string, args ...any) {
		m.tb.Helper()
		m.tb.Fatalf("%+v at +%v = %+v: %s", op, time.Duration(now-t0), res, fmt.Sprintf(format, args...))
	}
	lr, isLease := res.(*fsm.LeaseResult)
	id := op.caller + "/" + op.rid
	if op.rid != "" && op.kind != kCheck {
		if rec, ok := m.recorded[id]; ok && now < rec.until {
			want := rec.res
			want.Duplicate = true
			same := sameAsk(rec.op, op)
			switch {
			case same && (!isLease || *lr != want):
				fail("want the recorded answer %+v", want)
			case !same && !errors.Is(asErr(res), fsm.ErrRequestIDReused):
				fail("want ErrRequestIDReused (recorded for %+v)", rec.op)
			}
			m.tally[fmt.Sprint("duplicate ", same)]++
			return
		}
	}
	key := fsm.BucketKey(op.policy, op.key)
	n, first := m.live(key)
	if err, ok := res.(error); ok {
		switch {
		case expectErr == "unknown" && errors.Is(err, fsm.ErrUnknownPolicy):
		case expectErr != "" && fieldOf(err) == expectErr && errors.Is(err, admission.ErrInvalidRequest):
		case expectErr == "" && errors.Is(err, lease.ErrStale) && (op.kind == kRenew || op.kind == kRelease):
			if m.holds(key, op) {
				fail("stale, but the token holds a live lease of the op's holder")
			}
		default:
			fail("unexpected error (expected %q)", expectErr)
		}
		if _, exists := m.leases[key][op.token]; exists && op.kind != kAcquire {
			m.tally["another holder refused"]++
		}
		if errors.Is(err, lease.ErrStale) {
			m.tally["error stale"]++
		} else {
			m.tally["error "+errClass(err)]++
		}
		return
	}
	if !isLease || expectErr != "" || lr.Duplicate || lr.DecidedAt != now {
		fail("want a fresh *fsm.LeaseResult decided at now (expected error %q)", expectErr)
	}
	p := m.policies[op.policy]
	exp := m.leases[key][op.token]
	live := m.holds(key, op)
	switch op.kind {
	case kAcquire:
		ttl := cmp.Or(op.ttl, p.LeaseTTL)
		if !lr.Allowed {
			if n < p.Limit || lr.Held != n || lr.RetryAfter != time.Duration(first-now) {
				fail("denied with %d of %d live, earliest end +%v", n, p.Limit, time.Duration(first-now))
			}
			m.tally["acquire denied"]++
			break
		}
		l := lr.Lease
		if n >= p.Limit || lr.Held != n+1 || l.ExpiresAt != now+int64(ttl) || l.Token <= m.lastTok[key] ||
			l.Token != max(m.lastTok[key]+1, now+int64(op.jitter)) || l.Holder.Caller != op.holder() {
			fail("allowed with %d of %d live, last token %d", n, p.Limit, m.lastTok[key])
		}
		m.lastTok[key] = l.Token
		if m.leases[key] == nil {
			m.leases[key], m.holders[key] = map[int64]int64{}, map[int64]string{}
		}
		m.leases[key][l.Token] = l.ExpiresAt
		m.holders[key][l.Token] = op.holder()
		m.issued[key] = append(m.issued[key], l.Token)
		m.tally["acquire allowed"]++
	case kRenew:
		if !live || !lr.Allowed || lr.Held != n || lr.Lease.ExpiresAt != now+lr.Lease.TTL || (op.ttl != 0 && lr.Lease.TTL != int64(op.ttl)) {
			fail("renewed; model: live %v, %d live", live, n)
		}
		m.leases[key][op.token] = lr.Lease.ExpiresAt
		m.tally["renewed"]++
	case kRelease:
		if !live || !lr.Allowed || lr.Held != n-1 || lr.Lease.Token != op.token || lr.Lease.ExpiresAt != exp {
			fail("released; model: live %v until %d, %d live", live, exp, n)
		}
		delete(m.leases[key], op.token)
		m.tally["released"]++
	case kCheck:
		if lr.Allowed != live || lr.Held != n || (live && lr.Lease.ExpiresAt != exp) {
			fail("checked; model: live %v until %d, %d live", live, exp, n)
		}
		m.tally[fmt.Sprint("check ", live)]++
	}
	if _, exists := m.leases[key][op.token]; exists && !live && op.kind != kAcquire {
		m.tally["another holder refused"]++
	}
	if op.rid != "" && op.kind != kCheck && lr.Allowed { // a denied acquire is not recorded
		m.recorded[id] = recordedLease{op: op, res: *lr, until: now + int64(p.DedupeRetention)}
		m.recent = append(m.recent, op)
		if len(m.recent) > 16 {
			m.recent = m.recent[1:]
		}
	}
	for k, ls := range m.leases {
		name, _, _ := strings.Cut(k, "/")
		if int64(len(ls)) > m.policies[name].Limit {
			m.tb.Fatalf("%s: %d live leases, limit %d", k, len(ls), m.policies[name].Limit)
		}
	}
}

// holds reports whether op's token is a live lease of key held by op's
// caller, asked with the lease's secret.
func (m *leaseModel) holds(key string, op leaseOp) bool {
	_, live := m.leases[key][op.token]
	return live && !op.badSecret && m.holders[key][op.token] == op.holder()
}

// sameAsk reports whether a and b ask the same, as the FSM's request-ID
// fingerprint sees it: an acquire's jitter is drawn afresh by each
// attempt's handler and is not part of what it asks.
func sameAsk(a, b leaseOp) bool {
	if a.kind == kAcquire && b.kind == kAcquire {
		a.jitter, b.jitter = 0, 0
	}
	return a == b
}

// genLeaseOp draws the next operation from r and the model: mostly valid
// ones on live and stale tokens, some with request IDs (fresh, exact
// retries, reuses), some refused (wrong or unknown policy, bad ttl).
func genLeaseOp(r *rand.Rand, m *leaseModel, rid *int) (op leaseOp, expectErr string) {
	if x := r.IntN(100); x < 10 && len(m.recent) > 0 {
		op = m.recent[r.IntN(len(m.recent))]
		if x < 4 { // the same request ID for another operation
			caller, id := op.caller, op.rid
			op, expectErr = genLeaseOp(r, m, rid)
			op = op.withID(caller, id)
		}
		return op, expectErr
	}
	op.policy = leasePolicies[r.IntN(3)].Name
	switch x := r.IntN(100); {
	case x < 3:
		op.policy, expectErr = "api", "policy"
	case x < 5:
		op.policy, expectErr = "nope", "unknown"
	}
	op.key = leaseKeys[r.IntN(len(leaseKeys))]
	key := fsm.BucketKey(op.policy, op.key)
	switch x := r.IntN(100); {
	case x < 38:
		op.kind = kAcquire
	case x < 58:
		op.kind = kRenew
	case x < 80:
		op.kind = kRelease
	default:
		op.kind = kCheck
	}
	if op.kind != kAcquire {
		switch x := r.IntN(100); {
		case x < 60 && len(m.leases[key]) > 0:
			toks := slices.Sorted(maps.Keys(m.leases[key]))
			op.token = toks[r.IntN(len(toks))]
		case x < 85 && len(m.issued[key]) > 0:
			op.token = m.issued[key][r.IntN(len(m.issued[key]))]
		default:
			other := fsm.BucketKey(leasePolicies[r.IntN(3)].Name, leaseKeys[r.IntN(len(leaseKeys))])
			if len(m.issued[other]) > 0 {
				op.token = m.issued[other][len(m.issued[other])-1]
			} else {
				op.token = r.Int64N(1000)
			}
		}
	}
	if op.kind == kAcquire || op.kind == kRenew {
		switch x := r.IntN(100); {
		case x < 25:
			op.ttl = time.Second + time.Duration(r.Int64N(int64(3*time.Second)))
		case x < 29:
			op.ttl = time.Duration(r.Int64N(int64(time.Second)))
			if op.ttl != 0 && expectErr == "" {
				expectErr = "ttl"
			}
		}
	}
	if r.IntN(2) == 0 {
		*rid++
		op = op.withID([]string{"c1", "c2"}[r.IntN(2)], fmt.Sprintf("r%d", *rid))
	}
	switch {
	case op.kind == kAcquire && r.IntN(2) == 0:
		op.jitter = r.Uint32N(uint32(time.Second))
	case op.kind != kAcquire && r.IntN(10) == 0:
		op.badSecret = true
	}
	return op, expectErr
}

// TestLeaseDeterminismRandomized applies random logs of lease operations,
// Expire entries, term changes and clock jumps to an FSM A (checked against
// the model), a fresh FSM B and an FSM C restored from A's snapshot midway:
// equal results and byte-identical snapshots.
func TestLeaseDeterminismRandomized(t *testing.T) {
	const n = 2500
	total := map[string]int{}
	for seed := uint64(1); seed <= 6; seed++ {
		r := rand.New(rand.NewPCG(seed, 0x1ea5e))
		m := newLeaseModel(t)
		fa, fb := fsm.New(fsm.Options{}), fsm.New(fsm.Options{})
		var fc *fsm.FSM
		term, clock := uint64(1), t0
		data := encode(t, putPoliciesEnv(clock, leasePolicies...))
		m.advance(term, clock)
		applyTermLog(fa, 1, term, data)
		applyTermLog(fb, 1, term, data)
		rid := 0
		for i := uint64(2); i <= n; i++ {
			switch x := r.IntN(100); {
			case x < 3: // a new leader, ahead or behind
				term++
				clock += r.Int64N(int64(20*time.Second)) - int64(5*time.Second)
			case x < 6:
				clock -= r.Int64N(int64(2 * time.Second))
			case x < 8:
				clock += int64(3*time.Second) + r.Int64N(int64(12*time.Second))
			default:
				clock += r.Int64N(int64(300 * time.Millisecond))
			}
			var env *raftcmdv1.Envelope
			var op leaseOp
			var expectErr string
			if r.IntN(100) < 7 {
				env = expireEnv(clock)
			} else {
				op, expectErr = genLeaseOp(r, m, &rid)
				env = op.env(clock)
			}
			data := encode(t, env)
			now := m.advance(term, clock)
			res := applyTermLog(fa, i, term, data)
			if env.GetExpire() == nil {
				m.check(op, expectErr, now, res)
			} else if res != nil {
				t.Fatalf("seed %d entry %d: Expire = %v", seed, i, res)
			}
			want := toLeaseOutcome(t, res)
			for name, f := range map[string]*fsm.FSM{"B": fb, "C": fc} {
				if f == nil {
					continue
				}
				if got := toLeaseOutcome(t, applyTermLog(f, i, term, data)); !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d entry %d: %s answered %+v, A %+v", seed, i, name, got, want)
				}
			}
			if i == n/2 {
				fc = fsm.New(fsm.Options{})
				restoreFrom(t, fc, snapshotBytes(t, fa))
			}
			if i%50 == 0 || i == n {
				sa := snapshotBytes(t, fa)
				if !bytes.Equal(sa, snapshotBytes(t, fb)) || (fc != nil && !bytes.Equal(sa, snapshotBytes(t, fc))) {
					t.Fatalf("seed %d entry %d: snapshots differ", seed, i)
				}
			}
		}
		for k, v := range m.tally {
			total[k] += v
		}
	}
	t.Logf("outcomes: %v", total)
	for _, k := range []string{"acquire allowed", "acquire denied", "renewed", "released", "check true", "check false",
		"duplicate true", "duplicate false", "term shift", "error stale", "error unknown_policy", "error invalid_request",
		"another holder refused"} {
		if total[k] < 10 {
			t.Errorf("only %d %q outcomes: the generator does not cover them", total[k], k)
		}
	}
}
