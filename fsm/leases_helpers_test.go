package fsm_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/lease"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// The lease operation kinds, shortened.
const (
	kAcquire = raftcmdv1.LeaseOp_KIND_ACQUIRE
	kRenew   = raftcmdv1.LeaseOp_KIND_RENEW
	kRelease = raftcmdv1.LeaseOp_KIND_RELEASE
	kCheck   = raftcmdv1.LeaseOp_KIND_CHECK
)

// concurrency returns a concurrency policy of limit slots per key and leases
// of ttl.
func concurrency(name string, limit int64, ttl time.Duration) admission.Policy {
	return admission.Policy{Name: name, Algorithm: admission.AlgorithmConcurrency, Limit: limit, LeaseTTL: ttl}
}

// leaseOp is one lease operation; caller and rid are its request identity
// (rid "" = not recorded).
type leaseOp struct {
	kind        raftcmdv1.LeaseOp_Kind
	policy, key string
	token       int64
	ttl         time.Duration
	caller, rid string
	jitter      uint32 // acquire: how far above the log time the token starts
	badSecret   bool   // renew, release, check: a secret that is not the lease's
}

func acquireOp(policy, key string) leaseOp { return leaseOp{kind: kAcquire, policy: policy, key: key} }
func renewOp(policy, key string, token int64) leaseOp {
	return leaseOp{kind: kRenew, policy: policy, key: key, token: token}
}
func releaseOp(policy, key string, token int64) leaseOp {
	return leaseOp{kind: kRelease, policy: policy, key: key, token: token}
}
func checkOp(policy, key string, token int64) leaseOp {
	return leaseOp{kind: kCheck, policy: policy, key: key, token: token}
}

// withTTL returns o asking for ttl.
func (o leaseOp) withTTL(ttl time.Duration) leaseOp { o.ttl = ttl; return o }

// withID returns o carrying a caller and a request ID.
func (o leaseOp) withID(caller, rid string) leaseOp { o.caller, o.rid = caller, rid; return o }

// env is o's command at now. Its caller (who holds a lease it acquires,
// and who asks about one) is o's, "svc" when o has none; its secret
// testSecret.
func (o leaseOp) env(now int64) *raftcmdv1.Envelope {
	secret := testSecret
	if o.badSecret {
		secret = []byte("0123456789abcdeF")
	}
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Lease{Lease: &raftcmdv1.LeaseOp{
		Kind: o.kind, Policy: o.policy, Key: o.key, Token: o.token, TtlNanos: int64(o.ttl),
		RequestId: o.rid, Caller: o.holder(), Secret: secret, TokenJitter: o.jitter,
	}}}
}

// holder is the caller of o's command: o's, "svc" when o has none.
func (o leaseOp) holder() string {
	if o.caller == "" {
		return "svc"
	}
	return o.caller
}

// applyTermLog applies one command entry of a Raft term.
func applyTermLog(f *fsm.FSM, index, term uint64, data []byte) any {
	return f.Apply(&raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: data})
}

// termFSM applies entries of the current Raft term (term, settable) with
// increasing indexes.
type termFSM struct {
	tb    testing.TB
	f     *fsm.FSM
	index uint64
	term  uint64
}

// newTermFSM returns an FSM at term 1 holding ps, put at t0.
func newTermFSM(tb testing.TB, ps ...admission.Policy) *termFSM {
	tb.Helper()
	l := &termFSM{tb: tb, f: fsm.New(fsm.Options{}), term: 1}
	if _, ok := l.apply(putPoliciesEnv(t0, ps...)).(*fsm.PoliciesResult); !ok {
		tb.Fatalf("PutPolicies(%+v) refused", ps)
	}
	return l
}

func (l *termFSM) apply(env *raftcmdv1.Envelope) any {
	l.tb.Helper()
	l.index++
	return applyTermLog(l.f, l.index, l.term, encode(l.tb, env))
}

// do applies op at now and returns the raw result.
func (l *termFSM) do(now int64, op leaseOp) any {
	l.tb.Helper()
	return l.apply(op.env(now))
}

// ok applies op at now, which must return a *fsm.LeaseResult.
func (l *termFSM) ok(now int64, op leaseOp) fsm.LeaseResult {
	l.tb.Helper()
	res := l.do(now, op)
	r, ok := res.(*fsm.LeaseResult)
	if !ok {
		l.tb.Fatalf("%+v at +%v = %v, want *fsm.LeaseResult", op, time.Duration(now-t0), res)
	}
	return *r
}

// acquire applies an Acquire that must be allowed and returns its lease.
func (l *termFSM) acquire(now int64, op leaseOp) lease.Lease {
	l.tb.Helper()
	r := l.ok(now, op)
	if !r.Allowed || r.Duplicate {
		l.tb.Fatalf("%+v at +%v = %+v, want allowed afresh", op, time.Duration(now-t0), r)
	}
	return r.Lease
}

// err applies op at now, which must be refused, and returns the error.
func (l *termFSM) err(now int64, op leaseOp) error {
	l.tb.Helper()
	res := l.do(now, op)
	err, ok := res.(error)
	if !ok {
		l.tb.Fatalf("%+v at +%v = %#v, want an error", op, time.Duration(now-t0), res)
	}
	return err
}

// holds applies a CheckFence and reports Allowed.
func (l *termFSM) holds(now int64, policy, key string, token int64) bool {
	l.tb.Helper()
	return l.ok(now, checkOp(policy, key, token)).Allowed
}

// expire applies an Expire entry.
func (l *termFSM) expire(now int64) {
	l.tb.Helper()
	if res := l.apply(expireEnv(now)); res != nil {
		l.tb.Fatalf("Expire at +%v = %#v, want nil", time.Duration(now-t0), res)
	}
}

// unchanged first applies an Expire at now (so that time is at now and
// everything expired by now is reclaimed), then op at now, and checks that
// op changed no byte of the snapshot, the semaphore count, the next expiry
// or the request-ID table. It returns op's result.
func (l *termFSM) unchanged(now int64, op leaseOp) any {
	l.tb.Helper()
	l.expire(now)
	before, sems, dd := snapshotBytes(l.tb, l.f), l.f.SemaphoreCount(), l.f.DedupeLen()
	next, nok := l.f.NextExpiry()
	res := l.do(now, op)
	if after := snapshotBytes(l.tb, l.f); !bytes.Equal(before, after) {
		l.tb.Fatalf("%+v at +%v changed the snapshot", op, time.Duration(now-t0))
	}
	next2, nok2 := l.f.NextExpiry()
	if l.f.SemaphoreCount() != sems || l.f.DedupeLen() != dd || next2 != next || nok2 != nok {
		l.tb.Fatalf("%+v at +%v changed semaphores %d→%d, request IDs %d→%d or next expiry %d,%v→%d,%v",
			op, time.Duration(now-t0), sems, l.f.SemaphoreCount(), dd, l.f.DedupeLen(), next, nok, next2, nok2)
	}
	return res
}

// leaseOutcome is an Apply result in a form reflect.DeepEqual compares
// across FSMs: errors reduced to their class and field, never their text.
type leaseOutcome struct {
	Kind     string
	Lease    fsm.LeaseResult
	ErrClass string
	Field    string
}

// toLeaseOutcome converts an Apply result.
func toLeaseOutcome(tb testing.TB, res any) leaseOutcome {
	tb.Helper()
	switch r := res.(type) {
	case *fsm.LeaseResult:
		return leaseOutcome{Kind: "lease", Lease: *r}
	case error:
		o := toOutcome(tb, r)
		if errors.Is(r, lease.ErrStale) {
			o.ErrClass = "stale+" + o.ErrClass
		}
		return leaseOutcome{Kind: "error", ErrClass: o.ErrClass, Field: o.Field}
	default:
		o := toOutcome(tb, r)
		return leaseOutcome{Kind: o.String()}
	}
}
