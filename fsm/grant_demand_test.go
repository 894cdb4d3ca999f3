package fsm_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	"github.com/quorate/quorate/fsm"
)

// TestGrantDemandBoundedBySpend: a holder's claimed demand counts only up
// to a multiple of what the group saw it spend. An honest holder spending
// 1,000 units a second keeps its 1,000-unit top-ups when a new holder
// claims 1e12 units a second without spending (before, it was cut to 1
// unit); the dishonest holder stays at the floor while it spends nothing,
// and one that does spend is counted up to 4 times its rate.
func TestGrantDemandBoundedBySpend(t *testing.T) {
	for _, mode := range []admission.LocalMode{admission.LocalGrant, admission.LocalSync} {
		t.Run(string(mode), func(t *testing.T) {
			a := newApplier(t, fsm.Options{})
			p := leased(tokenBucket("big", 1_000_000, time.Hour, 1_000_000, 10), 1000, 10*time.Second)
			if mode == admission.LocalSync {
				// A bound of 1,000,000 × 1m / 1h: room for both allowances.
				p = tokenBucket("big", 1_000_000, time.Hour, 1_000_000, 10)
				p.Local = admission.Local{Mode: admission.LocalSync, SyncInterval: time.Minute}
			}
			a.putPolicies(t0, p)
			now := t0 + 1
			ms := int64(time.Millisecond)
			const honest, claim = 1_000_000, 1_000_000_000_000_000 // milli-units/s: 1,000/s and 1e12/s
			r := a.grant(now, gcall{policy: "big", key: "k", holder: "honest", want: 1000, demand: honest})
			if r.Added != 1000 || r.DemandMilli != 1000 {
				t.Fatalf("honest holder's first grant: %+v, want 1000 units, its demand counted at the floor (1/s)", r)
			}
			// It spent them all within 100ms: 1,000 units over at least a
			// second, so its claim of 1,000/s counts.
			r = a.grant(now+100*ms, gcall{policy: "big", key: "k", holder: "honest", seq: 1, want: 1000, used: 1000, demand: honest})
			if r.Added != 1000 || r.DemandMilli != honest {
				t.Fatalf("honest holder's renewal: %+v, want 1000 more, its demand counted whole", r)
			}
			d := a.grant(now+200*ms, gcall{policy: "big", key: "k", holder: "liar", caller: "mallory", want: 1000, demand: claim})
			if d.DemandMilli != 1000 || d.ShareMicro > 1000 {
				t.Fatalf("the claim of 1e12/s of a holder never seen spending: %+v, want it counted at 1/s", d)
			}
			r = a.grant(now+300*ms, gcall{policy: "big", key: "k", holder: "honest", seq: 2, want: 1000, used: 2000, demand: honest})
			if r.Added != 1000 || r.ShareMicro < 999_000 {
				t.Fatalf("honest holder beside the claim of 1e12/s: %+v, want its 1000 units (share about 1)", r)
			}
			// Claiming again, still spending nothing: still the floor.
			d = a.grant(now+2000*ms, gcall{policy: "big", key: "k", holder: "liar", caller: "mallory", seq: 1, want: 1000, demand: claim})
			if d.DemandMilli != 1000 {
				t.Fatalf("the claim after spending nothing: %+v, want it counted at 1/s", d)
			}
			// Spending 500 units in the next second: counted up to 4 × 500/s.
			d = a.grant(now+3000*ms, gcall{policy: "big", key: "k", holder: "liar", caller: "mallory", seq: 2, want: 1000, used: 500, demand: claim})
			if d.DemandMilli != 4*500_000 {
				t.Fatalf("the claim after spending 500/s: %+v, want it counted at 2,000/s", d)
			}
			infos := a.f.GrantsOf("big", "k")
			if len(infos) != 2 || infos[0].Holder != "honest" || infos[0].DemandMilli != honest || infos[1].DemandMilli != 4*500_000 {
				t.Errorf("GrantsOf = %+v, want the counted demands", infos)
			}
		})
	}
}

// TestGrantMemoryPerGrant measures the live heap 20,000 grants with
// maximum-length fields add to an FSM (a policy name of 64 bytes, 20 keys
// of 512 bytes, callers of 128 bytes, holders of 64 bytes; 1,000 holders
// per key under 8 callers), after collecting garbage: under 512 bytes a
// grant. A key's policy, key and callers are stored once, whatever its
// holders, and a grant's ID is 16 bytes.
func TestGrantMemoryPerGrant(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 grants")
	}
	const keys, callersPerKey, holdersPerCaller = 20, 8, 125
	const n = keys * callersPerKey * holdersPerCaller
	pad := func(prefix string, i, size int) string {
		s := fmt.Sprint(prefix, i, "-")
		return s + strings.Repeat("x", size-len(s))
	}
	policy := pad("p", 0, admission.MaxNameBytes)
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, leased(tokenBucket(policy, 1_000_000, time.Hour, 1_000_000, 10), 1, time.Hour))
	now := t0 + 1
	// Encoded before the measure begins: the entries are not the FSM's.
	data := make([][]byte, 0, n)
	for k := range keys {
		key := pad("k", k, admission.MaxKeyBytes)
		for c := range callersPerKey {
			caller := pad("c", c, dedupe.MaxCallerBytes)
			for h := range holdersPerCaller {
				env := gcall{policy: policy, key: key, caller: caller, holder: pad("h", c*holdersPerCaller+h, fsm.MaxHolderBytes), want: 1}.env(now)
				data = append(data, encode(t, env))
			}
		}
	}
	before := liveHeap()
	defer runtime.KeepAlive(data)
	for i, d := range data {
		if r, ok := applyData(a.f, a.index+uint64(i)+1, d).(*fsm.GrantResult); !ok || r.Total != 1 {
			t.Fatalf("grant %d: %#v", i, r)
		}
	}
	after := liveHeap() // data still live, as it was before
	if live, _, _ := a.f.GrantStats(); live != n {
		t.Fatalf("%d grants held, want %d", live, n)
	}
	per := (float64(after) - float64(before)) / n
	t.Logf("%.0f bytes of live heap per grant (%d grants)", per, n)
	if per >= 512 {
		t.Errorf("%.0f bytes per grant, want under 512", per)
	}
	runtime.KeepAlive(a.f)
}
