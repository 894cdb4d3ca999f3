package fsm_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// policyVariants are the definitions the generators put, by name. Within a
// name, some variants are equal after defaults (a re-put that keeps the
// version) and some differ (version+1). Some keep request IDs for only a
// second or two, so that entries expire within a generated log.
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
		withRetention(tokenBucket("fast", 10, time.Second, 5, 0), time.Second),
	},
	"slow": {
		tokenBucket("slow", 100, time.Hour, 50, 5),
		tokenBucket("slow", 100, time.Hour, 25, 5),
	},
	"tiny": {
		withRetention(tokenBucket("tiny", 3, time.Second, 3, 1), 2*time.Second),
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
// invalid, some duplicated, some re-puts), node registrations, Expire entries
// and Admits over a few hundred keys with valid and invalid costs, keys and
// policies, most with request IDs from a small pool of a few callers (exact
// retries, reuses with another payload, collisions), stamped by a leader
// clock that mostly moves forward, sometimes jumps back (a new leader with a
// slow clock) and sometimes jumps far ahead (buckets and entries expire).
func genEntries(tb testing.TB, r *rand.Rand, n int) [][]byte {
	tb.Helper()
	now := t0
	out := [][]byte{encode(tb, initialPolicies(now))}
	var recent []*raftcmdv1.Admit // the last Admits with a request ID
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
		case x < 7:
			env = expireEnv(now)
		default:
			env = admitEnv(now, genPolicyName(r), genKey(r), genCost(r))
			c := env.GetAdmit()
			switch y := r.IntN(100); {
			case y < 30:
				// No request ID.
			case y >= 57 || len(recent) == 0:
				c.Caller, c.RequestId = genRequestID(r)
			case y < 50:
				// A retry: the same request again.
				prev := recent[len(recent)-1-r.IntN(min(len(recent), 8))]
				c.Policy, c.Key, c.Cost, c.Caller, c.RequestId = prev.Policy, prev.Key, prev.Cost, prev.Caller, prev.RequestId
			case y < 57:
				// The same request ID with this new payload.
				prev := recent[len(recent)-1-r.IntN(min(len(recent), 8))]
				c.Caller, c.RequestId = prev.Caller, prev.RequestId
			}
			if c.RequestId != "" {
				recent = append(recent, c)
				if len(recent) > 64 {
					recent = recent[32:]
				}
			}
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

// genRequestID draws a caller and a request ID from small pools, so that
// distinct requests collide on a request ID, under the same caller or
// another.
func genRequestID(r *rand.Rand) (caller, rid string) {
	callers := []string{"", "svc-a", "svc-b"}
	return callers[r.IntN(len(callers))], fmt.Sprintf("req-%02d", r.IntN(40))
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
		// Request IDs the generated logs use, under other payloads.
		junk.mustAdmitID(t0+int64(1000*time.Hour), req{"svc-a", "req-01", "junk", "k001", 1})
		junk.mustAdmitID(t0+int64(1000*time.Hour), req{"", "req-02", "api", "k002", 1})
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
	if x, y := a.DedupeLen(), c.DedupeLen(); x != y {
		tb.Fatalf("%s: DedupeLen %d vs %d", what, x, y)
	}
	if x, y := a.DedupeBytes(), c.DedupeBytes(); x != y {
		tb.Fatalf("%s: DedupeBytes %d vs %d", what, x, y)
	}
	x, xok := a.NextExpiry()
	y, yok := c.NextExpiry()
	if x != y || xok != yok {
		tb.Fatalf("%s: NextExpiry %d %v vs %d %v", what, x, xok, y, yok)
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
			if o.Admit.Duplicate {
				t["duplicate"]++
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
		{"max_dedupe_25", fsm.Options{MaxDedupeEntries: 25}},
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
					"unknown_policy/", "invalid_request/key", "invalid_request/cost", "invalid_policy",
					"duplicate", "request_id_reused+invalid_request/request_id"}
				if tc.opts.MaxBuckets != 0 {
					want = append(want, "group_full/")
				}
				if tc.opts.MaxDedupeEntries != 0 {
					want = append(want, "dedupe_full/")
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
// and reclaim buckets and request-ID entries, by the sweep of every Apply and
// by Expire entries, and retry requests after their entries expired, so that
// the determinism test covers all of it.
func TestApplyDeterminismSweeps(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	entries := genEntries(t, r, 3000)
	f := fsm.New(fsm.Options{})
	decided := map[[2]string]*raftcmdv1.Admit{} // by (caller, request ID): the last payload decided afresh
	counts := map[string]int{}
	maxBuckets, maxEntries := 0, 0
	prevNow := int64(0)
	for i, data := range entries {
		var env raftcmdv1.Envelope
		if err := proto.Unmarshal(data, &env); err != nil {
			t.Fatal(err)
		}
		kind, limit := "apply", fsm.SweepPerApply
		if env.GetExpire() != nil {
			kind, limit = "expire", fsm.SweepPerApply+fsm.ExpireBatch
		}
		bBefore, dBefore := f.BucketCount(), f.DedupeLen()
		res := applyData(f, uint64(i+1), data)
		for _, c := range []struct {
			what          string
			before, after int
		}{{"buckets", bBefore, f.BucketCount()}, {"entries", dBefore, f.DedupeLen()}} {
			if c.after > c.before+1 {
				t.Fatalf("entry %d: %s grew by %d", i+1, c.what, c.after-c.before)
			}
			if c.before-c.after > limit {
				t.Fatalf("entry %d (%s): %s dropped by %d, more than %d", i+1, kind, c.what, c.before-c.after, limit)
			}
			if c.after < c.before {
				counts[c.what+" reclaimed by "+kind]++
			}
		}
		maxBuckets, maxEntries = max(maxBuckets, f.BucketCount()), max(maxEntries, f.DedupeLen())
		if c := env.GetAdmit(); c.GetRequestId() != "" {
			if ar, ok := res.(*fsm.AdmitResult); ok && !ar.Duplicate {
				k := [2]string{c.GetCaller(), c.GetRequestId()}
				if p := decided[k]; p != nil && p.GetPolicy() == c.GetPolicy() && p.GetKey() == c.GetKey() && p.GetCost() == c.GetCost() {
					counts["decided again after expiry"]++
				}
				decided[k] = c
			}
		}
		if now := f.LastNow(); now < prevNow {
			t.Fatalf("entry %d: LastNow went back from %d to %d", i+1, prevNow, now)
		} else {
			prevNow = now
		}
	}
	t.Logf("%v; at most %d buckets and %d request-ID entries", counts, maxBuckets, maxEntries)
	for _, w := range []string{"buckets reclaimed by apply", "buckets reclaimed by expire", "entries reclaimed by apply",
		"entries reclaimed by expire", "decided again after expiry"} {
		if counts[w] == 0 {
			t.Errorf("the generated log has no %q", w)
		}
	}
	if maxBuckets < 50 || maxEntries < 20 {
		t.Fatalf("generated log: at most %d buckets and %d request-ID entries; want a few dozen live", maxBuckets, maxEntries)
	}
}
