package jepsen

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// linWall is the client wall clock of the synthetic histories; linLog their
// log time, aligned to a second.
var linWall = time.Unix(1_700_000_000, 0)

const linLog = int64(1_700_000_000) * int64(time.Second)

// admitAt is one attempt of request req by client on key over [start, end]
// milliseconds; answered attempts are decided at log time linLog+decided ms.
func admitAt(req string, client int, key string, start, end int, out Outcome, remaining int64, decided int) Op {
	op := Op{Kind: KindAdmit, RequestID: req, Caller: fmt.Sprintf("c%d", client), Client: client, Key: key, Node: "n1",
		Start: linWall.Add(time.Duration(start) * time.Millisecond), End: linWall.Add(time.Duration(end) * time.Millisecond),
		Outcome: out}
	if out.OK() {
		op.Remaining, op.DecidedAt = remaining, linLog+int64(decided)*int64(time.Millisecond)
	} else {
		op.Error = "deadline exceeded"
	}
	return op
}

func bucketSpec(capacity int64) LinearSpec {
	return LinearSpec{Algorithm: "token_bucket", Capacity: capacity}
}

func wantLinear(t *testing.T, ops []Op, spec LinearSpec, key string, want LinearOutcome) (Verdict, *LinearResult) {
	t.Helper()
	v, res := CheckLinearizable(ops, spec)
	kr := res.Key(key)
	if kr == nil {
		t.Fatalf("no result for key %q: %+v", key, res)
	}
	if kr.Outcome != want {
		t.Fatalf("key %q: outcome %s, want %s (hint %q, verdict %+v)", key, kr.Outcome, want, kr.Hint, v)
	}
	if v.OK != (len(res.FailingKeys) == 0) || (want == LinearIllegal) != slices.Contains(res.FailingKeys, key) {
		t.Fatalf("verdict OK=%v, failing keys %v, for outcome %s of %q: %+v", v.OK, res.FailingKeys, want, key, v)
	}
	return v, res
}

func TestLinearTokenBucketLinearizable(t *testing.T) {
	ops := []Op{
		admitAt("a", 0, "k", 0, 10, OutcomeAllowed, 2, 5),
		// b and c overlap and were answered in the other order than sent.
		admitAt("b", 1, "k", 20, 60, OutcomeAllowed, 0, 45),
		admitAt("c", 2, "k", 30, 50, OutcomeAllowed, 1, 40),
		admitAt("d", 0, "k", 70, 80, OutcomeDenied, 0, 75),
		admitAt("x", 3, "other", 0, 10, OutcomeAllowed, 2, 5),
	}
	v, res := wantLinear(t, ops, bucketSpec(3), "k", LinearOK)
	if !v.OK || len(res.Keys) != 2 || len(res.FailingKeys) != 0 || res.Key("other").Outcome != LinearOK {
		t.Fatalf("verdict %+v, result %+v", v, res)
	}
	if !strings.Contains(v.Summary, "2 keys (2 ok, 0 illegal") {
		t.Fatalf("summary %q", v.Summary)
	}
}

func TestLinearTokenBucketDoubleSpendIsIllegal(t *testing.T) {
	ops := []Op{
		admitAt("a", 0, "k", 0, 20, OutcomeAllowed, 4, 5),
		admitAt("b", 1, "k", 5, 25, OutcomeAllowed, 4, 6), // both saw 5 → 4
		admitAt("x", 2, "other", 0, 10, OutcomeAllowed, 4, 5),
	}
	v, res := wantLinear(t, ops, bucketSpec(5), "k", LinearIllegal)
	if v.OK || len(res.FailingKeys) != 1 || res.FailingKeys[0] != "k" || res.Key("other").Outcome != LinearOK {
		t.Fatalf("verdict %+v, failing %v", v, res.FailingKeys)
	}
	if len(v.Violations) != 1 || !strings.Contains(v.Violations[0], `key "k"`) || !strings.Contains(v.Violations[0], "4 left") {
		t.Fatalf("violations %q", v.Violations)
	}
}

func TestLinearTokenBucketStaleReadIsIllegal(t *testing.T) {
	ops := []Op{
		admitAt("a", 0, "k", 0, 10, OutcomeAllowed, 4, 5),
		admitAt("b", 1, "k", 20, 30, OutcomeAllowed, 3, 25),
		admitAt("c", 0, "k", 40, 50, OutcomeAllowed, 4, 45), // more left than b, which completed before c began
	}
	_, res := wantLinear(t, ops, bucketSpec(5), "k", LinearIllegal)
	if h := res.Key("k").Hint; !strings.Contains(h, "places 2 of 3") || !strings.Contains(h, "c → allowed, 4 left") {
		t.Fatalf("hint %q", h)
	}
	// Without a, and with c sent before b returned, c then b is legal.
	wantLinear(t, []Op{ops[1], admitAt("c", 0, "k", 15, 50, OutcomeAllowed, 4, 45)}, bucketSpec(5), "k", LinearOK)
}

func TestLinearUnknownExplainsSpend(t *testing.T) {
	unknown := []Op{
		admitAt("u", 0, "k", 0, 10, OutcomeUnknown, 0, 0),
		admitAt("u", 0, "k", 11, 20, OutcomeFail, 0, 0), // a retry, also unanswered
	}
	a := admitAt("a", 1, "k", 30, 40, OutcomeAllowed, 3, 35) // two spends before it: a and u
	wantLinear(t, append(append([]Op(nil), unknown...), a), bucketSpec(5), "k", LinearOK)
	wantLinear(t, []Op{a}, bucketSpec(5), "k", LinearIllegal)

	// An unknown sent after a returned cannot explain a's spend.
	late := admitAt("u", 0, "k", 50, 60, OutcomeUnknown, 0, 0)
	wantLinear(t, []Op{a, late}, bucketSpec(5), "k", LinearIllegal)

	// An unknown may also never apply.
	b := admitAt("b", 1, "k", 30, 40, OutcomeAllowed, 4, 35)
	_, res := wantLinear(t, append(append([]Op(nil), unknown...), b), bucketSpec(5), "k", LinearOK)
	if kr := res.Key("k"); kr.Requests != 2 || kr.Unanswered != 1 {
		t.Fatalf("requests %d unanswered %d, want 2 and 1", kr.Requests, kr.Unanswered)
	}

	// The effect of an unknown may come long after its client gave up
	// (applied by the log later): here after b, before c.
	c := admitAt("c", 2, "k", 100, 110, OutcomeAllowed, 2, 105)
	wantLinear(t, append(append([]Op(nil), unknown...), b, c), bucketSpec(5), "k", LinearOK)

	// A denial needs the bucket empty: the unknown spent the last token.
	d := admitAt("d", 1, "k", 30, 40, OutcomeAllowed, 1, 35)
	e := admitAt("e", 1, "k", 50, 60, OutcomeDenied, 0, 55)
	wantLinear(t, append(append([]Op(nil), unknown...), d, e), bucketSpec(2), "k", LinearOK)
	wantLinear(t, []Op{d, e}, bucketSpec(2), "k", LinearIllegal)
}

func TestLinearMergesRetries(t *testing.T) {
	ops := []Op{
		admitAt("r", 0, "k", 0, 100, OutcomeUnknown, 0, 0),
		admitAt("r", 0, "k", 200, 300, OutcomeAllowed, 4, 120), // duplicate of the first attempt's spend
		admitAt("r", 0, "k", 400, 500, OutcomeAllowed, 2, 120), // later answers: the at-most-once checker's
		admitAt("b", 1, "k", 150, 180, OutcomeAllowed, 3, 160),
	}
	ops[1].Duplicate, ops[2].Duplicate = true, true
	_, res := wantLinear(t, ops, bucketSpec(5), "k", LinearOK)
	if kr := res.Key("k"); kr.Requests != 2 || kr.Unanswered != 0 {
		t.Fatalf("requests %d unanswered %d, want 2 and 0", kr.Requests, kr.Unanswered)
	}
	// Without the first attempt r could not have spent before b.
	wantLinear(t, ops[1:], bucketSpec(5), "k", LinearIllegal)
}

func TestLinearFixedWindow(t *testing.T) {
	spec := LinearSpec{Algorithm: "fixed_window", Limit: 2, Window: time.Second}
	ops := []Op{
		admitAt("a", 0, "k", 0, 10, OutcomeAllowed, 1, 5),
		admitAt("b", 1, "k", 0, 20, OutcomeAllowed, 0, 15),
		admitAt("c", 0, "k", 30, 40, OutcomeDenied, 0, 35),
		admitAt("d", 1, "k", 1000, 1010, OutcomeAllowed, 1, 1005), // the next window starts empty
		admitAt("e", 0, "k", 1020, 1030, OutcomeAllowed, 0, 1025),
	}
	_, res := wantLinear(t, ops, spec, "k", LinearOK)
	if kr := res.Key("k"); kr.Partitions != 2 {
		t.Fatalf("partitions %d, want 2 windows", kr.Partitions)
	}
	if v := CheckFixedWindow(ops, 2, time.Second); !v.OK {
		t.Fatalf("window check: %+v", v)
	}

	over := append(append([]Op(nil), ops...), admitAt("f", 2, "k", 45, 50, OutcomeAllowed, 0, 48))
	_, res = wantLinear(t, over, spec, "k", LinearIllegal)
	if h := res.Key("k").Hint; !strings.Contains(h, "window ") {
		t.Fatalf("hint %q does not name the window", h)
	}
	if v := CheckFixedWindow(over, 2, time.Second); v.OK {
		t.Fatalf("over-admission not reported: %+v", v)
	}

	// An unknown explains a spend in the second window: e first saw 0 left.
	u := admitAt("u", 2, "k", 990, 995, OutcomeUnknown, 0, 0)
	e := admitAt("e", 0, "k", 1020, 1030, OutcomeAllowed, 0, 1025)
	d := admitAt("d", 1, "k", 1040, 1050, OutcomeDenied, 0, 1045)
	wantLinear(t, append(append([]Op(nil), ops[:3]...), u, e, d), spec, "k", LinearOK)
	wantLinear(t, append(append([]Op(nil), ops[:3]...), e, d), spec, "k", LinearIllegal)
}

func TestLinearTimeoutIsUnknown(t *testing.T) {
	// Many concurrent unknowns and an answer no state explains: proving
	// it illegal means trying every subset of the unknowns.
	var ops []Op
	for i := range 40 {
		ops = append(ops, admitAt(fmt.Sprintf("u%d", i), i, "k", 0, 100, OutcomeUnknown, 0, 0))
	}
	ops = append(ops, admitAt("bad", 99, "k", 0, 200, OutcomeAllowed, 7, 50))
	spec := bucketSpec(5)
	spec.Timeout = 50 * time.Millisecond
	began := time.Now()
	v, res := wantLinear(t, ops, spec, "k", LinearUnknown)
	if !v.OK || len(res.UnknownKeys) != 1 || !strings.Contains(v.Summary, "undecided: k") {
		t.Fatalf("a timeout must not fail the verdict: %+v", v)
	}
	if time.Since(began) > 10*time.Second {
		t.Fatalf("timeout not honoured: %s", time.Since(began))
	}
}

func TestLinearRejectsBadSpec(t *testing.T) {
	for _, spec := range []LinearSpec{{}, {Algorithm: "token_bucket"}, {Algorithm: "fixed_window", Limit: 1}, {Algorithm: "sliding_log", Limit: 1}} {
		if v, _ := CheckLinearizable(nil, spec); v.OK {
			t.Errorf("spec %+v accepted", spec)
		}
	}
	if v, res := CheckLinearizable(nil, bucketSpec(1)); !v.OK || len(res.Keys) != 0 {
		t.Errorf("empty history: %+v", v)
	}
}

// simulateAdmits runs a sequential server for a seeded random history of
// concurrent clients: each request takes effect at one point of log time
// (= wall time here) inside its call, or — never answered — at any later
// point or not at all, like an entry an old leader committed after its
// client gave up.
func simulateAdmits(seed uint64, spec LinearSpec, requests int) []Op {
	rng := rand.New(rand.NewPCG(seed, 7))
	type pending struct {
		op      Op
		at      int64 // effect time, µs
		applied bool
	}
	var ps []*pending
	free := make([]int64, 6) // per client: when its previous call ended
	for i := range requests {
		c := rng.IntN(len(free))
		start := free[c] + rng.Int64N(3000)
		at := start + rng.Int64N(2000)
		end := at + rng.Int64N(2000)
		p := &pending{at: at, applied: true}
		p.op = Op{Kind: KindAdmit, RequestID: fmt.Sprintf("r%d", i), Caller: fmt.Sprintf("c%d", c), Client: c, Key: "k",
			Start: linWall.Add(time.Duration(start) * time.Microsecond)}
		if rng.IntN(5) == 0 { // never answered: maybe applied, maybe much later
			p.applied = rng.IntN(2) == 0
			p.at = start + rng.Int64N(20000)
			end = start + rng.Int64N(3000)
			p.op.Outcome = OutcomeUnknown
		}
		p.op.End = linWall.Add(time.Duration(end) * time.Microsecond)
		free[c] = end + 1
		ps = append(ps, p)
	}
	byAt := slices.Clone(ps)
	slices.SortStableFunc(byAt, func(a, b *pending) int { return cmp.Compare(a.at, b.at) })
	used, window := int64(0), int64(-1)
	limit := spec.Capacity
	if spec.Algorithm == "fixed_window" {
		limit = spec.Limit
	}
	for _, p := range byAt {
		decided := linLog + p.at*int64(time.Microsecond)
		if spec.Algorithm == "fixed_window" {
			if w := decided / int64(spec.Window); w != window {
				window, used = w, 0
			}
		}
		if !p.applied {
			continue
		}
		allowed := used < limit
		if allowed {
			used++
		}
		if p.op.Outcome == OutcomeUnknown {
			continue
		}
		p.op.Outcome, p.op.Remaining, p.op.DecidedAt = OutcomeDenied, limit-used, decided
		if allowed {
			p.op.Outcome = OutcomeAllowed
		}
	}
	ops := make([]Op, len(ps))
	for i, p := range ps {
		ops[i] = p.op
	}
	return ops
}

func TestLinearSimulatedHistoriesAreLinearizable(t *testing.T) {
	specs := []LinearSpec{bucketSpec(60), {Algorithm: "fixed_window", Limit: 8, Window: 40 * time.Millisecond}}
	for _, spec := range specs {
		for seed := range uint64(20) {
			ops := simulateAdmits(seed, spec, 120)
			v, res := CheckLinearizable(ops, spec)
			if !v.OK || res.Key("k").Outcome != LinearOK {
				t.Fatalf("%s seed %d: %+v", spec.Algorithm, seed, v)
			}
		}
	}
}
