package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
)

func TestDecisionStatsCountsAndRates(t *testing.T) {
	var s decisionStats
	t0 := time.Unix(1_000_000, 0)
	check := func(policy, key string, allowed, shadow bool) fsm.CheckResult {
		return fsm.CheckResult{Policy: policy, Key: key, Decision: admission.Decision{Allowed: allowed}, ShadowDenied: shadow}
	}
	// 30 s of one decision a second on "api", every third denied, key
	// "hot" twice as often as the others; and one two-check request.
	for i := range 30 {
		key := "hot"
		if i%3 == 2 {
			key = "cold-" + string(rune('a'+i))
		}
		s.add(1, &fsm.AdmitResult{Checks: []fsm.CheckResult{check("api", key, i%3 != 0, false)}}, t0.Add(time.Duration(i)*time.Second))
	}
	s.add(2, &fsm.AdmitResult{Multi: true, Checks: []fsm.CheckResult{check("api", "k", true, false), check("shadow", "k", true, true)}}, t0.Add(29*time.Second))
	// A repeat decided nothing.
	s.Record(1, &fsm.AdmitResult{Duplicate: true, Checks: []fsm.CheckResult{check("api", "hot", true, false)}})

	hot := s.hotKeys(1)
	if len(hot) != 11-1 || hot[0].GetKey() != "hot" || hot[0].GetPolicy() != "api" || hot[0].GetCount() != 20 {
		t.Fatalf("hot keys of group 1: %v", hot)
	}
	if got := s.hotKeys(3); got != nil {
		t.Fatalf("hot keys of a group that decided nothing: %v", got)
	}
	ps := s.byPolicy(t0.Add(30 * time.Second))
	if len(ps) != 2 || ps[0].GetPolicy() != "api" || ps[1].GetPolicy() != "shadow" {
		t.Fatalf("policies: %v", ps)
	}
	api, shadow := ps[0], ps[1]
	if api.GetDecisions() != 31 || api.GetDenied() != 10 || api.GetShadowDenied() != 0 {
		t.Fatalf("api: %v", api)
	}
	if shadow.GetDecisions() != 1 || shadow.GetShadowDenied() != 1 || shadow.GetDenied() != 0 {
		t.Fatalf("shadow: %v", shadow)
	}
	// 31 decisions over the 30 s since the first.
	if r := api.GetDecisionsPerSecond(); r < 1.0 || r > 1.1 {
		t.Fatalf("api rate %v/s, want 31/30", r)
	}
	// Two minutes later, nothing in the window.
	ps = s.byPolicy(t0.Add(150 * time.Second))
	if ps[0].GetDecisionsPerSecond() != 0 || ps[0].GetDecisions() != 31 {
		t.Fatalf("api two minutes later: %v", ps[0])
	}
}

// The metrics' summary: a key with a third of a policy's decisions among a
// hundred keys decided once each is its one hot key; the cold ones, which
// outnumber the sketch's counters, are not hot.
func TestDecisionStatsSummary(t *testing.T) {
	var s decisionStats
	now := time.Unix(1_000_000, 0)
	admit := func(policy, key string, allowed bool) {
		s.add(1, &fsm.AdmitResult{Checks: []fsm.CheckResult{{Policy: policy, Key: key, Decision: admission.Decision{Allowed: allowed}}}}, now)
	}
	for i := range 150 {
		if i%3 == 0 {
			admit("api", "hot", i%6 == 0)
			continue
		}
		admit("api", fmt.Sprintf("cold-%d", i), true)
	}
	admit("login", "ip", false)
	sum := s.summary()
	api, login := sum["api"], sum["login"]
	if len(sum) != 2 || api.decisions != 150 || api.denied != 25 || api.heavyKeys != 1 || api.heaviest != 50 {
		t.Fatalf("api: %+v (all %+v)", api, sum)
	}
	// login's one key has 1 of the group's 151 decisions: not hot.
	if login.decisions != 1 || login.denied != 1 || login.heavyKeys != 0 {
		t.Fatalf("login: %+v", login)
	}
}

// Each policy keeps the last chartMinutes minutes of decisions and
// denials, the current minute last; older minutes drop out of the ring.
func TestDecisionStatsByMinute(t *testing.T) {
	var s decisionStats
	now := time.Unix(1_000_020, 0) // 0 s into a minute
	add := func(at time.Time, n, denied int) {
		for i := range n {
			s.add(1, &fsm.AdmitResult{Checks: []fsm.CheckResult{{Policy: "api", Key: "k", Decision: admission.Decision{Allowed: i >= denied}}}}, at)
		}
	}
	add(now.Add(-20*time.Minute), 7, 7) // out of the chart
	add(now.Add(-2*time.Minute), 3, 1)
	add(now.Add(-15*time.Second), 2, 0) // the minute before now's
	add(now.Add(10*time.Second), 5, 2)
	ps := s.byPolicy(now.Add(30 * time.Second))
	got, denied := ps[0].GetDecisionsByMinute(), ps[0].GetDeniedByMinute()
	want := make([]uint64, chartMinutes)
	wantDenied := make([]uint64, chartMinutes)
	want[12], wantDenied[12] = 3, 1
	want[13] = 2
	want[14], wantDenied[14] = 5, 2
	if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(denied) != fmt.Sprint(wantDenied) {
		t.Errorf("by minute %v, denied %v; want %v, %v", got, denied, want, wantDenied)
	}
	// Sixteen minutes on, every minute of the chart is empty.
	ps = s.byPolicy(now.Add(16 * time.Minute))
	for i, v := range ps[0].GetDecisionsByMinute() {
		if v != 0 {
			t.Errorf("minute %d of a chart 16 minutes on: %d decisions, want 0", i, v)
		}
	}
}
