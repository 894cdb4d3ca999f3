package fsm_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// gcall is one Grant call; its caller is "gw" unless set.
type gcall struct {
	policy, key, holder, caller string
	seq                         uint64
	want, used, demand          int64
	release                     bool
}

func (c gcall) env(now int64) *raftcmdv1.Envelope {
	caller := c.caller
	if caller == "" {
		caller = "gw"
	}
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Grant{Grant: &raftcmdv1.Grant{
		Policy: c.policy, Key: c.key, Holder: c.holder, Caller: caller, Seq: c.seq,
		Want: c.want, Used: c.used, DemandMilli: c.demand, Release: c.release}}}
}

// grant applies a Grant that must succeed.
func (a *applier) grant(now int64, c gcall) fsm.GrantResult {
	a.tb.Helper()
	res := a.apply(c.env(now))
	r, ok := res.(*fsm.GrantResult)
	if !ok {
		a.tb.Fatalf("Grant(%+v) at %d = %#v, want *fsm.GrantResult", c, now, res)
	}
	return *r
}

// grantErr applies a Grant that must be refused, and checks that it changed
// nothing: the snapshot before and after is the same.
func (a *applier) grantErr(now int64, c gcall) error {
	a.tb.Helper()
	a.apply(expireEnv(now)) // sweep what now expires, so only the Grant can change anything
	before := snapshotBytes(a.tb, a.f)
	res := a.apply(c.env(now))
	err, ok := res.(error)
	if !ok {
		a.tb.Fatalf("Grant(%+v) at %d = %#v, want an error", c, now, res)
	}
	if after := snapshotBytes(a.tb, a.f); string(after) != string(before) {
		a.tb.Errorf("refused Grant(%+v) (%v) changed the state", c, err)
	}
	return err
}

// peekRemaining is the key's Remaining as a Peek reports it.
func (a *applier) peekRemaining(now int64, policy, key string) int64 {
	a.tb.Helper()
	res := a.apply(&raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Peek{Peek: &raftcmdv1.Peek{Policy: policy, Key: key}}})
	pr, ok := res.(*fsm.PeekResult)
	if !ok {
		a.tb.Fatalf("Peek = %#v", res)
	}
	return pr.Decision.Remaining
}

// leased returns p with budget leases of maxGrant units for ttl.
func leased(p admission.Policy, maxGrant int64, ttl time.Duration) admission.Policy {
	p.Local = admission.Local{Mode: admission.LocalGrant, MaxGrant: maxGrant, TTL: ttl}
	return p
}

// grantPolicies has one leased policy of each algorithm that allows it:
// token bucket "tb" (100/s, burst 100), fixed window "fw" and sliding
// window "sw" (100/min), quota "qu" (1000/day); max_grant 40, ttl 5s.
func grantPolicies() []admission.Policy {
	return []admission.Policy{
		leased(tokenBucket("tb", 100, time.Second, 100, 10), 40, 5*time.Second),
		leased(admission.Policy{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 100, Period: time.Minute, MaxCost: 10}, 40, 5*time.Second),
		leased(admission.Policy{Name: "sw", Algorithm: admission.AlgorithmSlidingWindow, Limit: 100, Period: time.Minute, MaxCost: 10}, 40, 5*time.Second),
		leased(admission.Policy{Name: "qu", Algorithm: admission.AlgorithmQuota, Limit: 1000, MaxCost: 10, Calendar: admission.CalendarDay}, 40, 5*time.Second),
	}
}

// grantApplier returns an FSM holding grantPolicies and a strict policy
// "plain", set at t0.
func grantApplier(tb testing.TB) *applier {
	tb.Helper()
	a := newApplier(tb, fsm.Options{})
	a.putPolicies(t0, append(grantPolicies(), tokenBucket("plain", 100, time.Second, 100, 10))...)
	return a
}

// applyTwiceAndRestored applies envs to two new FSMs and, from halfway, to
// a third restored from the first's snapshot: every result and the final
// snapshots must be the same. It returns the first two.
func applyTwiceAndRestored(t *testing.T, seed uint64, envs []*raftcmdv1.Envelope) (a, b *applier) {
	t.Helper()
	a, b = newApplier(t, fsm.Options{}), newApplier(t, fsm.Options{})
	half := len(envs) / 2
	var c *applier
	for i, env := range envs {
		if i == half {
			c = newApplier(t, fsm.Options{})
			c.index = a.index
			restoreFrom(t, c.f, snapshotBytes(t, a.f))
		}
		ra, rb := fmt.Sprintf("%+v", a.apply(env)), fmt.Sprintf("%+v", b.apply(env))
		if ra != rb {
			t.Fatalf("seed %d entry %d: %s vs %s", seed, i, ra, rb)
		}
		if c != nil {
			if rc := fmt.Sprintf("%+v", c.apply(env)); rc != ra {
				t.Fatalf("seed %d entry %d after a restore: %s, want %s", seed, i, rc, ra)
			}
		}
	}
	sa := snapshotBytes(t, a.f)
	if string(sa) != string(snapshotBytes(t, b.f)) || string(sa) != string(snapshotBytes(t, c.f)) {
		t.Errorf("seed %d: final snapshots differ", seed)
	}
	return a, b
}
