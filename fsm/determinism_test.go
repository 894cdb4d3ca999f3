package fsm_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// policyVariants are the definitions the generators put, by name. Within a
// name, some variants are equal after defaults (a re-put that keeps the
// version) and some differ (version+1).
var policyVariants = map[string][]admission.Policy{
	"api": {
		tokenBucket("api", 60, time.Minute, 20, 10),
		tokenBucket("api", 60, time.Minute, 20, 10),
		tokenBucket("api", 120, time.Minute, 20, 10),
	},
	"fast": {
		tokenBucket("fast", 10, time.Second, 0, 0),
		tokenBucket("fast", 10, time.Second, 10, 10), // same as above after defaults
		tokenBucket("fast", 10, time.Second, 5, 0),
	},
	"slow": {
		tokenBucket("slow", 100, time.Hour, 50, 5),
		tokenBucket("slow", 100, time.Hour, 25, 5),
	},
	"tiny": {
		tokenBucket("tiny", 3, time.Second, 3, 1),
		tokenBucket("tiny", 7, 10*time.Millisecond, 2, 2),
	},
}

// policyNames is policyVariants' keys in a fixed order.
var policyNames = []string{"api", "fast", "slow", "tiny"}

// invalidPolicies are rejected by Validate, so a batch holding one stores
// nothing.
var invalidPolicies = []admission.Policy{
	tokenBucket("api", 0, time.Minute, 0, 0),                         // limit
	tokenBucket("Bad Name", 1, time.Second, 0, 0),                    // name
	tokenBucket("fast", 10, time.Second, 5, 6),                       // max_cost > burst
	{Name: "quota", Algorithm: "quota", Limit: 1, Period: time.Hour}, // not implemented
}

// initialPolicies is the first entry of every generated log.
func initialPolicies(now int64) *raftcmdv1.Envelope {
	var ps []admission.Policy
	for _, name := range policyNames {
		ps = append(ps, policyVariants[name][0])
	}
	return putPoliciesEnv(now, ps...)
}

// genEntries returns n encoded entries drawn from r: policy puts (some
// invalid, some duplicated, some re-puts), node registrations and Admits over
// a few hundred keys with valid and invalid costs, keys and policies, stamped
// by a leader clock that mostly moves forward, sometimes jumps back (a new
// leader with a slow clock) and sometimes jumps far ahead (buckets expire).
func genEntries(tb testing.TB, r *rand.Rand, n int) [][]byte {
	tb.Helper()
	now := t0
	out := [][]byte{encode(tb, initialPolicies(now))}
	for len(out) < n {
		switch x := r.IntN(100); {
		case x < 6:
			now -= r.Int64N(int64(2 * time.Second))
		case x < 8:
			now += int64(time.Hour) + r.Int64N(int64(48*time.Hour))
		case x < 40:
			// Same stamp as the previous entry.
		default:
			now += r.Int64N(int64(10 * time.Millisecond))
		}
		var env *raftcmdv1.Envelope
		switch x := r.IntN(100); {
		case x < 3:
			env = genPutPolicies(r, now)
		case x < 4:
			id := fmt.Sprintf("n%d", r.IntN(5))
			env = registerNodeEnv(now, id, fmt.Sprintf("10.0.0.%d:%d", r.IntN(5), 7000+r.IntN(3)), id+".api:8080")
		default:
			env = admitEnv(now, genPolicyName(r), genKey(r), genCost(r))
		}
		out = append(out, encode(tb, env))
	}
	return out
}

func genPutPolicies(r *rand.Rand, now int64) *raftcmdv1.Envelope {
	var ps []admission.Policy
	for range 1 + r.IntN(3) {
		name := policyNames[r.IntN(len(policyNames))]
		vs := policyVariants[name]
		ps = append(ps, vs[r.IntN(len(vs))])
	}
	switch x := r.IntN(100); {
	case x < 30:
		ps = append(ps, invalidPolicies[r.IntN(len(invalidPolicies))])
	case x < 45:
		ps = append(ps, ps[0])
	}
	r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	return putPoliciesEnv(now, ps...)
}

func genPolicyName(r *rand.Rand) string {
	if r.IntN(100) < 3 {
		return "nope"
	}
	return policyNames[r.IntN(len(policyNames))]
}

func genKey(r *rand.Rand) string {
	switch x := r.IntN(200); {
	case x < 2:
		return ""
	case x < 3:
		return strings.Repeat("x", admission.MaxKeyBytes+1)
	case x < 8:
		return fmt.Sprintf("{tenant-%d}ключ", r.IntN(20))
	case x < 100:
		return fmt.Sprintf("k%03d", r.IntN(4)) // hot keys
	}
	return fmt.Sprintf("k%03d", r.IntN(300))
}

func genCost(r *rand.Rand) int64 {
	switch x := r.IntN(100); {
	case x < 3:
		return 0
	case x < 5:
		return -1 - r.Int64N(5)
	case x < 9:
		return 11 + r.Int64N(100) // above every variant's max_cost
	}
	if r.IntN(4) == 0 {
		return 1 + r.Int64N(4)
	}
	return 1
}

// runAll applies entries to a fresh FSM and returns its outcomes.
func runAll(tb testing.TB, opts fsm.Options, entries [][]byte) (*fsm.FSM, []outcome) {
	tb.Helper()
	f := fsm.New(opts)
	outs := make([]outcome, len(entries))
	for i, data := range entries {
		outs[i] = toOutcome(tb, applyData(f, uint64(i+1), data))
	}
	return f, outs
}

// checkRestoreAt applies entries[:k] to B, restores B's snapshot into C
// (fresh, or dirty: holding unrelated state first), applies entries[k:] to C
// and compares with A, which applied everything: outcomes, read methods and
// snapshot bytes.
func checkRestoreAt(tb testing.TB, opts fsm.Options, entries [][]byte, k int, dirty bool, a *fsm.FSM, aOuts []outcome, aSnap []byte) {
	tb.Helper()
	b := fsm.New(opts)
	for i, data := range entries[:k] {
		applyData(b, uint64(i+1), data)
	}
	bSnap := snapshotBytes(tb, b)

	c := fsm.New(opts)
	if dirty {
		junk := wrap(tb, c)
		junk.putPolicies(t0+int64(1000*time.Hour), tokenBucket("junk", 1, time.Hour, 0, 0), tokenBucket("api", 1, time.Hour, 0, 0))
		junk.apply(registerNodeEnv(t0+int64(1000*time.Hour), "junk", "j:1", "j:2"))
		junk.mustAdmit(t0+int64(1000*time.Hour), "junk", "k001", 1)
		junk.mustAdmit(t0+int64(1000*time.Hour), "api", "k001", 1)
	}
	restoreFrom(tb, c, bSnap)
	if got := snapshotBytes(tb, c); !bytes.Equal(got, bSnap) {
		tb.Fatalf("k=%d dirty=%v: snapshot of the restored FSM differs from the snapshot it was restored from (%d vs %d bytes)", k, dirty, len(got), len(bSnap))
	}
	for i := k; i < len(entries); i++ {
		got := toOutcome(tb, applyData(c, uint64(i+1), entries[i]))
		if !reflect.DeepEqual(got, aOuts[i]) {
			tb.Fatalf("k=%d dirty=%v: entry %d: restored FSM returned %v, uninterrupted FSM %v", k, dirty, i+1, got, aOuts[i])
		}
	}
	if got := snapshotBytes(tb, c); !bytes.Equal(got, aSnap) {
		tb.Fatalf("k=%d dirty=%v: final snapshots differ (%d vs %d bytes)", k, dirty, len(got), len(aSnap))
	}
	compareReads(tb, fmt.Sprintf("k=%d dirty=%v", k, dirty), a, c)
}

// compareReads compares the read methods of two FSMs.
func compareReads(tb testing.TB, what string, a, c *fsm.FSM) {
	tb.Helper()
	if x, y := a.LastNow(), c.LastNow(); x != y {
		tb.Fatalf("%s: LastNow %d vs %d", what, x, y)
	}
	if x, y := a.BucketCount(), c.BucketCount(); x != y {
		tb.Fatalf("%s: BucketCount %d vs %d", what, x, y)
	}
	if x, y := a.Policies(), c.Policies(); !reflect.DeepEqual(x, y) {
		tb.Fatalf("%s: Policies %+v vs %+v", what, x, y)
	}
	if x, y := a.Nodes(), c.Nodes(); !reflect.DeepEqual(x, y) {
		tb.Fatalf("%s: Nodes %+v vs %+v", what, x, y)
	}
}

// checkPersistStable persists f twice, and one FSMSnapshot twice, and
// expects the same bytes each time.
func checkPersistStable(tb testing.TB, f *fsm.FSM) []byte {
	tb.Helper()
	first := snapshotBytes(tb, f)
	if again := snapshotBytes(tb, f); !bytes.Equal(first, again) {
		tb.Fatalf("two snapshots of the same state differ (%d vs %d bytes)", len(first), len(again))
	}
	snap, err := f.Snapshot()
	if err != nil {
		tb.Fatalf("Snapshot: %v", err)
	}
	defer snap.Release()
	if p1, p2 := persistBytes(tb, snap), persistBytes(tb, snap); !bytes.Equal(p1, first) || !bytes.Equal(p2, first) {
		tb.Fatalf("persisting one FSMSnapshot twice gave different bytes")
	}
	return first
}

// tally counts what a run exercised, so a degenerate generator fails the
// test instead of passing vacuously.
type tally map[string]int

func tallyOutcomes(outs []outcome) tally {
	t := tally{}
	for _, o := range outs {
		switch o.Kind {
		case "admit":
			if o.Admit.Decision.Allowed {
				t["allowed"]++
			} else {
				t["denied"]++
			}
		case "policies":
			t["policies"]++
			for _, p := range o.Policies {
				if p.Version > 1 {
					t["version>1"]++
				}
			}
		case "error":
			t[o.ErrClass]++
			t[o.ErrClass+"/"+o.Field]++
		default:
			t[o.Kind]++
		}
	}
	return t
}

func TestApplyDeterminism(t *testing.T) {
	const n = 3000
	for _, tc := range []struct {
		name string
		opts fsm.Options
	}{
		{"default", fsm.Options{}},
		{"max_buckets_60", fsm.Options{MaxBuckets: 60}},
	} {
		for seed := uint64(1); seed <= 4; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", tc.name, seed), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
				entries := genEntries(t, r, n)
				a, aOuts := runAll(t, tc.opts, entries)
				aSnap := checkPersistStable(t, a)

				// A second uninterrupted replica agrees with A.
				a2, a2Outs := runAll(t, tc.opts, entries)
				if !reflect.DeepEqual(aOuts, a2Outs) {
					t.Fatal("two replicas applying the same log returned different results")
				}
				if !bytes.Equal(snapshotBytes(t, a2), aSnap) {
					t.Fatal("two replicas applying the same log have different snapshots")
				}

				got := tallyOutcomes(aOuts)
				t.Logf("outcomes: %v", got)
				want := []string{"allowed", "denied", "policies", "version>1", "nil",
					"unknown_policy/", "invalid_request/key", "invalid_request/cost", "invalid_policy"}
				if tc.opts.MaxBuckets != 0 {
					want = append(want, "group_full/")
				}
				for _, w := range want {
					if got[w] == 0 {
						t.Errorf("the generated log exercised no %q (tally %v)", w, got)
					}
				}

				ks := []int{0, 1, n / 3, n / 2, n - 1, n, 1 + r.IntN(n-1)}
				for i, k := range ks {
					checkRestoreAt(t, tc.opts, entries, k, i%2 == 1, a, aOuts, aSnap)
				}
			})
		}
	}
}

// TestApplyDeterminismSweeps checks that the generated logs really expire
// and reclaim buckets, so that the determinism test covers the sweep.
func TestApplyDeterminismSweeps(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	entries := genEntries(t, r, 3000)
	f := fsm.New(fsm.Options{})
	drops, maxCount := 0, 0
	prevNow := int64(0)
	for i, data := range entries {
		before := f.BucketCount()
		applyData(f, uint64(i+1), data)
		after := f.BucketCount()
		if after < before {
			drops++
			if before-after > fsm.SweepPerApply {
				t.Fatalf("entry %d: BucketCount dropped by %d, more than SweepPerApply %d", i+1, before-after, fsm.SweepPerApply)
			}
		}
		if after > before+1 {
			t.Fatalf("entry %d: BucketCount grew by %d", i+1, after-before)
		}
		maxCount = max(maxCount, after)
		if now := f.LastNow(); now < prevNow {
			t.Fatalf("entry %d: LastNow went back from %d to %d", i+1, prevNow, now)
		} else {
			prevNow = now
		}
	}
	if drops == 0 || maxCount < 50 {
		t.Fatalf("generated log: %d sweeps, at most %d buckets; want both sweeps and a few dozen live buckets", drops, maxCount)
	}
}

// fuzzEntries turns fuzz bytes into a log: the first byte picks the restore
// point, then each 4 bytes (op, key, cost, time) make one entry after an
// initial PutPolicies.
func fuzzEntries(tb testing.TB, data []byte) (entries [][]byte, k int) {
	tb.Helper()
	now := t0
	entries = [][]byte{encode(tb, initialPolicies(now))}
	if len(data) == 0 {
		return entries, 0
	}
	split, data := int(data[0]), data[1:]
	for ; len(data) >= 4; data = data[4:] {
		op, kb, cb, tb8 := data[0], data[1], data[2], int8(data[3])
		switch tb8 {
		case 127:
			now += int64(25 * time.Hour)
		case -128:
			now -= int64(time.Hour)
		default:
			now += int64(tb8) * int64(time.Millisecond)
		}
		var env *raftcmdv1.Envelope
		switch op % 32 {
		case 0:
			name := policyNames[int(kb)%len(policyNames)]
			vs := policyVariants[name]
			ps := []admission.Policy{vs[int(kb)/len(policyNames)%len(vs)]}
			if cb%2 == 1 {
				ps = append(ps, invalidPolicies[int(cb/2)%len(invalidPolicies)])
			}
			env = putPoliciesEnv(now, ps...)
		case 1:
			env = registerNodeEnv(now, fmt.Sprintf("n%d", kb%4), fmt.Sprintf("r%d", cb), "api")
		default:
			policy := policyNames[int(op)%len(policyNames)]
			if op%32 == 2 {
				policy = "nope"
			}
			key := fmt.Sprintf("k%d", kb%64)
			switch kb {
			case 255:
				key = ""
			case 254:
				key = strings.Repeat("y", admission.MaxKeyBytes+1)
			}
			cost := int64(cb % 8)
			switch cb {
			case 255:
				cost = -1
			case 254:
				cost = 1_000_000
			}
			env = admitEnv(now, policy, key, cost)
		}
		entries = append(entries, encode(tb, env))
	}
	return entries, split % (len(entries) + 1)
}

func FuzzApplyDeterminism(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 3, 1, 1, 1, 3, 1, 1, 1, 3, 1, 1, 0})
	f.Add([]byte{5, 4, 7, 3, 10, 5, 7, 3, 10, 6, 7, 3, 127, 4, 7, 1, 0, 4, 8, 1, 0})
	f.Add([]byte{9, 0, 5, 1, 0, 0, 9, 3, 0, 3, 9, 7, 10, 1, 2, 3, 4, 2, 9, 1, 0, 7, 255, 1, 0, 7, 254, 1, 0})
	f.Add([]byte{1, 3, 1, 255, 0, 3, 1, 254, 0, 3, 1, 0, 0, 4, 9, 1, 128, 4, 9, 1, 128, 4, 9, 1, 5})
	f.Add(bytes.Repeat([]byte{3, 1, 2, 1}, 64))
	f.Add(append([]byte{200}, bytes.Repeat([]byte{4, 9, 1, 200, 3, 10, 1, 127, 0, 4, 0, 0}, 20)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, k := fuzzEntries(t, data)
		opts := fsm.Options{MaxBuckets: 40}
		a, aOuts := runAll(t, opts, entries)
		aSnap := snapshotBytes(t, a)
		checkRestoreAt(t, opts, entries, k, false, a, aOuts, aSnap)
		if testing.Short() {
			return
		}
		checkPersistStable(t, a)
		checkRestoreAt(t, opts, entries, len(entries)/2, true, a, aOuts, aSnap)
	})
}
