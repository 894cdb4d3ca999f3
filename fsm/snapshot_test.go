package fsm_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// magicLen is the length of the snapshot's magic ("QUORATE\x00").
const magicLen = 8

// populated returns an FSM with policies, nodes and buckets.
func populated(tb testing.TB, keys int) *applier {
	tb.Helper()
	a := newApplier(tb, fsm.Options{})
	a.apply(initialPolicies(t0))
	a.putPolicies(t0, policyVariants["api"][2]) // version 2
	a.apply(registerNodeEnv(t0, "n2", "10.0.0.2:7000", "10.0.0.2:8080"))
	a.apply(registerNodeEnv(t0, "n1", "10.0.0.1:7000", "10.0.0.1:8080"))
	for i := range keys {
		a.mustAdmit(t0+int64(i), policyNames[i%len(policyNames)], fmt.Sprintf("key-%d", i), 1)
	}
	return a
}

// rewriteHeader decodes the header record of a snapshot, lets edit change
// it and re-encodes the snapshot.
func rewriteHeader(tb testing.TB, snap []byte, edit func(*raftcmdv1.SnapshotHeader)) []byte {
	tb.Helper()
	rest := snap[magicLen:]
	n, w := protowire.ConsumeVarint(rest)
	if w < 0 {
		tb.Fatal("cannot read the header length")
	}
	var h raftcmdv1.SnapshotHeader
	if err := proto.Unmarshal(rest[w:w+int(n)], &h); err != nil {
		tb.Fatalf("header: %v", err)
	}
	edit(&h)
	hb, err := proto.MarshalOptions{Deterministic: true}.Marshal(&h)
	if err != nil {
		tb.Fatal(err)
	}
	out := append([]byte{}, snap[:magicLen]...)
	out = binary.AppendUvarint(out, uint64(len(hb)))
	out = append(out, hb...)
	return append(out, rest[w+int(n):]...)
}

func TestSnapshotRoundTrip(t *testing.T) {
	a := populated(t, 50)
	b := newApplier(t, fsm.Options{})
	b.apply(registerNodeEnv(t0+int64(time.Hour), "stale", "x", "y")) // replaced by Restore
	rc := readCloser(snapshotBytes(t, a.f))
	if err := b.f.Restore(rc); err != nil {
		t.Fatal(err)
	}
	if !rc.closed {
		t.Error("Restore did not close its reader")
	}
	compareReads(t, "restored", a.f, b.f)
	for i := range 50 {
		p, k := policyNames[i%len(policyNames)], fmt.Sprintf("key-%d", i)
		if x, y := a.f.Bucket(p, k), b.f.Bucket(p, k); x != y || x.TAT == 0 {
			t.Fatalf("bucket %s/%s: %+v restored as %+v", p, k, x, y)
		}
	}

	// An empty snapshot empties a replica.
	restoreFrom(t, b.f, snapshotBytes(t, fsm.New(fsm.Options{})))
	if b.f.BucketCount() != 0 || len(b.f.Policies()) != 0 || len(b.f.Nodes()) != 0 || b.f.LastNow() != 0 {
		t.Fatalf("after restoring an empty snapshot: %d buckets, %d policies, %d nodes, now %d",
			b.f.BucketCount(), len(b.f.Policies()), len(b.f.Nodes()), b.f.LastNow())
	}
}

// TestSnapshotIndependentOfHistory builds the same state through different
// orders of entries and expects the same snapshot bytes.
func TestSnapshotIndependentOfHistory(t *testing.T) {
	x, y := newApplier(t, fsm.Options{}), newApplier(t, fsm.Options{})
	ps := []string{"a", "b", "c", "d"}
	var batch []*raftcmdv1.Policy
	for _, p := range ps {
		x.apply(registerNodeEnv(t0, "node-"+p, "r"+p, "a"+p))
		batch = append(batch, fsm.PolicyToProto(tokenBucket(p, 100, time.Second, 50, 0)))
	}
	y.putPolicies(t0, tokenBucket("d", 100, time.Second, 50, 0))
	x.apply(&raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_PutPolicies{PutPolicies: &raftcmdv1.PutPolicies{Policies: batch}}})
	for i := len(ps) - 1; i >= 0; i-- {
		y.apply(registerNodeEnv(t0, "node-"+ps[i], "r"+ps[i], "a"+ps[i]))
		y.putPolicies(t0, tokenBucket(ps[i], 100, time.Second, 50, 0))
	}
	const n = 400
	for i := range n {
		j := n - 1 - i
		x.mustAdmit(t0, ps[i%4], fmt.Sprint(i), int64(1+i%5))
		y.mustAdmit(t0, ps[j%4], fmt.Sprint(j), int64(1+j%5))
	}
	if a, b := snapshotBytes(t, x.f), snapshotBytes(t, y.f); !bytes.Equal(a, b) {
		t.Fatalf("same state, different snapshots (%d vs %d bytes)", len(a), len(b))
	}
}

// TestSnapshotIsolatedFromLaterApplies persists a snapshot while the FSM
// keeps applying; the snapshot must hold the state at Snapshot time. Run
// with -race.
func TestSnapshotIsolatedFromLaterApplies(t *testing.T) {
	a := populated(t, 500)
	want := snapshotBytes(t, a.f)
	snap, err := a.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result)
	go func() {
		var sink memSink
		err := snap.Persist(&sink)
		done <- result{sink.Bytes(), err}
	}()
	for i := range 2000 {
		now := t0 + int64(i)*int64(time.Second)
		a.mustAdmit(now, policyNames[i%len(policyNames)], fmt.Sprintf("key-%d", i%700), 1)
		if i%100 == 0 {
			a.putPolicies(now, policyVariants["api"][i/100%3])
			a.apply(registerNodeEnv(now, fmt.Sprint("n", i), "r", "a"))
		}
	}
	r := <-done
	snap.Release()
	if r.err != nil {
		t.Fatalf("Persist: %v", r.err)
	}
	if !bytes.Equal(r.b, want) {
		t.Fatal("a snapshot persisted during later Applies does not hold the state at Snapshot time")
	}
}

// failingSink fails every Write.
type failingSink struct{ memSink }

var errSinkFull = errors.New("sink full")

func (s *failingSink) Write([]byte) (int, error) { return 0, errSinkFull }

func TestPersistCancelsOnWriteError(t *testing.T) {
	a := populated(t, 10)
	snap, err := a.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink failingSink
	if err := snap.Persist(&sink); !errors.Is(err, errSinkFull) {
		t.Fatalf("Persist = %v, want the sink's error", err)
	}
	if !sink.cancelled || sink.closed {
		t.Fatalf("sink cancelled=%v closed=%v, want cancelled only", sink.cancelled, sink.closed)
	}
}

// TestRestoreRejectsGarbage feeds Restore broken snapshots and expects
// ErrBadSnapshot with the previous state intact.
func TestRestoreRejectsGarbage(t *testing.T) {
	good := snapshotBytes(t, populated(t, 20).f)
	cases := map[string][]byte{
		"empty":           {},
		"short magic":     []byte("QUOR"),
		"magic only":      good[:magicLen],
		"wrong magic":     append([]byte("QUORATE\x01"), good[magicLen:]...),
		"lowercase magic": append([]byte("quorate\x00"), good[magicLen:]...),
		"version 0":       rewriteHeader(t, good, func(h *raftcmdv1.SnapshotHeader) { h.Version = 0 }),
		"version 2":       rewriteHeader(t, good, func(h *raftcmdv1.SnapshotHeader) { h.Version = fsm.SnapshotVersion + 1 }),
		"trailing byte":   append(append([]byte{}, good...), 0),
		"trailing record": append(append([]byte{}, good...), good[magicLen:magicLen+10]...),
		"missing bucket":  rewriteHeader(t, good, func(h *raftcmdv1.SnapshotHeader) { h.BucketCount++ }),
		"extra bucket":    rewriteHeader(t, good, func(h *raftcmdv1.SnapshotHeader) { h.BucketCount-- }),
		"missing node":    rewriteHeader(t, good, func(h *raftcmdv1.SnapshotHeader) { h.NodeCount += 1 << 40 }),
		"huge counts":     rewriteHeader(t, good, func(h *raftcmdv1.SnapshotHeader) { h.PolicyCount = 1<<64 - 1 }),
		"huge record":     binary.AppendUvarint([]byte("QUORATE\x00"), 1<<40),
		"record too big":  binary.AppendUvarint([]byte("QUORATE\x00"), 2<<20),
		"bad length":      append([]byte("QUORATE\x00"), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		"bad record":      append(binary.AppendUvarint([]byte("QUORATE\x00"), 3), 0xff, 0xff, 0xff),
	}
	for i := range len(good) {
		cases[fmt.Sprintf("truncated at %d", i)] = good[:i]
	}

	target := populated(t, 7)
	target.apply(registerNodeEnv(t0+int64(time.Hour), "only-here", "r", "a"))
	twin := populated(t, 7)
	twin.apply(registerNodeEnv(t0+int64(time.Hour), "only-here", "r", "a"))
	before := snapshotBytes(t, target.f)
	for name, data := range cases {
		rc := readCloser(data)
		err := target.f.Restore(rc)
		if !errors.Is(err, fsm.ErrBadSnapshot) {
			t.Errorf("%s: Restore = %v, want ErrBadSnapshot", name, err)
		}
		if !rc.closed {
			t.Errorf("%s: Restore did not close its reader", name)
		}
		if got := snapshotBytes(t, target.f); !bytes.Equal(got, before) {
			t.Fatalf("%s: a failed Restore changed the state", name)
		}
	}
	// The target still decides exactly like a replica that never saw the
	// garbage.
	for i := range 30 {
		p, k := policyNames[i%len(policyNames)], fmt.Sprintf("key-%d", i%10)
		if x, y := target.mustAdmit(t0+int64(time.Hour), p, k, 1), twin.mustAdmit(t0+int64(time.Hour), p, k, 1); !reflect.DeepEqual(x, y) {
			t.Fatalf("after failed restores: %+v, twin %+v", x, y)
		}
	}
	compareReads(t, "after failed restores", target.f, twin.f)

	// The unmodified snapshot still restores, so the cases above failed
	// for their corruption.
	restoreFrom(t, target.f, good)
	compareReads(t, "good snapshot", target.f, populated(t, 20).f)
}
