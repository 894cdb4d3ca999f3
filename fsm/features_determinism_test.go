package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// featPolicies are the policies of the feature determinism test; "sh" is a
// shadow policy and "fa" keeps request IDs for 2s only.
var featPolicies = []admission.Policy{
	withRetention(tokenBucket("fa", 10, time.Second, 5, 3), 2*time.Second),
	tokenBucket("fb", 60, time.Minute, 20, 10),
	shadowOf(tokenBucket("sh", 5, time.Second, 2, 2)),
	tokenBucket("slow", 100, time.Hour, 50, 5),
}

// featOutcome is an Apply result of any command in a form reflect.DeepEqual
// compares across FSMs; errors are reduced to their class and field.
type featOutcome struct {
	Kind     string
	Admit    fsm.AdmitResult
	Peek     fsm.PeekResult
	Refund   fsm.RefundResult
	Policies []fsm.PolicyVersion
	ErrClass string
	Field    string
}

func toFeatOutcome(tb testing.TB, res any) featOutcome {
	tb.Helper()
	switch r := res.(type) {
	case *fsm.PeekResult:
		return featOutcome{Kind: "peek", Peek: *r}
	case *fsm.RefundResult:
		return featOutcome{Kind: "refund", Refund: *r}
	case error:
		o := featOutcome{Kind: "error", ErrClass: errClass(r), Field: fieldOf(r)}
		switch {
		case errors.Is(r, fsm.ErrNothingToRefund):
			o.ErrClass = "nothing_to_refund"
		case errors.Is(r, fsm.ErrNotAdmitted):
			o.ErrClass = "not_admitted"
		}
		return o
	}
	o := toOutcome(tb, res)
	return featOutcome{Kind: o.Kind, Admit: o.Admit, Policies: o.Policies}
}

// genFeatEntries returns n encoded entries mixing multi-check and paced
// Admits, shadow decisions, peeks, refunds, deletes and re-creations of
// policies and Expire entries, with request IDs from a small pool (retries,
// reuses) and a leader clock that mostly moves forward.
func genFeatEntries(tb testing.TB, r *rand.Rand, n int) [][]byte {
	tb.Helper()
	now := t0
	out := [][]byte{encode(tb, putPoliciesEnv(now, featPolicies...))}
	var recent []*raftcmdv1.Admit
	rid := func() (string, string) { return []string{"", "gw"}[r.IntN(2)], fmt.Sprintf("q%02d", r.IntN(30)) }
	for len(out) < n {
		switch x := r.IntN(100); {
		case x < 4:
			now -= r.Int64N(int64(time.Second))
		case x < 6:
			now += int64(time.Hour) + r.Int64N(int64(time.Hour))
		case x < 35:
		default:
			now += r.Int64N(int64(30 * time.Millisecond))
		}
		var env *raftcmdv1.Envelope
		switch x := r.IntN(100); {
		case x < 3:
			ps := []admission.Policy{featPolicies[r.IntN(len(featPolicies))]}
			if r.IntN(2) == 0 {
				ps = featPolicies // re-create whatever was deleted
			}
			if r.IntN(3) == 0 {
				ps = append([]admission.Policy(nil), ps...)
				ps[0].Burst++ // a new definition: version+1
			}
			env = putPoliciesEnv(now, ps...)
		case x < 5:
			names := []string{featPolicies[r.IntN(len(featPolicies))].Name}
			if r.IntN(4) == 0 {
				names = append(names, []string{"nope", featPolicies[r.IntN(len(featPolicies))].Name}[r.IntN(2)])
			}
			env = deleteEnv(now, names...)
		case x < 8:
			env = expireEnv(now)
		case x < 18:
			env = peekEnv(now, genFeatPolicy(r), genFeatKey(r, r.IntN(3)))
		case x < 28:
			caller, id := rid()
			if len(recent) > 0 && r.IntN(3) > 0 {
				prev := recent[len(recent)-1-r.IntN(min(len(recent), 8))]
				caller, id = prev.GetCaller(), prev.GetRequestId()
			}
			env = refundEnv(now, caller, id)
		default:
			tag := r.IntN(3)
			var checks []chk
			for range 1 + r.IntN(4) {
				cost := 1 + r.Int64N(3)
				if r.IntN(40) == 0 {
					cost = 0
				}
				checks = append(checks, chk{genFeatPolicy(r), genFeatKey(r, tag), cost})
			}
			var o admitOpts
			if r.IntN(3) == 0 {
				o.maxWait = time.Duration(r.Int64N(int64(500 * time.Millisecond)))
			}
			if r.IntN(3) > 0 {
				o.caller, o.rid = rid()
			}
			env = multiEnv(now, o, checks...)
			c := env.GetAdmit()
			if len(recent) > 0 && r.IntN(5) == 0 { // a retry of a recent request
				prev := recent[len(recent)-1-r.IntN(min(len(recent), 8))]
				env.Body = &raftcmdv1.Envelope_Admit{Admit: prev}
			} else if c.GetRequestId() != "" {
				recent = append(recent, c)
			}
		}
		out = append(out, encode(tb, env))
	}
	return out
}

func genFeatPolicy(r *rand.Rand) string {
	if r.IntN(50) == 0 {
		return "nope"
	}
	return featPolicies[r.IntN(len(featPolicies))].Name
}

func genFeatKey(r *rand.Rand, tag int) string {
	return fmt.Sprintf("{t%d}:%c", tag, 'a'+rune(r.IntN(3)))
}

func runFeat(tb testing.TB, entries [][]byte) (*fsm.FSM, []featOutcome) {
	tb.Helper()
	f := fsm.New(fsm.Options{})
	outs := make([]featOutcome, len(entries))
	for i, data := range entries {
		outs[i] = toFeatOutcome(tb, applyData(f, uint64(i+1), data))
	}
	return f, outs
}

func tallyFeat(outs []featOutcome) tally {
	t := tally{}
	for _, o := range outs {
		t[o.Kind]++
		switch o.Kind {
		case "admit":
			a := o.Admit
			switch {
			case a.Duplicate:
				t["duplicate"]++
			case a.Multi && a.DeniedCheck > 0:
				t["multi denied by a later check"]++
			case a.Multi && a.Decision.Allowed:
				t["multi allowed"]++
			}
			if a.Wait > 0 {
				t["paced"]++
			}
			for _, c := range a.Checks {
				if c.ShadowDenied {
					t["shadow_denied"]++
				}
			}
		case "refund":
			t[fmt.Sprint("refunded=", o.Refund.Refunded)]++
		case "error":
			t[o.ErrClass+"/"+o.Field]++
		}
	}
	return t
}

func TestFeatureDeterminism(t *testing.T) {
	const n = 2500
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0xfea7))
			entries := genFeatEntries(t, r, n)
			a, aOuts := runFeat(t, entries)
			aSnap := checkPersistStable(t, a)
			a2, a2Outs := runFeat(t, entries)
			if !reflect.DeepEqual(aOuts, a2Outs) || !bytes.Equal(snapshotBytes(t, a2), aSnap) {
				t.Fatal("two replicas applying the same log diverged")
			}
			got := tallyFeat(aOuts)
			t.Logf("outcomes: %v", got)
			for _, w := range []string{"multi allowed", "multi denied by a later check", "paced", "shadow_denied", "duplicate", "peek",
				"refunded=true", "refunded=false", "nothing_to_refund/", "not_admitted/", "policies", "unknown_policy/",
				"invalid_request/also[0].cost", "request_id_reused+invalid_request/request_id"} {
				if got[w] == 0 {
					t.Errorf("the generated log exercised no %q", w)
				}
			}
			for _, k := range []int{1, n / 4, n / 2, n - 1, 1 + r.IntN(n-1)} {
				b := fsm.New(fsm.Options{})
				for i, data := range entries[:k] {
					applyData(b, uint64(i+1), data)
				}
				c := fsm.New(fsm.Options{})
				restoreFrom(t, c, snapshotBytes(t, b))
				for i := k; i < n; i++ {
					if got := toFeatOutcome(t, applyData(c, uint64(i+1), entries[i])); !reflect.DeepEqual(got, aOuts[i]) {
						t.Fatalf("restored at %d: entry %d: %+v, uninterrupted %+v", k, i+1, got, aOuts[i])
					}
				}
				if !bytes.Equal(snapshotBytes(t, c), aSnap) {
					t.Fatalf("restored at %d: final snapshots differ", k)
				}
				compareReads(t, fmt.Sprint("restored at ", k), a, c)
			}
		})
	}
}
