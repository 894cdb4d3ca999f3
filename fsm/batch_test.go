package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

func batchEnv(now int64, ops ...*raftcmdv1.Envelope) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Batch{Batch: &raftcmdv1.Batch{Ops: ops}}}
}

func batchResults(t *testing.T, res any) []any {
	t.Helper()
	b, ok := res.(*fsm.BatchResult)
	if !ok {
		t.Fatalf("batch result %T (%v), want *fsm.BatchResult", res, res)
	}
	return b.Results
}

// A batch entry decides its ops exactly as the same ops in entries of their
// own at the same time would: same results, same state afterwards.
func TestBatchAppliesLikeSingleEntries(t *testing.T) {
	single, batched := newApplier(t, fsm.Options{}), newApplier(t, fsm.Options{})
	p := tokenBucket("p", 5, time.Minute, 5, 3)
	single.putPolicies(t0, p)
	batched.putPolicies(t0, p)

	var ops []*raftcmdv1.Envelope
	for i := range 40 {
		key := fmt.Sprintf("k%d", i%4)
		switch i % 5 {
		case 0:
			ops = append(ops, admitIDEnv(0, "c", fmt.Sprintf("r%d", i), "p", key, 2))
		case 1:
			ops = append(ops, admitIDEnv(0, "c", fmt.Sprintf("r%d", i-1), "p", fmt.Sprintf("k%d", (i-1)%4), 2)) // a retry
		case 2:
			ops = append(ops, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Peek{Peek: &raftcmdv1.Peek{Policy: "p", Key: key}}})
		case 3:
			ops = append(ops, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Refund{Refund: &raftcmdv1.Refund{Caller: "c", RequestId: fmt.Sprintf("r%d", i-3)}}})
		default:
			ops = append(ops, admitEnv(0, "p", key, 1))
		}
	}
	now := t0 + int64(time.Second)
	var want []string
	for _, op := range ops {
		op.NowUnixNano = now
		want = append(want, fmt.Sprintf("%+v", describe(single.apply(op))))
		op.NowUnixNano = 0
	}
	got := batchResults(t, batched.apply(batchEnv(now, ops...)))
	if len(got) != len(ops) {
		t.Fatalf("%d results for %d ops", len(got), len(ops))
	}
	duplicates := 0
	for i := range ops {
		if g := fmt.Sprintf("%+v", describe(got[i])); g != want[i] {
			t.Errorf("op %d: batched %s, alone %s", i, g, want[i])
		}
		if r, ok := got[i].(*fsm.AdmitResult); ok && r.Duplicate {
			duplicates++
		}
	}
	if duplicates != 8 {
		t.Errorf("%d duplicate answers, want the 8 retries", duplicates)
	}
	if !bytes.Equal(snapshotBytes(t, single.f), snapshotBytes(t, batched.f)) {
		t.Fatal("state after the batch differs from the state after the same ops one by one")
	}
}

// describe makes a result comparable across FSMs (errors by text).
func describe(res any) any {
	switch r := res.(type) {
	case error:
		return "error: " + r.Error()
	case *fsm.AdmitResult:
		return *r
	case *fsm.PeekResult:
		return *r
	case *fsm.RefundResult:
		return *r
	}
	return res
}

// Ops that may not be batched are refused one by one; the rest applies.
func TestBatchRefusesUnbatchableOpsAlone(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, tokenBucket("p", 5, time.Minute, 5, 1))
	res := batchResults(t, a.apply(batchEnv(t0,
		admitEnv(0, "p", "a", 1),
		putPoliciesEnv(0, tokenBucket("q", 1, time.Second, 1, 1)),
		batchEnv(0, admitEnv(0, "p", "a", 1)),
		&raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Reserve{Reserve: &raftcmdv1.Reserve{Policy: "p", Key: "a", Estimate: 1, Secret: testSecret}}},
		&raftcmdv1.Envelope{},
		admitEnv(0, "p", "a", 1),
	)))
	for i, want := range []bool{true, false, false, false, false, true} {
		_, decided := res[i].(*fsm.AdmitResult)
		err, _ := res[i].(error)
		switch {
		case want && !decided:
			t.Errorf("op %d: %v, want a decision", i, res[i])
		case !want && !errors.Is(err, fsm.ErrNotBatchable):
			t.Errorf("op %d: %v, want ErrNotBatchable", i, res[i])
		}
	}
	if _, ok := a.f.Policy("q"); ok {
		t.Error("a refused PutPolicies inside a batch was applied")
	}
	if got := remaining(t, a, "p", "a"); got != 3 {
		t.Errorf("remaining %d after the batch, want 3 (two admits)", got)
	}
	// Too many ops: refused whole.
	ops := make([]*raftcmdv1.Envelope, fsm.MaxBatchOps+1)
	for i := range ops {
		ops[i] = admitEnv(0, "p", "b", 1)
	}
	if err, _ := a.apply(batchEnv(t0, ops...)).(error); err == nil {
		t.Fatal("an oversized batch was applied")
	}
	if got := remaining(t, a, "p", "b"); got != 5 {
		t.Errorf("an oversized batch spent: remaining %d", got)
	}
}

// Every op of a batch is routed on its own: an op for a slot the group does
// not own is refused, the others apply.
func TestBatchRoutesEachOp(t *testing.T) {
	a := newApplier(t, fsm.Options{DataGroup: true})
	a.setPolicies(t0, tokenBucket("p", 10, time.Second, 10, 1))
	low := shard.SlotRange{Start: 0, End: 2048}
	kLow, kHigh := keyInSlotRange(t, low), keyInSlotRange(t, shard.SlotRange{Start: 2048, End: shard.SlotCount})
	a.apply(setOwnershipEnv(t0, 1, 2, shard.Assignment{Range: low, Group: 1, Epoch: 2}))
	res := batchResults(t, a.apply(batchEnv(t0, routedAdmit(0, 2, "p", kLow), routedAdmit(0, 2, "p", kHigh), routedAdmit(0, 1, "p", kLow))))
	if _, ok := res[0].(*fsm.AdmitResult); !ok {
		t.Errorf("owned slot: %v", res[0])
	}
	if err, _ := res[1].(error); !errors.Is(err, fsm.ErrWrongGroup) {
		t.Errorf("slot not owned: %v, want ErrWrongGroup", res[1])
	}
	if err, _ := res[2].(error); !errors.Is(err, fsm.ErrStaleEpoch) {
		t.Errorf("stale epoch: %v, want ErrStaleEpoch", res[2])
	}
}

// ApplyBatch (raft's batching FSM) gives the results and state of Apply
// entry by entry, and skips configuration entries.
func TestApplyBatchEqualsApply(t *testing.T) {
	one, many := newApplier(t, fsm.Options{}), newApplier(t, fsm.Options{})
	p := tokenBucket("p", 3, time.Minute, 3, 1)
	var logs []*raft.Log
	logs = append(logs, &raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: encode(t, putPoliciesEnv(t0, p))})
	logs = append(logs, &raft.Log{Index: 2, Term: 1, Type: raft.LogConfiguration})
	for i := range 10 {
		env := admitEnv(t0+int64(i)*int64(time.Second), "p", fmt.Sprintf("k%d", i%2), 1)
		if i == 5 {
			env = batchEnv(t0+int64(i)*int64(time.Second), admitEnv(0, "p", "k0", 1), admitEnv(0, "p", "k1", 1))
		}
		logs = append(logs, &raft.Log{Index: uint64(3 + i), Term: 1 + uint64(i/4), Type: raft.LogCommand, Data: encode(t, env)})
	}
	got := many.f.ApplyBatch(logs)
	if len(got) != len(logs) {
		t.Fatalf("%d results for %d logs", len(got), len(logs))
	}
	for i, l := range logs {
		want := one.f.Apply(l)
		if w, g := fmt.Sprintf("%+v", describeDeep(want)), fmt.Sprintf("%+v", describeDeep(got[i])); w != g {
			t.Errorf("log %d: ApplyBatch %s, Apply %s", l.Index, g, w)
		}
	}
	if !bytes.Equal(snapshotBytes(t, one.f), snapshotBytes(t, many.f)) {
		t.Fatal("ApplyBatch left another state than Apply")
	}
}

func describeDeep(res any) any {
	if b, ok := res.(*fsm.BatchResult); ok {
		out := make([]any, len(b.Results))
		for i, r := range b.Results {
			out[i] = describe(r)
		}
		return out
	}
	return describe(res)
}

// remaining peeks at a key's whole units left at t0.
func remaining(t *testing.T, a *applier, policy, key string) int64 {
	t.Helper()
	r, ok := a.apply(&raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_Peek{Peek: &raftcmdv1.Peek{Policy: policy, Key: key}}}).(*fsm.PeekResult)
	if !ok {
		t.Fatal("peek was not answered")
	}
	return r.Decision.Remaining
}
