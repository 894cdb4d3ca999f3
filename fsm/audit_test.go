package fsm_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// auditMeta is a meta group whose entries come a second apart, its nodes
// n1..n4 registered.
type auditMeta struct {
	*planMeta
}

func newAuditMeta(tb testing.TB) *auditMeta {
	m := &auditMeta{&planMeta{logRec: newLogRec(tb, fsm.Options{}), now: t0}}
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		m.must(registerAt(m.tick(), n))
	}
	m.must(setShardMapEnv(m.tick(), 0, initialMap(tb)))
	return m
}

func registerAt(now int64, id string) *raftcmdv1.Envelope {
	return registerNodeEnv(now, id, id+":7000", id+":8000")
}

func by(caller string) *raftcmdv1.Actor {
	return &raftcmdv1.Actor{Caller: caller, Source: "token"}
}

func as(env *raftcmdv1.Envelope, a *raftcmdv1.Actor) *raftcmdv1.Envelope {
	env.Actor = a
	return env
}

// index is the log index of the last entry applied.
func (m *auditMeta) index() uint64 { return uint64(len(m.entries)) }

// auditAll lists every audit record.
func auditAll(f *fsm.FSM) []fsm.AuditRecord {
	recs, _ := f.Audit(0, fsm.MaxAuditRecords)
	return recs
}

// Each admin command whose entry carries an actor is recorded once, with
// the entry's index and time and its actor; a plan update only when it
// ends its plan; a refused command, or one without an actor, not at all.
func TestAuditRecordsAdminCommands(t *testing.T) {
	m := newAuditMeta(t)
	if n := m.f.AuditLen(); n != 0 {
		t.Fatalf("%d records of commands without an actor", n)
	}
	type want struct{ caller, action, summary string }
	var wants []want
	var at []uint64
	var times []int64
	rec := func(w want, env *raftcmdv1.Envelope) any {
		t.Helper()
		res := m.must(env)
		if w.action != "" {
			wants, at, times = append(wants, w), append(at, m.index()), append(times, env.GetNowUnixNano())
		}
		return res
	}
	rec(want{"alice", "policy apply", "a, b"}, as(putPoliciesEnv(m.tick(), tokenBucket("a", 1, time.Second, 1, 1), tokenBucket("b", 1, time.Second, 1, 1)), by("alice")))
	rec(want{"bob", "policy delete", "b"}, as(deleteEnv(m.tick(), "b"), by("bob")))
	rec(want{"alice", "node add", "n5 raft=n5:7000 api=n5:8000 level=1"}, as(registerAt(m.tick(), "n5"), by("alice")))
	rec(want{"alice", "node remove", "n5"}, as(&raftcmdv1.Envelope{NowUnixNano: m.tick(), Body: &raftcmdv1.Envelope_RemoveNode{RemoveNode: &raftcmdv1.RemoveNode{Id: "n5"}}}, by("alice")))
	im := initialMap(t)
	sm := im.Cordon("n3", true)
	sm.Epoch = 2
	rec(want{"carol", "shard map", "node drain n3: epoch 2"}, as(setShardMapEnv(m.tick(), 1, sm), &raftcmdv1.Actor{Caller: "carol", Source: "certificate", Request: "node drain n3"}))
	// A map change the control plane makes on its own carries no actor.
	sm.Epoch = 3
	rec(want{}, setShardMapEnv(m.tick(), 2, sm))

	res := rec(want{"dave", "plan start", ""}, as(createPlanEnv(m.tick(), moveStep(1, 2, 0, 100)), by("dave")))
	id := res.(*fsm.PlanResult).Plan.GetId()
	wants[len(wants)-1].summary = fmt.Sprintf("plan %d (test): 1 steps", id)
	self := &raftcmdv1.Actor{Caller: "node:n1", Source: "node"}
	for _, u := range []*raftcmdv1.UpdatePlan{
		{Id: id, FromPhase: fsm.PhasePending, ToPhase: fsm.PhaseCopying},
		{Id: id, FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseCopying, NewAttempt: true},
	} {
		rec(want{}, as(updatePlanEnv(m.tick(), u), self)) // a step: not recorded
	}
	rec(want{"erin", "plan cancel", fmt.Sprintf("plan %d (test), cancelling", id)}, as(cancelPlanEnv(m.tick(), id), by("erin")))
	rec(want{}, as(updatePlanEnv(m.tick(), &raftcmdv1.UpdatePlan{Id: id, FromPhase: fsm.PhaseCopying, ToPhase: fsm.PhaseRollingBack}), self))
	rec(want{"node:n1", "plan finish", fmt.Sprintf("plan %d (test) cancelled", id)},
		as(updatePlanEnv(m.tick(), &raftcmdv1.UpdatePlan{Id: id, FromPhase: fsm.PhaseRollingBack, ToPhase: fsm.PhaseRolledBack}), self))

	// Refused commands change nothing, the audit trail included.
	m.refused("cancel unknown plan", as(cancelPlanEnv(0, 99), by("mallory")), fsm.ErrNoPlan)
	m.refused("stale map", as(setShardMapEnv(0, 1, sm), by("mallory")), fsm.ErrMapConflict)

	got := auditAll(m.f)
	if len(got) != len(wants) {
		t.Fatalf("%d records, want %d: %+v", len(got), len(wants), got)
	}
	for i, w := range wants {
		r := got[i]
		if r.Index != at[i] || r.At != times[i] || r.Caller != w.caller || r.Action != w.action || r.Summary != w.summary {
			t.Errorf("record %d = %+v, want index %d, time %d, %+v", i, r, at[i], times[i], w)
		}
	}
	if got[0].Source != "token" || got[4].Source != "certificate" || got[len(got)-1].Source != "node" {
		t.Errorf("sources %q %q %q", got[0].Source, got[4].Source, got[len(got)-1].Source)
	}
	checkReplay(t, "audit", m.logRec, fsm.Options{}, 3, 6, 9, len(m.entries)-1)
}

// The entry's time is the FSM's (max of the last and the stamp), not a
// stamp behind it.
func TestAuditTimeIsTheLogs(t *testing.T) {
	m := newAuditMeta(t)
	last := m.f.LastNow()
	m.must(as(putPoliciesEnv(last-int64(time.Minute), tokenBucket("a", 1, time.Second, 1, 1)), by("x")))
	if r := auditAll(m.f); len(r) != 1 || r[0].At != last {
		t.Fatalf("records %+v, want one at %d", r, last)
	}
}

// auditedLog applies the same admin commands, with actors or without.
func auditedLog(t *testing.T, actors bool) *auditMeta {
	m := newAuditMeta(t)
	a := func(env *raftcmdv1.Envelope) *raftcmdv1.Envelope {
		if actors {
			env.Actor = by("alice")
		}
		return env
	}
	m.must(a(putPoliciesEnv(m.tick(), tokenBucket("a", 1, time.Second, 1, 1))))
	m.must(a(deleteEnv(m.tick(), "a")))
	id := m.must(a(createPlanEnv(m.tick(), addGroupStep(3, "n4")))).(*fsm.PlanResult).Plan.GetId()
	m.must(a(updatePlanEnv(m.tick(), &raftcmdv1.UpdatePlan{Id: id, FromPhase: fsm.PhasePending, ToPhase: fsm.PhaseDone})))
	m.must(a(registerAt(m.tick(), "n5")))
	return m
}

// Without actors nothing is recorded; with them every change is, and the
// records are in the snapshot.
func TestAuditNeedsActors(t *testing.T) {
	plain, recorded := auditedLog(t, false), auditedLog(t, true)
	if n := plain.f.AuditLen(); n != 0 {
		t.Fatalf("%d records without actors", n)
	}
	if n := recorded.f.AuditLen(); n != 5 {
		t.Fatalf("%d records, want 5: %+v", n, auditAll(recorded.f))
	}
	if bytes.Equal(snapshotBytes(t, plain.f), snapshotBytes(t, recorded.f)) {
		t.Fatal("the audit records are not in the snapshot")
	}
}

// The trail keeps the newest MaxAuditRecords; pages follow the index.
func TestAuditBoundAndPaging(t *testing.T) {
	m := newAuditMeta(t)
	first := m.index() + 1
	extra := 5
	for i := range fsm.MaxAuditRecords + extra {
		m.must(as(&raftcmdv1.Envelope{NowUnixNano: m.tick(), Body: &raftcmdv1.Envelope_RemoveNode{
			RemoveNode: &raftcmdv1.RemoveNode{Id: fmt.Sprintf("gone%d", i)}}}, by("alice")))
	}
	if n := m.f.AuditLen(); n != fsm.MaxAuditRecords {
		t.Fatalf("%d records kept, want %d", n, fsm.MaxAuditRecords)
	}
	all := auditAll(m.f)
	if all[0].Index != first+uint64(extra) || all[0].Summary != fmt.Sprintf("gone%d", extra) || all[len(all)-1].Index != m.index() {
		t.Fatalf("kept %+v … %+v", all[0], all[len(all)-1])
	}
	page, more := m.f.Audit(0, 3)
	if len(page) != 3 || !more || page[0] != all[0] {
		t.Fatalf("first page %+v more=%v", page, more)
	}
	page, more = m.f.Audit(page[2].Index, 3)
	if len(page) != 3 || !more || page[0] != all[3] {
		t.Fatalf("second page %+v more=%v", page, more)
	}
	page, more = m.f.Audit(all[len(all)-2].Index, 3)
	if len(page) != 1 || more || page[0] != all[len(all)-1] {
		t.Fatalf("last page %+v more=%v", page, more)
	}
	if page, more = m.f.Audit(m.index(), 3); len(page) != 0 || more {
		t.Fatalf("past the end: %+v more=%v", page, more)
	}

	// A snapshot holds the whole trail, and a restored replica the same.
	b := snapshotBytes(t, m.f)
	r := fsm.New(fsm.Options{})
	restoreFrom(t, r, b)
	if !bytes.Equal(snapshotBytes(t, r), b) {
		t.Fatal("the restored replica's snapshot differs")
	}
	got := auditAll(r)
	if len(got) != len(all) || got[0] != all[0] || got[len(got)-1] != all[len(all)-1] {
		t.Fatal("the restored replica's trail differs")
	}
	// Recording goes on from the restored trail, evicting alike.
	next := as(putPoliciesEnv(m.tick(), tokenBucket("a", 1, time.Second, 1, 1)), by("bob"))
	m.must(next)
	wrap(t, r).applyAt(m.index(), next)
	if !bytes.Equal(snapshotBytes(t, r), snapshotBytes(t, m.f)) {
		t.Fatal("after one more entry, the restored replica's snapshot differs")
	}
}

// applyAt applies env at log index i.
func (a *applier) applyAt(i uint64, env *raftcmdv1.Envelope) any {
	a.tb.Helper()
	return applyData(a.f, i, encode(a.tb, env))
}

// Callers and summaries are cut to a bounded length, at a character
// boundary.
func TestAuditBoundsStrings(t *testing.T) {
	m := newAuditMeta(t)
	long := strings.Repeat("é", 500)
	im := initialMap(t)
	sm := im.Cordon("n3", true)
	sm.Epoch = 2
	m.must(as(setShardMapEnv(m.tick(), 1, sm), &raftcmdv1.Actor{Caller: long, Source: long, Request: long}))
	r := auditAll(m.f)[0]
	for name, s := range map[string]string{"caller": r.Caller, "source": r.Source, "summary": r.Summary} {
		if len(s) > 256 || !utf8.ValidString(s) || !strings.HasSuffix(s, "…") {
			t.Errorf("%s: %d bytes, valid %v: %q", name, len(s), utf8.ValidString(s), s)
		}
	}
}
