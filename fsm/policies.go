package fsm

import (
	"fmt"
	"strings"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// MaxPolicies is the most policies the registry (the meta group's table,
// copied into every data group) holds, and the most one PutPolicies
// carries. A policy costs each node a few kilobytes in every group's copy
// and in each copy's refresh, so 10,000 policies take tens of megabytes
// per node. Nodes refuse a larger apply before proposing it; the meta
// group refuses it too.
const MaxPolicies = 10_000

// policyTable is a group's policies by name: the meta group's own, which
// PutPolicies and DeletePolicies change (metaState), or a data group's
// copy of it, which SetPolicies replaces (dataState). The FSM owns it and
// its two parts reach it through a pointer: a single-group cluster's meta
// group decides with the table it keeps.
type policyTable struct {
	byName map[string]PolicyVersion
}

// ofStateKey returns the current policy of a state key ("policy/key").
func (t *policyTable) ofStateKey(stateKey string) (admission.Policy, bool) {
	name, _, _ := strings.Cut(stateKey, "/")
	pv, ok := t.byName[name]
	return pv.Policy, ok
}

// policiesChanged dates the policy table at index when res, the result of a
// PutPolicies or DeletePolicies, is not a refusal, and returns res.
func (m *metaState) policiesChanged(index uint64, res interface{}) interface{} {
	if _, refused := res.(error); !refused {
		m.policiesChangedAt = index
	}
	return res
}

// applyPutPolicies stores every policy of c or none: each must be valid and
// named once; c carries at most MaxPolicies and may not take the table
// past MaxPolicies. An unchanged definition keeps its version, a changed
// one gets version+1, a new one version 1.
func (m *metaState) applyPutPolicies(c *raftcmdv1.PutPolicies) interface{} {
	if n := len(c.GetPolicies()); n > MaxPolicies {
		return fmt.Errorf("%w: one apply carries at most %d (got %d)", ErrTooManyPolicies, MaxPolicies, n)
	}
	in := make([]admission.Policy, len(c.GetPolicies()))
	seen := make(map[string]bool, len(in))
	for i, p := range c.GetPolicies() {
		in[i] = PolicyFromProto(p)
		if err := in[i].Validate(); err != nil {
			return fmt.Errorf("policies[%d]: %w", i, err)
		}
		if seen[in[i].Name] {
			return fmt.Errorf("policies[%d]: %w", i, &admission.FieldError{
				Field: "name", Reason: fmt.Sprintf("%s appears twice", admission.Quote(in[i].Name)), Err: admission.ErrInvalidPolicy})
		}
		seen[in[i].Name] = true
	}
	added := 0
	for _, p := range in {
		if _, ok := m.policies.byName[p.Name]; !ok {
			added++
		}
	}
	if have := len(m.policies.byName); have+added > MaxPolicies {
		return fmt.Errorf("%w: the registry holds at most %d (it has %d; this apply adds %d)", ErrTooManyPolicies, MaxPolicies, have, added)
	}
	out := &PoliciesResult{Policies: make([]PolicyVersion, len(in))}
	for i, p := range in {
		p = p.WithDefaults()
		old, ok := m.policies.byName[p.Name]
		switch {
		case !ok:
			old = PolicyVersion{Policy: p, Version: 1}
		case old.Policy != p:
			old = PolicyVersion{Policy: p, Version: old.Version + 1}
		}
		m.policies.byName[p.Name] = old
		out.Policies[i] = old
	}
	return out
}

// applyDeletePolicies deletes every named policy, or none when one is
// missing. Their keys' states stay until they expire (the sweep drops states
// whose policy is gone).
func (m *metaState) applyDeletePolicies(c *raftcmdv1.DeletePolicies) interface{} {
	out := &PoliciesResult{}
	for _, name := range c.GetNames() {
		pv, ok := m.policies.byName[name]
		if !ok {
			return fmt.Errorf("%w %s", ErrUnknownPolicy, admission.Quote(name))
		}
		out.Policies = append(out.Policies, pv)
	}
	for _, name := range c.GetNames() {
		delete(m.policies.byName, name)
	}
	return out
}

// PolicyFromProto converts the stored form of a policy.
func PolicyFromProto(p *raftcmdv1.Policy) admission.Policy {
	return admission.Policy{
		Name:            p.GetName(),
		Algorithm:       admission.Algorithm(p.GetAlgorithm()),
		Limit:           p.GetLimit(),
		Period:          time.Duration(p.GetPeriodNanos()),
		Burst:           p.GetBurst(),
		MaxCost:         p.GetMaxCost(),
		OnUnavailable:   admission.OnUnavailable(p.GetOnUnavailable()),
		DedupeRetention: time.Duration(p.GetDedupeRetentionNanos()),
		Calendar:        admission.Calendar(p.GetCalendar()),
		Shadow:          p.GetShadow(),
		LeaseTTL:        time.Duration(p.GetLeaseTtlNanos()),
		Local:           localFromProto(p.GetLocal()),
	}
}

// localFromProto converts the stored form of a policy's local decisions
// (nil: none).
func localFromProto(l *raftcmdv1.LocalDecisions) admission.Local {
	if l == nil {
		return admission.Local{}
	}
	return admission.Local{Mode: admission.LocalMode(l.GetMode()), MaxGrant: l.GetMaxGrant(), TTL: time.Duration(l.GetTtlNanos()),
		SyncInterval: time.Duration(l.GetSyncIntervalNanos())}
}

// localToProto converts a policy's local decisions to their stored form:
// absent without a mode, so a policy without local decisions encodes as it
// did before they existed.
func localToProto(l admission.Local) *raftcmdv1.LocalDecisions {
	if l == (admission.Local{}) {
		return nil
	}
	return &raftcmdv1.LocalDecisions{Mode: string(l.Mode), MaxGrant: l.MaxGrant, TtlNanos: int64(l.TTL),
		SyncIntervalNanos: int64(l.SyncInterval)}
}

// PolicyToProto converts a policy to its stored form.
func PolicyToProto(p admission.Policy) *raftcmdv1.Policy {
	return &raftcmdv1.Policy{
		Name:                 p.Name,
		Algorithm:            string(p.Algorithm),
		Limit:                p.Limit,
		PeriodNanos:          int64(p.Period),
		Burst:                p.Burst,
		MaxCost:              p.MaxCost,
		OnUnavailable:        string(p.OnUnavailable),
		DedupeRetentionNanos: int64(p.DedupeRetention),
		Calendar:             string(p.Calendar),
		Shadow:               p.Shadow,
		LeaseTtlNanos:        int64(p.LeaseTTL),
		Local:                localToProto(p.Local),
	}
}

// Policy returns a policy by name as of the last applied entry.
func (f *FSM) Policy(name string) (PolicyVersion, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	pv, ok := f.policies.byName[name]
	return pv, ok
}

// PoliciesAt returns every policy, sorted by name, with the log index of
// the last command applied to that table (0 when unknown, right after a
// restore): read together, so a copy dated index never holds a table older
// than index.
func (f *FSM) PoliciesAt() ([]PolicyVersion, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return sortedPolicies(f.policies.byName), f.appliedIndex
}

// Policies returns every policy, sorted by name.
func (f *FSM) Policies() []PolicyVersion {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return sortedPolicies(f.policies.byName)
}

// PoliciesChangedAt returns the log index of the last entry that changed
// the policy table (0 when none has), and false when it is not known (after
// a restore, until the next entry). A copy of the table dated at or after
// it (SetPolicies.meta_index) is current.
func (f *FSM) PoliciesChangedAt() (uint64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.meta.policiesChangedAt, !f.meta.policiesChangeUnknown
}

// MissingPolicy returns the first of names the table does not hold, and
// false when it holds them all.
func (f *FSM) MissingPolicy(names []string) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, name := range names {
		if _, ok := f.policies.byName[name]; !ok {
			return name, true
		}
	}
	return "", false
}

// Recorded reports whether an unexpired request-ID record of any kind is
// held under (caller, requestID) as of the last applied entry.
func (f *FSM) Recorded(caller, requestID string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, ok := f.data.dedupe.Get(dedupe.Key{Caller: caller, RequestID: requestID}, f.lastNow)
	return ok
}

// PolicyCount returns how many policies the table holds and how many of
// names (distinct) it does not hold, as of the last applied entry.
func (f *FSM) PolicyCount(names []string) (have, missing int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, name := range names {
		if _, ok := f.policies.byName[name]; !ok {
			missing++
		}
	}
	return len(f.policies.byName), missing
}
