package jepsen

import (
	"strings"
	"testing"
	"time"
)

func TestWindowCheckCountsPerKeyAndWindow(t *testing.T) {
	ops := []Op{
		admitAt("a", 0, "k", 0, 10, OutcomeAllowed, 1, 0), // first instant of window 0
		admitAt("b", 1, "k", 0, 20, OutcomeAllowed, 0, 999),
		admitAt("b", 1, "k", 30, 40, OutcomeAllowed, 0, 999), // a repeat of b: one request
		admitAt("c", 0, "k", 30, 40, OutcomeDenied, 0, 35),
		admitAt("d", 1, "k", 990, 1010, OutcomeAllowed, 1, 1000), // window 1 starts at 1000
		admitAt("e", 2, "k", 990, 1010, OutcomeUnknown, 0, 0),
		admitAt("x", 2, "other", 0, 10, OutcomeAllowed, 1, 5),
		admitAt("y", 2, "other", 20, 30, OutcomeAllowed, 0, 25),
		{Kind: KindAcquire, RequestID: "l", Caller: "c9", Key: "k", Outcome: OutcomeAllowed, DecidedAt: linLog + 1}, // not an admit
	}
	ops[2].Duplicate = true
	v := CheckFixedWindow(ops, 2, time.Second)
	if !v.OK || v.Checker != "no-over-admission-per-window" {
		t.Fatalf("%+v", v)
	}
	if !strings.Contains(v.Summary, "2 keys, 3 windows with admits, 5 acknowledged admits, at most 2 in one window") {
		t.Fatalf("summary %q", v.Summary)
	}

	// A third distinct request in window 0 of k.
	over := append(ops, admitAt("f", 3, "k", 500, 510, OutcomeAllowed, 0, 505))
	v = CheckFixedWindow(over, 2, time.Second)
	if v.OK || len(v.Violations) != 1 || !strings.Contains(v.Violations[0], `key "k", window [`) ||
		!strings.Contains(v.Violations[0], "3 distinct request IDs") {
		t.Fatalf("over-admission not reported once: %+v", v)
	}
	// The same admit one millisecond later falls into window 1: fine.
	over[len(over)-1] = admitAt("f", 3, "k", 500, 1010, OutcomeAllowed, 0, 1001)
	if v := CheckFixedWindow(over, 2, time.Second); !v.OK {
		t.Fatalf("admits of two windows counted together: %+v", v)
	}
	if v := CheckFixedWindow(ops, 2, 0); v.OK {
		t.Fatalf("zero window accepted: %+v", v)
	}
}
