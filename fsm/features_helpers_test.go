package fsm_test

import (
	"bytes"
	"errors"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// chk is one (policy, key, cost) of a multi-check Admit.
type chk struct {
	policy, key string
	cost        int64
}

// admitOpts are the optional parts of an Admit: dedupe identity and pacing.
type admitOpts struct {
	caller, rid string
	maxWait     time.Duration
}

// multiEnv is an Admit whose own check is checks[0] and whose Also holds the
// rest.
func multiEnv(now int64, o admitOpts, checks ...chk) *raftcmdv1.Envelope {
	c := &raftcmdv1.Admit{
		Policy: checks[0].policy, Key: checks[0].key, Cost: checks[0].cost,
		Caller: o.caller, RequestId: o.rid, MaxWaitNanos: int64(o.maxWait),
	}
	for _, ch := range checks[1:] {
		c.Also = append(c.Also, &raftcmdv1.Check{Policy: ch.policy, Key: ch.key, Cost: ch.cost})
	}
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Admit{Admit: c}}
}

func peekEnv(now int64, policy, key string) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Peek{Peek: &raftcmdv1.Peek{Policy: policy, Key: key}}}
}

func refundEnv(now int64, caller, rid string) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Refund{Refund: &raftcmdv1.Refund{Caller: caller, RequestId: rid}}}
}

func deleteEnv(now int64, names ...string) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_DeletePolicies{DeletePolicies: &raftcmdv1.DeletePolicies{Names: names}}}
}

// decide applies a multi-check Admit that must be decided.
func (a *applier) decide(now int64, o admitOpts, checks ...chk) fsm.AdmitResult {
	a.tb.Helper()
	res := a.apply(multiEnv(now, o, checks...))
	ar, ok := res.(*fsm.AdmitResult)
	if !ok {
		a.tb.Fatalf("Admit%+v %+v at +%v = %#v, want *fsm.AdmitResult", checks, o, time.Duration(now-t0), res)
	}
	return *ar
}

// applyErr applies env, which must be refused, and returns the error.
func (a *applier) applyErr(env *raftcmdv1.Envelope) error {
	a.tb.Helper()
	res := a.apply(env)
	err, ok := res.(error)
	if !ok {
		a.tb.Fatalf("apply(%v) = %#v, want an error", env, res)
	}
	return err
}

// peek applies a Peek that must succeed.
func (a *applier) peek(now int64, policy, key string) fsm.PeekResult {
	a.tb.Helper()
	res := a.apply(peekEnv(now, policy, key))
	pr, ok := res.(*fsm.PeekResult)
	if !ok {
		a.tb.Fatalf("Peek(%q, %q) = %#v, want *fsm.PeekResult", policy, key, res)
	}
	return *pr
}

// refund applies a Refund that must succeed.
func (a *applier) refund(now int64, caller, rid string) fsm.RefundResult {
	a.tb.Helper()
	res := a.apply(refundEnv(now, caller, rid))
	rr, ok := res.(*fsm.RefundResult)
	if !ok {
		a.tb.Fatalf("Refund(%q, %q) = %#v, want *fsm.RefundResult", caller, rid, res)
	}
	return *rr
}

// deletePolicies applies a DeletePolicies that must succeed.
func (a *applier) deletePolicies(now int64, names ...string) fsm.PoliciesResult {
	a.tb.Helper()
	res := a.apply(deleteEnv(now, names...))
	pr, ok := res.(*fsm.PoliciesResult)
	if !ok {
		a.tb.Fatalf("DeletePolicies(%q) = %#v, want *fsm.PoliciesResult", names, res)
	}
	return *pr
}

// states returns the stored state of each check's (policy, key).
func (a *applier) states(checks ...chk) []admission.State {
	out := make([]admission.State, len(checks))
	for i, c := range checks {
		out[i] = a.f.State(c.policy, c.key)
	}
	return out
}

// unchanged applies env at now, which must equal LastNow (so that time does
// not move and nothing new expires), and checks that neither the states of
// checks nor any byte of the snapshot changed. It returns the result.
func (a *applier) unchanged(what string, env *raftcmdv1.Envelope, checks ...chk) any {
	a.tb.Helper()
	if env.GetNowUnixNano() != a.f.LastNow() {
		a.tb.Fatalf("%s: unchanged needs now == LastNow", what)
	}
	before, states := snapshotBytes(a.tb, a.f), a.states(checks...)
	res := a.apply(env)
	for i, s := range a.states(checks...) {
		if !statesEqual(s, states[i]) {
			a.tb.Fatalf("%s: state of %+v moved from %+v to %+v", what, checks[i], states[i], s)
		}
	}
	if after := snapshotBytes(a.tb, a.f); !bytes.Equal(before, after) {
		a.tb.Fatalf("%s: the snapshot changed (%d vs %d bytes)", what, len(before), len(after))
	}
	return res
}

func statesEqual(x, y admission.State) bool {
	if x.Kind != y.Kind || x.TAT != y.TAT || x.Start != y.Start || x.Count != y.Count || x.Prev != y.Prev || len(x.Log) != len(y.Log) {
		return false
	}
	for i := range x.Log {
		if x.Log[i] != y.Log[i] {
			return false
		}
	}
	return true
}

// shadowOf returns p in shadow mode.
func shadowOf(p admission.Policy) admission.Policy {
	p.Shadow = true
	return p
}

// fieldOf returns the field of a *admission.FieldError in err's chain, or "".
func fieldOf(err error) string {
	var fe *admission.FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}
