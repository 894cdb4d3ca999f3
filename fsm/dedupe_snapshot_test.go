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

// dedupeGroup is a group with request-ID entries from three callers under
// two policies (retention 10m and 5s), allowed and denied, and the first
// results.
func dedupeGroup(tb testing.TB, opts fsm.Options) (*applier, []req, []fsm.AdmitResult) {
	tb.Helper()
	a := newApplier(tb, opts)
	a.putPolicies(t0, apiPolicy, withRetention(tokenBucket("short", 10, time.Second, 5, 0), 5*time.Second))
	var reqs []req
	var firsts []fsm.AdmitResult
	denied := 0
	for i := range 200 {
		r := req{fmt.Sprint("caller-", i%3), fmt.Sprintf("%032x", i*7919), "api", fmt.Sprint("key-", i%7), int64(1 + i%10)}
		if i%4 == 1 {
			r.policy, r.cost = "short", int64(1+i%5)
		}
		res := a.mustAdmitID(t0+int64(i)*int64(time.Millisecond), r)
		if !res.Decision.Allowed {
			denied++
		}
		reqs, firsts = append(reqs, r), append(firsts, res)
	}
	if denied == 0 || denied == len(reqs) {
		tb.Fatalf("test setup: %d of %d denied", denied, len(reqs))
	}
	return a, reqs, firsts
}

func TestDedupeSnapshotRoundTrip(t *testing.T) {
	a, reqs, firsts := dedupeGroup(t, fsm.Options{})
	snap := snapshotBytes(t, a.f)

	fresh := newApplier(t, fsm.Options{})
	// A dirty replica: its own entries, one under a key the snapshot also
	// has (another payload), one the snapshot lacks.
	dirty := newApplier(t, fsm.Options{})
	dirty.putPolicies(t0, apiPolicy)
	clash := reqs[0]
	clash.key = "clash"
	dirty.mustAdmitID(t0+int64(time.Hour), clash)
	only := req{"caller-0", "only-in-dirty", "api", "k", 1}
	dirty.mustAdmitID(t0+int64(time.Hour), only)
	// A replica whose bound is below the snapshot's entry count: restore
	// keeps every entry.
	small := newApplier(t, fsm.Options{MaxDedupeEntries: 3})

	for name, b := range map[string]*applier{"fresh": fresh, "dirty": dirty, "small bound": small} {
		t.Run(name, func(t *testing.T) {
			restoreFrom(t, b.f, snap)
			if got := snapshotBytes(t, b.f); !bytes.Equal(got, snap) {
				t.Fatalf("snapshot of the restored FSM differs (%d vs %d bytes)", len(got), len(snap))
			}
			compareReads(t, "restored", a.f, b.f)
			if b.f.DedupeLen() != len(reqs) {
				t.Fatalf("DedupeLen %d, want %d", b.f.DedupeLen(), len(reqs))
			}
			// Retries on the restored replica get the recorded results
			// and spend nothing; a reuse is still detected.
			now := t0 + sec
			for i, r := range reqs {
				if got := b.mustAdmitID(now, r); !reflect.DeepEqual(got, dupOf(firsts[i])) {
					t.Fatalf("retry %d after restore: %+v, want %+v", i, got, dupOf(firsts[i]))
				}
			}
			other := reqs[5]
			other.cost++
			checkReused(t, "reuse after restore", b.admitIDErr(now, other))
			if name == "dirty" {
				if got := b.mustAdmitID(now, only); got.Duplicate {
					t.Fatalf("an entry of the replaced state answered: %+v", got)
				}
			}
			if name == "small bound" {
				if err := b.admitIDErr(now, req{"x", "new", "api", "k", 1}); !errors.Is(err, fsm.ErrDedupeFull) {
					t.Fatalf("new request ID over the bound: %v, want ErrDedupeFull", err)
				}
			}
		})
	}

	// A restored replica and the original agree from then on: retries,
	// expiry of the short entries, new requests, the end of retention.
	b := newApplier(t, fsm.Options{})
	restoreFrom(t, b.f, snap)
	steps := []struct {
		env *raftcmdv1.Envelope
		dup bool // for an Admit: whether it must be answered as a duplicate
	}{
		{reqs[1].env(t0 + 2*sec), true},
		{expireEnv(t0 + 5*sec + int64(100*time.Millisecond)), false},
		{reqs[1].env(t0 + 6*sec), false}, // "short", 5s retention: new again
		{reqs[2].env(t0 + 6*sec), true},  // "api", 10m retention
		{req{"new", "r", "api", "key-1", 1}.env(t0 + 6*sec), false},
		{reqs[2].env(t0 + int64(10*time.Minute) + 2*sec), false},
		{expireEnv(t0 + int64(21*time.Minute)), false},
	}
	for i, s := range steps {
		x, y := toOutcome(t, a.apply(s.env)), toOutcome(t, b.apply(s.env))
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("step %d: original %v, restored %v", i, x, y)
		}
		if s.env.GetAdmit() != nil && (x.Kind != "admit" || x.Admit.Duplicate != s.dup) {
			t.Fatalf("step %d: %v, want an admit with Duplicate=%v", i, x, s.dup)
		}
		if x, y := snapshotBytes(t, a.f), snapshotBytes(t, b.f); !bytes.Equal(x, y) {
			t.Fatalf("step %d: the restored replica diverged (%d vs %d bytes)", i, len(x), len(y))
		}
		compareReads(t, fmt.Sprint("step ", i), a.f, b.f)
	}
	if a.f.DedupeLen() != 0 {
		t.Fatalf("DedupeLen %d after every retention ended, want 0", a.f.DedupeLen())
	}
}

// splitRecords splits a snapshot into its length-prefixed records (the
// header first) and checks that joinRecords gives the same bytes back.
func splitRecords(tb testing.TB, snap []byte) [][]byte {
	tb.Helper()
	var recs [][]byte
	for rest := snap[magicLen:]; len(rest) > 0; {
		n, w := protowire.ConsumeVarint(rest)
		if w < 0 || uint64(len(rest)-w) < n {
			tb.Fatal("cannot split the snapshot into records")
		}
		recs = append(recs, rest[w:w+int(n)])
		rest = rest[w+int(n):]
	}
	if !bytes.Equal(joinRecords(recs), snap) {
		tb.Fatal("splitRecords/joinRecords do not round-trip")
	}
	return recs
}

func joinRecords(recs [][]byte) []byte {
	out := []byte("QUORATE\x00")
	for _, r := range recs {
		out = binary.AppendUvarint(out, uint64(len(r)))
		out = append(out, r...)
	}
	return out
}

// editDedupe returns snap with its i-th dedupe record edited (the records
// are last in a snapshot).
func editDedupe(tb testing.TB, snap []byte, i int, edit func(*raftcmdv1.DedupeRecord)) []byte {
	tb.Helper()
	recs := splitRecords(tb, snap)
	var h raftcmdv1.SnapshotHeader
	if err := proto.Unmarshal(recs[0], &h); err != nil {
		tb.Fatal(err)
	}
	j := len(recs) - int(h.GetDedupeCount()) + i
	var d raftcmdv1.DedupeRecord
	if err := proto.Unmarshal(recs[j], &d); err != nil {
		tb.Fatal(err)
	}
	if len(d.GetFingerprint()) != 16 || d.GetRequestId() == "" {
		tb.Fatalf("record %d is not a dedupe record: %+v", j, &d)
	}
	edit(&d)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&d)
	if err != nil {
		tb.Fatal(err)
	}
	recs[j] = b
	return joinRecords(recs)
}

func TestRestoreRejectsBadDedupeRecords(t *testing.T) {
	a, _, _ := dedupeGroup(t, fsm.Options{})
	good := snapshotBytes(t, a.f)
	last := a.f.DedupeLen() - 1
	cases := map[string][]byte{
		"missing record": rewriteHeader(t, good, func(h *raftcmdv1.SnapshotHeader) { h.DedupeCount++ }),
		"extra record":   rewriteHeader(t, good, func(h *raftcmdv1.SnapshotHeader) { h.DedupeCount-- }),
	}
	for _, n := range []int{0, 1, 15, 17, 32} {
		fp := bytes.Repeat([]byte{0xab}, n)
		for _, i := range []int{0, last} {
			cases[fmt.Sprintf("%d-byte fingerprint in record %d", n, i)] = editDedupe(t, good, i, func(d *raftcmdv1.DedupeRecord) { d.Fingerprint = fp })
		}
	}
	target, _, _ := dedupeGroup(t, fsm.Options{})
	target.mustAdmitID(t0+int64(time.Hour), req{"only", "here", "api", "k", 1})
	before := snapshotBytes(t, target.f)
	for name, data := range cases {
		if err := target.f.Restore(readCloser(data)); !errors.Is(err, fsm.ErrBadSnapshot) {
			t.Errorf("%s: Restore = %v, want ErrBadSnapshot", name, err)
		}
		if !bytes.Equal(snapshotBytes(t, target.f), before) {
			t.Fatalf("%s: a failed Restore changed the state", name)
		}
	}

	// Controls: the same edit with a 16-byte fingerprint restores, and the
	// edited entry now refuses its original payload as a reuse.
	edited := editDedupe(t, good, 0, func(d *raftcmdv1.DedupeRecord) { d.Fingerprint = bytes.Repeat([]byte{0xab}, 16) })
	restoreFrom(t, target.f, edited)
	if !bytes.Equal(snapshotBytes(t, target.f), edited) {
		t.Fatal("the edited snapshot does not round-trip")
	}
	recs := splitRecords(t, edited)
	var d raftcmdv1.DedupeRecord
	if err := proto.Unmarshal(recs[len(recs)-target.f.DedupeLen()], &d); err != nil {
		t.Fatal(err)
	}
	_, reqs, _ := dedupeGroup(t, fsm.Options{})
	for _, r := range reqs {
		if r.caller == d.GetCaller() && r.rid == d.GetRequestId() {
			checkReused(t, "payload of an entry with another fingerprint", target.admitIDErr(t0+sec, r))
			return
		}
	}
	t.Fatalf("no request for the first dedupe record %q/%q", d.GetCaller(), d.GetRequestId())
}
