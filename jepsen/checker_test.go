package jepsen

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func mkOp(id, key string, end int, out Outcome, remaining int64, dup bool) Op {
	op := Op{RequestID: id, Caller: "c", Key: key, Start: t0, End: t0.Add(time.Duration(end) * time.Millisecond), Outcome: out}
	if out.OK() {
		op.Remaining, op.DecidedAt, op.Duplicate = remaining, t0.UnixNano()+int64(remaining), dup
	}
	return op
}

func TestCheckOverAdmissionReportsViolation(t *testing.T) {
	ops := []Op{
		mkOp("a", "k", 1, OutcomeAllowed, 1, false),
		mkOp("b", "k", 2, OutcomeAllowed, 0, false),
		mkOp("b", "k", 3, OutcomeAllowed, 0, true), // repeat of b: not a new admit
		mkOp("c", "k", 4, OutcomeDenied, 0, false),
		mkOp("x", "other", 5, OutcomeAllowed, 1, false),
	}
	if v := CheckOverAdmission(ops, 2); !v.OK {
		t.Fatalf("capacity 2 with 2 admits on k: %+v", v)
	}
	ops = append(ops, mkOp("d", "k", 6, OutcomeAllowed, 0, false))
	v := CheckOverAdmission(ops, 2)
	if v.OK || len(v.Violations) != 1 {
		t.Fatalf("3 admits over capacity 2 not reported: %+v", v)
	}
}

func TestCheckAtMostOnceReportsViolation(t *testing.T) {
	good := []Op{
		mkOp("a", "k", 1, OutcomeUnknown, 0, false),
		mkOp("a", "k", 2, OutcomeAllowed, 4, true), // first answer may be a duplicate of an unknown attempt
		mkOp("a", "k", 3, OutcomeAllowed, 4, true),
	}
	if v := CheckAtMostOnce(good); !v.OK {
		t.Fatalf("agreeing repeats reported: %+v", v)
	}
	disagree := append(append([]Op(nil), good...), mkOp("a", "k", 4, OutcomeDenied, 0, true))
	if v := CheckAtMostOnce(disagree); v.OK {
		t.Fatalf("disagreeing repeat not reported: %+v", v)
	}
	notDup := append(append([]Op(nil), good...), mkOp("a", "k", 4, OutcomeAllowed, 4, false))
	if v := CheckAtMostOnce(notDup); v.OK || len(v.Violations) != 1 {
		t.Fatalf("repeat not marked duplicate not reported: %+v", v)
	}
	late := append([]Op(nil), good...)
	late[2].DecidedAt++
	if v := CheckAtMostOnce(late); v.OK {
		t.Fatalf("repeat with another decided_at not reported: %+v", v)
	}
}

func TestCheckDurabilityReportsViolation(t *testing.T) {
	ops := []Op{
		mkOp("a", "k", 1, OutcomeAllowed, 9, false),
		mkOp("b", "k", 2, OutcomeAllowed, 8, false),
		mkOp("c", "k", 3, OutcomeUnknown, 0, false),
		mkOp("d", "k", 4, OutcomeUnknown, 0, false),
		mkOp("d", "k", 5, OutcomeDenied, 7, true), // d answered: no longer unknown
	}
	for _, rem := range []int64{8, 7} { // spent 2 (acked) or 3 (acked + c)
		if v := CheckDurability(ops, 10, map[string]int64{"k": rem}); !v.OK {
			t.Fatalf("remaining %d reported: %+v", rem, v)
		}
	}
	if v := CheckDurability(ops, 10, map[string]int64{"k": 9}); v.OK {
		t.Fatalf("lost acknowledged admit not reported: %+v", v)
	}
	if v := CheckDurability(ops, 10, map[string]int64{"k": 6}); v.OK {
		t.Fatalf("spent beyond acked+unknown not reported: %+v", v)
	}
	if v := CheckDurability(ops, 10, nil); v.OK {
		t.Fatalf("missing final peek not reported: %+v", v)
	}
}
