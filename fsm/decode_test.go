package fsm_test

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// rawEnvelope builds envelope bytes by hand, so tests can write what
// fsm.Encode would refuse or overwrite: any version, unknown body fields,
// invalid UTF-8.
func rawEnvelope(version uint64, now int64, bodyField protowire.Number, body []byte) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, version)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(now))
	if bodyField != 0 {
		b = protowire.AppendTag(b, bodyField, protowire.BytesType)
		b = protowire.AppendBytes(b, body)
	}
	return b
}

// rawAdmit builds Admit bytes by hand.
func rawAdmit(policy, key string, cost int64) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, policy)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(cost))
	return b
}

// primedLog is a short valid log: policies, a node and a few buckets.
func primedLog(tb testing.TB) [][]byte {
	tb.Helper()
	return [][]byte{
		encode(tb, initialPolicies(t0)),
		encode(tb, registerNodeEnv(t0, "n1", "10.0.0.1:7000", "10.0.0.1:8080")),
		encode(tb, admitEnv(t0, "api", "alice", 5)),
		encode(tb, admitEnv(t0, "tiny", "bob", 1)),
		encode(tb, admitEnv(t0+int64(time.Millisecond), "slow", "carol", 3)),
	}
}

// probeLog is what the fuzz target applies after the fuzzed entry.
func probeLog(tb testing.TB) [][]byte {
	tb.Helper()
	now := t0 + int64(time.Second)
	return [][]byte{
		encode(tb, admitEnv(now, "api", "alice", 10)),
		encode(tb, admitEnv(now, "api", "alice", 10)),
		encode(tb, admitEnv(now, "tiny", "bob", 1)),
		encode(tb, admitEnv(now, "tiny", "bob", 1)),
		encode(tb, admitEnv(now, "nope", "bob", 1)),
		encode(tb, admitEnv(now, "slow", "", 1)),
		encode(tb, registerNodeEnv(now, "n2", "r", "a")),
	}
}

// applyLog applies entries from index first and returns the outcomes.
func applyLog(tb testing.TB, f *fsm.FSM, first uint64, entries [][]byte) []outcome {
	tb.Helper()
	outs := make([]outcome, len(entries))
	for i, data := range entries {
		outs[i] = toOutcome(tb, applyData(f, first+uint64(i), data))
	}
	return outs
}

// tryApply applies data and reports a recovered panic.
func tryApply(f *fsm.FSM, index uint64, data []byte) (res any, panicMsg string, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			panicMsg, panicked = fmt.Sprint(r), true
		}
	}()
	return applyData(f, index, data), "", false
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Add(encode(f, admitEnv(t0, "api", "alice", 1)))
	f.Add(encode(f, admitEnv(t0-1, "nope", "", -5)))
	f.Add(encode(f, putPoliciesEnv(t0, policyVariants["fast"][2])))
	f.Add(encode(f, putPoliciesEnv(t0, invalidPolicies[0])))
	f.Add(encode(f, registerNodeEnv(t0, "n9", "x", "y")))
	f.Add(encode(f, &raftcmdv1.Envelope{NowUnixNano: t0}))
	full := encode(f, admitEnv(t0+5, "api", "alice", 2))
	f.Add(full[:len(full)-3])
	f.Add(rawEnvelope(2, t0, 10, rawAdmit("api", "alice", 1)))
	f.Add(rawEnvelope(1, t0, 13, nil))
	f.Add(rawEnvelope(1, t0, 10, rawAdmit("api", "\xff\xfe", 1)))
	f.Add(rawEnvelope(1, -1, 10, rawAdmit("api", "alice", -1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		primed, probe := primedLog(t), probeLog(t)
		n := uint64(len(primed))

		victim := fsm.New(fsm.Options{})
		applyLog(t, victim, 1, primed)
		res, msg, panicked := tryApply(victim, n+1, data)
		if panicked {
			checkFSMPanic(t, msg)
			// Discard the victim. A fresh FSM decides exactly as one that
			// never saw the bad entry.
			fresh, pristine := fsm.New(fsm.Options{}), fsm.New(fsm.Options{})
			got := applyLog(t, fresh, 1, append(primed[:n:n], probe...))
			want := applyLog(t, pristine, 1, append(primed[:n:n], probe...))
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("after a recovered panic, a fresh FSM decided %v, want %v", got, want)
			}
			return
		}
		first := toOutcome(t, res) // fails on an unexpected result type

		// A twin applying the same bytes agrees, byte for byte.
		twin := fsm.New(fsm.Options{})
		applyLog(t, twin, 1, primed)
		if got := toOutcome(t, applyData(twin, n+1, data)); !reflect.DeepEqual(got, first) {
			t.Fatalf("same entry, different results: %v vs %v", got, first)
		}
		snap := snapshotBytes(t, victim)
		if got := snapshotBytes(t, twin); !bytes.Equal(got, snap) {
			t.Fatal("same log, different snapshots")
		}
		// Later decisions agree between the victim and a replica restored
		// from its snapshot.
		restored := fsm.New(fsm.Options{})
		restoreFrom(t, restored, snap)
		got := applyLog(t, restored, n+2, probe)
		want := applyLog(t, victim, n+2, probe)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("restored replica decided %v, original %v", got, want)
		}
	})
}

func TestApplyPanicsOnUnknownEnvelopeVersion(t *testing.T) {
	admit := rawAdmit("api", "alice", 1)
	for _, v := range []uint64{0, 2, 1 << 31} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			a := newApplier(t, fsm.Options{})
			a.apply(initialPolicies(t0))
			before := snapshotBytes(t, a.f)
			msg := expectPanic(t, func() { applyData(a.f, 4242, rawEnvelope(v, t0+1, 10, admit)) })
			checkFSMPanic(t, msg)
			if !strings.Contains(msg, "4242") {
				t.Errorf("panic %q does not name the entry's index 4242", msg)
			}
			// The version is checked before anything is applied.
			if got := snapshotBytes(t, a.f); !bytes.Equal(got, before) {
				t.Error("an entry with an unknown version changed the state")
			}
		})
	}
	// The same bytes with version 1 are a fine entry, so the panic above is
	// about the version.
	a := newApplier(t, fsm.Options{})
	a.apply(initialPolicies(t0))
	if _, ok := applyData(a.f, 2, rawEnvelope(1, t0+1, 10, admit)).(*fsm.AdmitResult); !ok {
		t.Fatal("the hand-built version 1 entry was not decided")
	}
}

func TestApplyPanicsOnEmptyOrUnknownBody(t *testing.T) {
	for name, data := range map[string][]byte{
		"empty body":         encode(t, &raftcmdv1.Envelope{NowUnixNano: t0}),
		"unknown body field": rawEnvelope(1, t0, 99, []byte{0x0a, 0x01, 'x'}),
		"empty data":         {},
	} {
		t.Run(name, func(t *testing.T) {
			a := newApplier(t, fsm.Options{})
			a.apply(initialPolicies(t0))
			checkFSMPanic(t, expectPanic(t, func() { applyData(a.f, 7, data) }))
		})
	}
}

func TestApplyPanicsOnUndecodableEntry(t *testing.T) {
	valid := encode(t, admitEnv(t0, "api", "alice", 1))
	for name, data := range map[string][]byte{
		"garbage":           {0xff, 0xff, 0xff, 0xff},
		"truncated":         valid[:len(valid)-1],
		"invalid UTF-8 key": rawEnvelope(1, t0, 10, rawAdmit("api", "al\xffce", 1)),
		"wrong wire type":   append(protowire.AppendTag(nil, 1, protowire.BytesType), 0x01, 0x01),
	} {
		t.Run(name, func(t *testing.T) {
			a := newApplier(t, fsm.Options{})
			a.apply(initialPolicies(t0))
			checkFSMPanic(t, expectPanic(t, func() { applyData(a.f, 9, data) }))
		})
	}
}

func TestEncodeStampsVersion(t *testing.T) {
	env := admitEnv(t0, "api", "alice", 1)
	env.Version = 99
	data := encode(t, env)
	var got raftcmdv1.Envelope
	if err := proto.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.GetVersion() != fsm.EnvelopeVersion {
		t.Fatalf("Encode wrote version %d, want %d", got.GetVersion(), fsm.EnvelopeVersion)
	}
	if again := encode(t, admitEnv(t0, "api", "alice", 1)); !bytes.Equal(again, data) {
		t.Fatal("Encode is not deterministic")
	}
}

func TestApplyIgnoresNonCommandLogs(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	a.apply(initialPolicies(t0))
	a.mustAdmit(t0, "api", "alice", 3)
	before := snapshotBytes(t, a.f)
	later := encode(t, admitEnv(t0+int64(time.Hour), "api", "alice", 1))
	for _, typ := range []raft.LogType{raft.LogNoop, raft.LogBarrier, raft.LogConfiguration} {
		for _, data := range [][]byte{nil, {0xff, 0xff}, later} {
			if res := a.f.Apply(&raft.Log{Index: 50, Type: typ, Data: data}); res != nil {
				t.Errorf("Apply(%v) = %#v, want nil", typ, res)
			}
		}
	}
	if got := snapshotBytes(t, a.f); !bytes.Equal(got, before) {
		t.Fatal("a non-command log changed the state")
	}
}
