package fsm_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// updateCompat rewrites the compatibility golden files from this binary.
var updateCompat = flag.Bool("update-compat", false, "rewrite testdata/compat.* from this binary's behaviour")

// compatCase is one compatibility log: its length, where its snapshot is
// taken, how many plain keys it draws from, the group's MaxBuckets (small
// in "small", so that the log fills the group and sweeps make room for new
// keys) and the leader clock's largest ordinary step.
type compatCase struct {
	name                    string
	entries, cut, keys, max int
	step                    time.Duration
}

var compatCases = []compatCase{
	{"small", 4000, 2000, 70, 48, 80 * time.Millisecond},
	{"large", 12000, 7000, 1500, 1000, time.Millisecond},
}

func (c compatCase) options() fsm.Options {
	return fsm.Options{MaxBuckets: c.max, MaxDedupeEntries: 400}
}

// compatPolicies are the policies of the compatibility log, one per
// algorithm; "mx" changes algorithm between re-puts (a key keeps another
// algorithm's state until it is decided again).
var compatPolicies = map[string][]admission.Policy{
	"tb": {tokenBucket("tb", 10, time.Second, 5, 3), withRetention(tokenBucket("tb", 20, time.Second, 3, 3), 2*time.Second)},
	"fw": {{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 5, Period: 2 * time.Second}},
	"sw": {{Name: "sw", Algorithm: admission.AlgorithmSlidingWindow, Limit: 6, Period: 3 * time.Second}},
	"sl": {{Name: "sl", Algorithm: admission.AlgorithmSlidingLog, Limit: 4, Period: 2 * time.Second}},
	"qu": {{Name: "qu", Algorithm: admission.AlgorithmQuota, Limit: 30, Calendar: admission.CalendarDay}},
	"cc": {concurrency("cc", 2, 3*time.Second)},
	"mx": {
		tokenBucket("mx", 4, time.Second, 4, 2),
		{Name: "mx", Algorithm: admission.AlgorithmFixedWindow, Limit: 4, Period: time.Second},
		{Name: "mx", Algorithm: admission.AlgorithmSlidingWindow, Limit: 4, Period: time.Second},
		{Name: "mx", Algorithm: admission.AlgorithmSlidingLog, Limit: 3, Period: time.Second},
		{Name: "mx", Algorithm: admission.AlgorithmQuota, Limit: 9, Calendar: admission.CalendarDay},
	},
}

var compatNames = []string{"tb", "fw", "sw", "sl", "qu", "cc", "mx"}

// compatLog generates and applies a log of n entries of every kind over
// every algorithm — admits (multi-check, paced, with request IDs, retried),
// peeks, refunds, reservations and commits, leases (some with a
// reservation), policy changes and deletions, Expire entries, batches, new
// Raft terms and clock jumps — choosing lease tokens and reservation IDs
// from earlier results. It returns the entries (data and term) and a
// description of every result.
func compatLog(tb testing.TB, c compatCase) (entries []compatEntry, outs []string) {
	tb.Helper()
	r := rand.New(rand.NewPCG(8, 0xc0ffee))
	f := fsm.New(c.options())
	n := c.entries
	now, term := t0, uint64(1)
	var tokens []int64
	var reservations, rids []string
	key := func() string {
		if r.IntN(4) == 0 {
			return fmt.Sprintf("{t%d}:%c", r.IntN(3), 'a'+rune(r.IntN(3)))
		}
		return fmt.Sprintf("k%02d", r.IntN(c.keys))
	}
	policy := func() string { return compatNames[r.IntN(len(compatNames))] }
	rateOrQuota := func() string { return []string{"tb", "fw", "sw", "sl", "qu", "mx"}[r.IntN(6)] }
	newID := func() (string, string) {
		id := fmt.Sprintf("r%03d", r.IntN(300))
		rids = append(rids, id)
		return []string{"gw", "svc-a", "svc-b"}[r.IntN(3)], id
	}
	oldID := func() (string, string) {
		if len(rids) == 0 || r.IntN(3) == 0 {
			return newID()
		}
		return []string{"gw", "svc-a", "svc-b"}[r.IntN(3)], rids[len(rids)-1-r.IntN(min(len(rids), 10))]
	}
	token := func() int64 {
		if len(tokens) == 0 || r.IntN(8) == 0 {
			return now
		}
		return tokens[len(tokens)-1-r.IntN(min(len(tokens), 6))]
	}
	op := func(index uint64) *raftcmdv1.Envelope {
		switch x := r.IntN(100); {
		case x < 3:
			var ps []admission.Policy
			for _, name := range compatNames {
				if r.IntN(2) == 0 {
					vs := compatPolicies[name]
					ps = append(ps, vs[r.IntN(len(vs))])
				}
			}
			if len(ps) == 0 {
				ps = compatPolicies["mx"][r.IntN(5):][:1]
			}
			return putPoliciesEnv(now, ps...)
		case x < 4:
			return deleteEnv(now, policy())
		case x < 7:
			return expireEnv(now)
		case x < 12:
			return peekEnv(now, policy(), key())
		case x < 17:
			caller, id := oldID()
			return refundEnv(now, caller, id)
		case x < 23:
			_, id := newID()
			return reserveEnv(now, rateOrQuota(), key(), 1+r.Int64N(3), time.Duration(r.Int64N(int64(4*time.Second))), id)
		case x < 28:
			id := fmt.Sprintf("nope%d", r.IntN(3))
			if len(reservations) > 0 && r.IntN(5) > 0 {
				id = reservations[len(reservations)-1-r.IntN(min(len(reservations), 6))]
			}
			rid := ""
			if r.IntN(2) == 0 {
				_, rid = oldID()
			}
			return commitEnv(now, id, r.Int64N(6), rid)
		case x < 42:
			c := &raftcmdv1.LeaseOp{Policy: "cc", Key: key(), Kind: raftcmdv1.LeaseOp_Kind(1 + r.IntN(4)), Secret: testSecret}
			if r.IntN(20) == 0 {
				c.Policy = policy()
			}
			switch c.Kind {
			case kAcquire:
				if r.IntN(3) == 0 {
					c.ReservePolicy, c.ReserveEstimate = rateOrQuota(), 1+r.Int64N(2)
				}
				c.TtlNanos = leaseTTL(r)
				c.TokenJitter = r.Uint32N(1000)
			case kRelease:
				c.Token = token()
				if r.IntN(2) == 0 {
					actual := r.Int64N(4)
					c.ActualCost = &actual
				}
			default:
				c.Token = token()
				c.TtlNanos = leaseTTL(r)
			}
			if r.IntN(2) == 0 {
				c.Caller, c.RequestId = oldID()
			}
			return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Lease{Lease: c}}
		default:
			tag := r.IntN(3)
			var checks []chk
			for range 1 + r.IntN(3) {
				k := key()
				if r.IntN(2) == 0 {
					k = fmt.Sprintf("{t%d}:%c", tag, 'a'+rune(r.IntN(3)))
				}
				cost := 1 + r.Int64N(3)
				if r.IntN(30) == 0 {
					cost = 0
				}
				p := policy()
				if p == "cc" && r.IntN(4) > 0 {
					p = rateOrQuota()
				}
				checks = append(checks, chk{p, k, cost})
			}
			var o admitOpts
			if r.IntN(3) == 0 {
				o.maxWait = time.Duration(r.Int64N(int64(time.Second)))
			}
			if r.IntN(2) == 0 {
				o.caller, o.rid = oldID()
			}
			return multiEnv(now, o, checks...)
		}
	}
	for len(entries) < n {
		switch x := r.IntN(100); {
		case x < 4:
			now -= r.Int64N(int64(time.Second))
		case x < 6 && (c.keys < 100 || r.IntN(20) == 0):
			now += int64(time.Minute) + r.Int64N(int64(26*time.Hour))
		case x < 30:
		default:
			now += r.Int64N(int64(c.step))
		}
		if r.IntN(60) == 0 {
			term++
		}
		index := uint64(len(entries) + 1)
		var env *raftcmdv1.Envelope
		if len(entries) == 0 {
			var ps []admission.Policy
			for _, name := range compatNames {
				ps = append(ps, compatPolicies[name][0])
			}
			env = putPoliciesEnv(now, ps...)
		} else if r.IntN(12) == 0 {
			b := &raftcmdv1.Batch{}
			for range 1 + r.IntN(5) {
				b.Ops = append(b.Ops, op(index))
			}
			env = &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Batch{Batch: b}}
		} else {
			env = op(index)
		}
		data := encode(tb, env)
		res := applyTermLog(f, index, term, data)
		entries = append(entries, compatEntry{data: data, term: term})
		outs = append(outs, describeResult(res))
		collectHandles(res, &tokens, &reservations)
	}
	return entries, outs
}

// leaseTTL is a lease's requested ttl: mostly the policy's, sometimes 1-4s,
// rarely an invalid one.
func leaseTTL(r *rand.Rand) int64 {
	switch x := r.IntN(10); {
	case x < 5:
		return 0
	case x < 9:
		return int64(time.Second) + r.Int64N(int64(3*time.Second))
	default:
		return r.Int64N(int64(time.Second))
	}
}

type compatEntry struct {
	data []byte
	term uint64
}

// collectHandles remembers the lease tokens and reservation IDs a result
// hands out, for later entries to use.
func collectHandles(res any, tokens *[]int64, reservations *[]string) {
	switch r := res.(type) {
	case *fsm.LeaseResult:
		if r.Lease.Token != 0 {
			*tokens = append(*tokens, r.Lease.Token)
		}
		if r.ReservationID != "" {
			*reservations = append(*reservations, r.ReservationID)
		}
	case *fsm.ReserveResult:
		if r.ReservationID != "" {
			*reservations = append(*reservations, r.ReservationID)
		}
	case *fsm.BatchResult:
		for _, x := range r.Results {
			collectHandles(x, tokens, reservations)
		}
	}
}

// describeResult is an Apply result as text: its type and fields, or an
// error's class and field.
func describeResult(res any) string {
	switch r := res.(type) {
	case error:
		return fmt.Sprintf("error(%s, %q)", errClass(r), fieldOf(r))
	case *fsm.BatchResult:
		parts := make([]string, len(r.Results))
		for i, x := range r.Results {
			parts[i] = describeResult(x)
		}
		return "batch[" + strings.Join(parts, "; ") + "]"
	case *fsm.AdmitResult:
		// Without the checks' windows and quotas, which the FSM reads from
		// its policy table (states and records do not hold them), so the
		// digest of an earlier binary's results still compares.
		c := *r
		c.Checks = slices.Clone(r.Checks)
		for i := range c.Checks {
			c.Checks[i].Window, c.Checks[i].Quota = 0, 0
		}
		return strings.ReplaceAll(fmt.Sprintf("%+v", c), " Window:0s Quota:0}", "}")
	case *fsm.LeaseResult:
		return fmt.Sprintf("%+v", *r)
	case *fsm.ReserveResult:
		return fmt.Sprintf("%+v", *r)
	case *fsm.PeekResult:
		return fmt.Sprintf("%+v", *r)
	case *fsm.RefundResult:
		return fmt.Sprintf("%+v", *r)
	case *fsm.PoliciesResult:
		// Policies print as before local decisions existed when they have
		// none, so the digest of an earlier binary's results still compares.
		return strings.ReplaceAll(fmt.Sprintf("%+v", *r), fmt.Sprintf(" Local:%+v", admission.Local{}), "")
	default:
		return fmt.Sprintf("%T %+v", res, res)
	}
}

// compatDigest sums the descriptions of results.
func compatDigest(outs []string) string {
	h := sha256.New()
	for _, o := range outs {
		fmt.Fprintln(h, o)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// TestCompatibilityWithEarlierBinaries replays a log over every algorithm
// and checks, against golden files written by an earlier binary, that
// every result and the snapshots are the same byte for byte, and that the
// earlier binary's snapshot restores here and continues exactly as the
// earlier binary did. Run with -update-compat only when a change of
// behaviour or format is meant.
func TestCompatibilityWithEarlierBinaries(t *testing.T) {
	for _, c := range compatCases {
		t.Run(c.name, func(t *testing.T) { testCompat(t, c) })
	}
}

func testCompat(t *testing.T, c compatCase) {
	entries, outs := compatLog(t, c)
	cut := replay(t, c, entries[:c.cut])
	cutSnap := snapshotBytes(t, cut)
	got := fmt.Sprintf("results %s\ncut snapshot %s\nfinal snapshot %s\nbuckets at cut %d\n",
		compatDigest(outs), sum(cutSnap), sum(snapshotBytes(t, replay(t, c, entries))), cut.BucketCount())
	golden := filepath.Join("testdata", "compat-"+c.name+".golden")
	snapFile := filepath.Join("testdata", "compat-"+c.name+".snapshot")
	if *updateCompat {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(snapFile, cutSnap, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("this binary's results or snapshots differ from the earlier binary's:\ngot:\n%swant:\n%s", got, want)
	}
	// The earlier binary's snapshot restores and continues like it did.
	old, err := os.ReadFile(snapFile)
	if err != nil {
		t.Fatal(err)
	}
	f := fsm.New(c.options())
	restoreFrom(t, f, old)
	if re := snapshotBytes(t, f); !bytes.Equal(re, old) {
		t.Fatal("the earlier binary's snapshot, restored, persists differently")
	}
	for i := c.cut; i < len(entries); i++ {
		if o := describeResult(applyTermLog(f, uint64(i+1), entries[i].term, entries[i].data)); o != outs[i] {
			t.Fatalf("restored from the earlier snapshot: entry %d: %s, uninterrupted %s", i+1, o, outs[i])
		}
	}
	if !strings.Contains(string(want), "final snapshot "+sum(snapshotBytes(t, f))) {
		t.Error("restored from the earlier snapshot: the final snapshot differs from the earlier binary's")
	}
}

// replay applies entries to a fresh FSM.
func replay(tb testing.TB, c compatCase, entries []compatEntry) *fsm.FSM {
	tb.Helper()
	f := fsm.New(c.options())
	for i, e := range entries {
		applyTermLog(f, uint64(i+1), e.term, e.data)
	}
	return f
}
