package fsm

import (
	"fmt"
	"strings"
	"unicode/utf8"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// MaxAuditRecords is how many audit records the meta group keeps: the
// newest; a record past the bound evicts the oldest.
const MaxAuditRecords = 10_000

// Bounds on an audit record's strings, in bytes (cut at a character
// boundary): what an entry carries is bounded by the entry, but a trail of
// MaxAuditRecords should stay small.
const (
	maxAuditCaller  = 128
	maxAuditSource  = 16
	maxAuditAction  = 32
	maxAuditSummary = 256
)

// AuditRecord is one admin change in the meta group's audit trail.
type AuditRecord struct {
	// Index and At are the log index and time (Unix nanoseconds) of the
	// entry that made the change.
	Index uint64
	At    int64
	// Caller and Source are who asked (the entry's Actor): an
	// authenticated caller and how it was established, "" and "none" for
	// an anonymous request, "node:<id>" and "node" for the control plane.
	Caller, Source string
	// Action names the change ("policy apply", "plan start", ...);
	// Summary what it named (policy names, a node ID, a plan).
	Action, Summary string
}

// auditTrail is the meta group's last MaxAuditRecords audit records, by
// log index.
type auditTrail struct {
	recs []AuditRecord
}

// add appends r, evicting the oldest record past MaxAuditRecords.
func (t *auditTrail) add(r AuditRecord) {
	if len(t.recs) >= MaxAuditRecords {
		// Dropping from the front reallocates when the slice's capacity
		// runs out, so the backing array stays within twice the bound.
		t.recs = t.recs[len(t.recs)-MaxAuditRecords+1:]
	}
	t.recs = append(t.recs, r)
}

// Audit returns up to limit audit records of log index > since, oldest
// first, and whether more follow them.
func (f *FSM) Audit(since uint64, limit int) ([]AuditRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	recs := f.meta.audit.recs
	// The records are by index: find the first past since.
	lo, hi := 0, len(recs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if recs[mid].Index <= since {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	rest := recs[lo:]
	n := min(max(limit, 0), len(rest))
	return append([]AuditRecord(nil), rest[:n]...), n < len(rest)
}

// AuditLen is how many audit records the meta group keeps now.
func (f *FSM) AuditLen() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.meta.audit.recs)
}

// apply applies one of the meta group's commands (metaCommand) and records
// it in the audit trail when its entry carries an Actor and it changed
// something, its summary led by what the Actor says was asked
// (Actor.request), if anything: a refused command is not recorded
// (rejections change nothing), nor is a plan update that does not end its
// plan (the control plane's own steps).
func (m *metaState) apply(o op) interface{} {
	res := m.dispatch(o)
	if o.env.GetActor() == nil {
		return res
	}
	if _, refused := res.(error); refused {
		return res
	}
	if action, summary, ok := auditAction(o.env, res); ok {
		a := o.env.GetActor()
		if r := a.GetRequest(); r != "" {
			summary = r + ": " + summary
		}
		m.audit.add(AuditRecord{Index: o.index, At: o.now,
			Caller: truncate(a.GetCaller(), maxAuditCaller), Source: truncate(a.GetSource(), maxAuditSource),
			Action: truncate(action, maxAuditAction), Summary: truncate(summary, maxAuditSummary)})
	}
	return res
}

// dispatch applies one of the meta group's commands.
func (m *metaState) dispatch(o op) interface{} {
	switch body := o.env.GetBody().(type) {
	case *raftcmdv1.Envelope_SetShardMap:
		return m.applySetShardMap(body.SetShardMap)
	case *raftcmdv1.Envelope_PutPolicies:
		return m.policiesChanged(o.index, m.applyPutPolicies(body.PutPolicies))
	case *raftcmdv1.Envelope_RegisterNode:
		return m.applyRegisterNode(body.RegisterNode)
	case *raftcmdv1.Envelope_SetClusterId:
		return m.applySetClusterID(body.SetClusterId)
	case *raftcmdv1.Envelope_RemoveNode:
		return m.applyRemoveNode(body.RemoveNode)
	case *raftcmdv1.Envelope_DeletePolicies:
		return m.policiesChanged(o.index, m.applyDeletePolicies(body.DeletePolicies))
	case *raftcmdv1.Envelope_CreatePlan:
		return m.applyCreatePlan(body.CreatePlan, o.index, o.now)
	case *raftcmdv1.Envelope_UpdatePlan:
		return m.applyUpdatePlan(body.UpdatePlan, o.now)
	case *raftcmdv1.Envelope_CancelPlan:
		return m.applyCancelPlan(body.CancelPlan, o.now)
	}
	panic(fmt.Sprintf("fsm: entry %d: %T is not a meta-group command", o.index, o.env.GetBody()))
}

// auditAction names an applied meta command's change and what it named,
// from the entry and the command's result; false for a change not worth a
// record (a plan update that does not end its plan).
func auditAction(env *raftcmdv1.Envelope, res interface{}) (action, summary string, ok bool) {
	plan := func() *raftcmdv1.Plan {
		if r, isPlan := res.(*PlanResult); isPlan {
			return r.Plan
		}
		return nil
	}
	switch b := env.GetBody().(type) {
	case *raftcmdv1.Envelope_PutPolicies:
		names := make([]string, 0, len(b.PutPolicies.GetPolicies()))
		for _, p := range b.PutPolicies.GetPolicies() {
			names = append(names, p.GetName())
		}
		return "policy apply", strings.Join(names, ", "), true
	case *raftcmdv1.Envelope_DeletePolicies:
		return "policy delete", strings.Join(b.DeletePolicies.GetNames(), ", "), true
	case *raftcmdv1.Envelope_RegisterNode:
		r := b.RegisterNode
		return "node add", fmt.Sprintf("%s raft=%s api=%s level=%d", r.GetId(), r.GetRaftAddr(), r.GetApiAddr(), r.GetFeatureLevel()), true
	case *raftcmdv1.Envelope_RemoveNode:
		return "node remove", b.RemoveNode.GetId(), true
	case *raftcmdv1.Envelope_SetClusterId:
		return "cluster id", b.SetClusterId.GetId(), true
	case *raftcmdv1.Envelope_SetShardMap:
		return "shard map", fmt.Sprintf("epoch %d", b.SetShardMap.GetMap().GetEpoch()), true
	case *raftcmdv1.Envelope_CreatePlan:
		p := plan()
		return "plan start", fmt.Sprintf("plan %d (%s): %s", p.GetId(), p.GetKind(), p.GetSummary()), true
	case *raftcmdv1.Envelope_CancelPlan:
		p := plan()
		return "plan cancel", fmt.Sprintf("plan %d (%s), %s", p.GetId(), p.GetKind(), planStateWord(p.GetState())), true
	case *raftcmdv1.Envelope_UpdatePlan:
		p := plan()
		switch p.GetState() {
		case PlanDone, PlanCancelled, PlanFailed:
		default:
			return "", "", false
		}
		s := fmt.Sprintf("plan %d (%s) %s", p.GetId(), p.GetKind(), planStateWord(p.GetState()))
		if e := p.GetError(); e != "" {
			s += ": " + e
		}
		return "plan finish", s, true
	}
	return "", "", false
}

// planStateWord names a plan state for an audit summary.
func planStateWord(s uint32) string {
	switch s {
	case PlanRunning:
		return "running"
	case PlanDone:
		return "done"
	case PlanCancelling:
		return "cancelling"
	case PlanCancelled:
		return "cancelled"
	case PlanFailed:
		return "failed"
	}
	return fmt.Sprintf("state %d", s)
}

// truncate cuts s to at most n bytes at a character boundary, marking the
// cut with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// auditToRecord and auditFromRecord convert audit records to and from
// their snapshot form.
func auditToRecord(r AuditRecord) *raftcmdv1.AuditRecord {
	return &raftcmdv1.AuditRecord{Index: r.Index, AtUnixNano: r.At, Caller: r.Caller, Source: r.Source, Action: r.Action, Summary: r.Summary}
}

func auditFromRecord(r *raftcmdv1.AuditRecord) AuditRecord {
	return AuditRecord{Index: r.GetIndex(), At: r.GetAtUnixNano(), Caller: r.GetCaller(), Source: r.GetSource(), Action: r.GetAction(), Summary: r.GetSummary()}
}
