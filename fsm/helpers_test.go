package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/lease"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// t0 is an arbitrary leader timestamp (2023-11-14T22:13:20Z) that the tests
// start from.
const t0 = int64(1_700_000_000) * int64(time.Second)

// testSecret is the secret of the tests' leases and reservations, as a
// leader's handler would have drawn it.
var testSecret = []byte("0123456789abcdef")

// svcHolder holds the leases the tests acquire without a caller of their
// own (leaseOp.env).
var svcHolder = lease.Holder{Caller: "svc", Secret: [lease.SecretSize]byte(testSecret)}

// memSink is an in-memory raft.SnapshotSink.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

var _ raft.SnapshotSink = (*memSink)(nil)

func (s *memSink) ID() string { return "mem" }

func (s *memSink) Cancel() error {
	s.cancelled = true
	return nil
}

func (s *memSink) Close() error {
	s.closed = true
	return nil
}

// snapshotBytes takes a snapshot of f and persists it into memory.
func snapshotBytes(tb testing.TB, f *fsm.FSM) []byte {
	tb.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		tb.Fatalf("Snapshot: %v", err)
	}
	defer snap.Release()
	return persistBytes(tb, snap)
}

// persistBytes persists snap into memory and checks the sink was closed.
func persistBytes(tb testing.TB, snap raft.FSMSnapshot) []byte {
	tb.Helper()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		tb.Fatalf("Persist: %v", err)
	}
	if !sink.closed || sink.cancelled {
		tb.Fatalf("Persist left the sink closed=%v cancelled=%v, want closed and not cancelled", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

// restoreFrom restores f from b and fails the test on error.
func restoreFrom(tb testing.TB, f *fsm.FSM, b []byte) {
	tb.Helper()
	if err := f.Restore(readCloser(b)); err != nil {
		tb.Fatalf("Restore: %v", err)
	}
}

// closeTracker is an io.ReadCloser over a byte slice that records Close.
type closeTracker struct {
	*bytes.Reader
	closed bool
}

func (c *closeTracker) Close() error {
	c.closed = true
	return nil
}

func readCloser(b []byte) *closeTracker {
	return &closeTracker{Reader: bytes.NewReader(b)}
}

// encode encodes an envelope with fsm.Encode.
func encode(tb testing.TB, env *raftcmdv1.Envelope) []byte {
	tb.Helper()
	data, err := fsm.Encode(env)
	if err != nil {
		tb.Fatalf("Encode: %v", err)
	}
	return data
}

// applyData applies one command entry.
func applyData(f *fsm.FSM, index uint64, data []byte) any {
	return f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data})
}

// applier applies envelopes to one FSM with increasing log indexes.
type applier struct {
	tb    testing.TB
	f     *fsm.FSM
	index uint64
}

func newApplier(tb testing.TB, opts fsm.Options) *applier {
	return &applier{tb: tb, f: fsm.New(opts)}
}

// wrap returns an applier for an existing FSM, starting at log index 1000.
func wrap(tb testing.TB, f *fsm.FSM) *applier {
	return &applier{tb: tb, f: f, index: 1000}
}

func (a *applier) apply(env *raftcmdv1.Envelope) any {
	a.tb.Helper()
	a.index++
	return applyData(a.f, a.index, encode(a.tb, env))
}

// admit applies an Admit and returns its raw result.
func (a *applier) admit(now int64, policy, key string, cost int64) any {
	a.tb.Helper()
	return a.apply(admitEnv(now, policy, key, cost))
}

// mustAdmit applies an Admit that must be decided (allowed or denied).
func (a *applier) mustAdmit(now int64, policy, key string, cost int64) fsm.AdmitResult {
	a.tb.Helper()
	res := a.admit(now, policy, key, cost)
	ar, ok := res.(*fsm.AdmitResult)
	if !ok {
		a.tb.Fatalf("Admit(%q, %q, %d) at %d = %#v, want *fsm.AdmitResult", policy, key, cost, now, res)
	}
	return *ar
}

// admitErr applies an Admit that must be refused and returns the error.
func (a *applier) admitErr(now int64, policy, key string, cost int64) error {
	a.tb.Helper()
	res := a.admit(now, policy, key, cost)
	err, ok := res.(error)
	if !ok {
		a.tb.Fatalf("Admit(%q, %.20q, %d) at %d = %#v, want an error", policy, key, cost, now, res)
	}
	return err
}

// putPolicies applies a PutPolicies that must succeed.
func (a *applier) putPolicies(now int64, ps ...admission.Policy) fsm.PoliciesResult {
	a.tb.Helper()
	res := a.apply(putPoliciesEnv(now, ps...))
	pr, ok := res.(*fsm.PoliciesResult)
	if !ok {
		a.tb.Fatalf("PutPolicies = %#v, want *fsm.PoliciesResult", res)
	}
	return *pr
}

// setPolicies applies a SetPolicies that must succeed: a data group's copy
// of a meta table holding ps, each at version 1, as of meta index 1 (as a
// data group's leader copies the table a first PutPolicies wrote).
func (a *applier) setPolicies(now int64, ps ...admission.Policy) {
	a.tb.Helper()
	if res := a.apply(setPoliciesEnv(now, ps...)); res != nil {
		a.tb.Fatalf("SetPolicies = %#v, want nil", res)
	}
}

func setPoliciesEnv(now int64, ps ...admission.Policy) *raftcmdv1.Envelope {
	c := &raftcmdv1.SetPolicies{MetaIndex: 1}
	for _, p := range ps {
		c.Policies = append(c.Policies, &raftcmdv1.PolicyRecord{Policy: fsm.PolicyToProto(p), Version: 1})
	}
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_SetPolicies{SetPolicies: c}}
}

func admitEnv(now int64, policy, key string, cost int64) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Admit{
		Admit: &raftcmdv1.Admit{Policy: policy, Key: key, Cost: cost},
	}}
}

func putPoliciesEnv(now int64, ps ...admission.Policy) *raftcmdv1.Envelope {
	c := &raftcmdv1.PutPolicies{}
	for _, p := range ps {
		c.Policies = append(c.Policies, fsm.PolicyToProto(p))
	}
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_PutPolicies{PutPolicies: c}}
}

func registerNodeEnv(now int64, id, raftAddr, apiAddr string) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_RegisterNode{
		RegisterNode: &raftcmdv1.RegisterNode{Id: id, RaftAddr: raftAddr, ApiAddr: apiAddr, FeatureLevel: fsm.FeatureLevel},
	}}
}

// tokenBucket returns a token-bucket policy.
func tokenBucket(name string, limit int64, period time.Duration, burst, maxCost int64) admission.Policy {
	return admission.Policy{
		Name:      name,
		Algorithm: admission.AlgorithmTokenBucket,
		Limit:     limit,
		Period:    period,
		Burst:     burst,
		MaxCost:   maxCost,
	}
}

// outcome is an Apply result in a form that reflect.DeepEqual can compare
// across FSMs: errors are reduced to their class (errors.Is) and field
// (errors.As), never their text.
type outcome struct {
	Kind     string
	Admit    fsm.AdmitResult
	Policies []fsm.PolicyVersion
	ErrClass string
	Field    string
}

func (o outcome) String() string {
	switch o.Kind {
	case "admit":
		return fmt.Sprintf("admit%+v", o.Admit)
	case "policies":
		return fmt.Sprintf("policies%+v", o.Policies)
	case "error":
		return fmt.Sprintf("error(%s, field %q)", o.ErrClass, o.Field)
	}
	return o.Kind
}

// errClass names the sentinel an Apply error wraps.
func errClass(err error) string {
	var classes []string
	for _, c := range []struct {
		name string
		err  error
	}{
		{"unknown_policy", fsm.ErrUnknownPolicy},
		{"group_full", fsm.ErrGroupFull},
		{"dedupe_full", fsm.ErrDedupeFull},
		{"request_id_reused", fsm.ErrRequestIDReused},
		{"invalid_request", admission.ErrInvalidRequest},
		{"invalid_policy", admission.ErrInvalidPolicy},
	} {
		if errors.Is(err, c.err) {
			classes = append(classes, c.name)
		}
	}
	if len(classes) == 0 {
		return "unclassified"
	}
	return strings.Join(classes, "+")
}

// toOutcome converts an Apply result.
func toOutcome(tb testing.TB, res any) outcome {
	tb.Helper()
	switch r := res.(type) {
	case nil:
		return outcome{Kind: "nil"}
	case *fsm.AdmitResult:
		return outcome{Kind: "admit", Admit: *r}
	case *fsm.PoliciesResult:
		return outcome{Kind: "policies", Policies: r.Policies}
	case error:
		o := outcome{Kind: "error", ErrClass: errClass(r)}
		var fe *admission.FieldError
		if errors.As(r, &fe) {
			o.Field = fe.Field
		}
		return o
	default:
		tb.Fatalf("Apply returned %T (%#v), want nil, *AdmitResult, *PoliciesResult or error", res, res)
		return outcome{}
	}
}

// expectPanic runs fn and returns the panic value as a string; it fails the
// test if fn does not panic.
func expectPanic(tb testing.TB, fn func()) (msg string) {
	tb.Helper()
	panicked := true
	func() {
		defer func() {
			if r := recover(); r != nil {
				msg = fmt.Sprint(r)
			}
		}()
		fn()
		panicked = false
	}()
	if !panicked {
		tb.Fatalf("no panic, want one starting with %q", "fsm:")
	}
	return msg
}

// checkFSMPanic asserts a recovered panic value is one of fsm's own.
func checkFSMPanic(tb testing.TB, msg string) {
	tb.Helper()
	if !strings.HasPrefix(msg, "fsm:") {
		tb.Fatalf("panic %q, want a message starting with %q", msg, "fsm:")
	}
}

// admitIDEnv is an Admit carrying a caller and a request ID.
func admitIDEnv(now int64, caller, rid, policy, key string, cost int64) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Admit{
		Admit: &raftcmdv1.Admit{Policy: policy, Key: key, Cost: cost, RequestId: rid, Caller: caller},
	}}
}

func expireEnv(now int64) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Expire{Expire: &raftcmdv1.Expire{}}}
}

// req is an Admit with a request ID, for the dedupe tests.
type req struct {
	caller, rid, policy, key string
	cost                     int64
}

func (r req) env(now int64) *raftcmdv1.Envelope {
	return admitIDEnv(now, r.caller, r.rid, r.policy, r.key, r.cost)
}

// mustAdmitID applies r, which must be decided.
func (a *applier) mustAdmitID(now int64, r req) fsm.AdmitResult {
	a.tb.Helper()
	res := a.apply(r.env(now))
	ar, ok := res.(*fsm.AdmitResult)
	if !ok {
		a.tb.Fatalf("Admit%+v at %d = %v, want *fsm.AdmitResult", r, now, res)
	}
	return *ar
}

// admitIDErr applies r, which must be refused, and returns the error.
func (a *applier) admitIDErr(now int64, r req) error {
	a.tb.Helper()
	res := a.apply(r.env(now))
	err, ok := res.(error)
	if !ok {
		a.tb.Fatalf("Admit%+v at %d = %#v, want an error", r, now, res)
	}
	return err
}

// expire applies an Expire entry, whose result must be nil.
func (a *applier) expire(now int64) {
	a.tb.Helper()
	if res := a.apply(expireEnv(now)); res != nil {
		a.tb.Fatalf("Expire at %d = %#v, want nil", now, res)
	}
}
