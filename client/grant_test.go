package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// holdGrant admits on key until a decision comes from a grant.
func holdGrant(t *testing.T, c *Client, policy, key string) *Decision {
	t.Helper()
	var d *Decision
	eventually(t, 10*time.Second, "a local decision", func() bool {
		var err error
		d, err = c.Admit(context.Background(), Request{Policy: policy, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return d.Outcome == LocalGrant
	})
	return d
}

// grantHeld is the units c's grant of (policy, key) holds unspent.
func grantHeld(c *Client, policy, key string) int64 {
	if m := c.grants.states.Load(); m != nil {
		if g := (*m)[bucketKey{policy, key}]; g != nil {
			return g.avail.sum()
		}
	}
	return 0
}

// TestGrantLocalDecisionsExact hammers one key from 16 goroutines until the
// key's units are gone: every unit is admitted once, locally or by the
// server, and no local decision spends a unit that was not granted.
func TestGrantLocalDecisionsExact(t *testing.T) {
	const units = 20_000
	s := newGrantServer("p", units, 500, 10*time.Second)
	c := grantClient(t, s, nil)
	ctx := context.Background()
	var local, strict, denied atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for denied.Load() < 50 {
				d, err := c.Admit(ctx, Request{Policy: "p", Key: "k"})
				switch {
				case err != nil:
					t.Error(err)
					return
				case d.Outcome == LocalGrant:
					if !d.Allowed || d.Remaining < 0 {
						t.Errorf("local decision %+v", d)
					}
					local.Add(1)
				case d.Outcome != Verified:
					t.Errorf("outcome %v", d.Outcome)
				case d.Allowed:
					strict.Add(1)
				default:
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	st := c.Stats()
	if st.LocalGrant != uint64(local.Load()) || local.Load() == 0 {
		t.Fatalf("Stats.LocalGrant %d, %d local decisions seen", st.LocalGrant, local.Load())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	st = c.Stats()
	_, avail := s.snapshot("k")
	if s.overUsed != 0 {
		t.Fatalf("%d calls reported more used than granted", s.overUsed)
	}
	// Every unit granted was spent locally, given back or wasted.
	if st.UnitsGranted != uint64(local.Load())+st.UnitsReturned+st.UnitsWasted {
		t.Fatalf("granted %d != local %d + returned %d + wasted %d", st.UnitsGranted, local.Load(), st.UnitsReturned, st.UnitsWasted)
	}
	// Every unit of the key was admitted once or is still the key's.
	if got := local.Load() + strict.Load() + int64(st.UnitsWasted) + avail; got != units || s.strictAllowed != strict.Load() {
		t.Fatalf("local %d + strict %d + wasted %d + left %d = %d, want %d", local.Load(), strict.Load(), st.UnitsWasted, avail, got, units)
	}
	t.Logf("local %d, strict %d, acquired %d, renewed %d, released %d, wasted %d", local.Load(), strict.Load(),
		st.GrantsAcquired, st.GrantsRenewed, st.GrantsReleased, st.UnitsWasted)
}

// TestGrantRenewalReportsUsedAndDemand: a renewal reports the units spent
// so far and the demand seen, and asks for more as the demand grows.
func TestGrantRenewalReportsUsedAndDemand(t *testing.T) {
	s := newGrantServer("p", 1_000_000, 1000, 10*time.Second)
	c := grantClient(t, s, nil)
	holdGrant(t, c, "p", "k")
	eventually(t, 10*time.Second, "a renewal reporting used and demand", func() bool {
		if _, err := c.Admit(context.Background(), Request{Policy: "p", Key: "k"}); err != nil {
			t.Fatal(err)
		}
		calls, _ := s.snapshot("k")
		last := calls[len(calls)-1]
		return last.GetSeq() > 1 && last.GetUsed() > 0 && last.GetDemand() > 0 && last.GetWant() > 1
	})
	calls, _ := s.snapshot("k")
	for i, m := range calls {
		if m.GetHolder() != c.grants.holder || len(m.GetHolder()) != 32 || m.GetSeq() != uint64(i) || m.GetRelease() {
			t.Fatalf("call %d: %v", i, m)
		}
		if i > 0 && m.GetUsed() < calls[i-1].GetUsed() {
			t.Fatalf("used went down: %v after %v", m, calls[i-1])
		}
	}
	if st := c.Stats(); st.GrantsAcquired != 1 || st.GrantsRenewed < 1 {
		t.Fatalf("%+v", st)
	}
}

// TestGrantNewStartedAtVoidsOldUnits: when the server forgot the grant (as a
// group that lost its slot does), the next answer has a new started_at and
// the old unspent units are wasted, never spent.
func TestGrantNewStartedAtVoidsOldUnits(t *testing.T) {
	s := newGrantServer("p", 1_000_000, 1000, 2*time.Second)
	c := grantClient(t, s, nil)
	eventually(t, 10*time.Second, "a grant of 10 units or more", func() bool {
		return holdGrant(t, c, "p", "k").Outcome == LocalGrant && grantHeld(c, "p", "k") >= 10
	})
	// Wait for the renewal the last decision may have asked for, then stop.
	eventually(t, 10*time.Second, "a settled grant", func() bool {
		return c.grants.states.Load() != nil && (*c.grants.states.Load())[bucketKey{"p", "k"}].avail.sum() >= 10
	})
	g := (*c.grants.states.Load())[bucketKey{"p", "k"}]
	// Nothing is spent from here on: the old grant's unspent units are its
	// total, as the server last recorded it, less the local decisions.
	old := s.forget()
	eventually(t, 10*time.Second, "a new grant", func() bool { return c.Stats().GrantsAcquired == 2 })
	if st := c.Stats(); st.UnitsWasted != uint64(old)-st.LocalGrant {
		t.Fatalf("wasted %d, want the old grant's unspent %d", st.UnitsWasted, uint64(old)-st.LocalGrant)
	}
	s.mu.Lock()
	var total int64
	for _, sg := range s.grants {
		total = sg.total
	}
	s.mu.Unlock()
	if a := g.avail.sum(); a != total {
		t.Fatalf("%d units spendable after the new grant of %d", a, total)
	}
}

// TestGrantReleaseOnClose: Close gives back total - used.
func TestGrantReleaseOnClose(t *testing.T) {
	s := newGrantServer("p", 1_000_000, 1000, 10*time.Second)
	c := grantClient(t, s, nil)
	eventually(t, 10*time.Second, "a grant of 10 units or more", func() bool {
		return holdGrant(t, c, "p", "k").Outcome == LocalGrant && grantHeld(c, "p", "k") >= 10
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	calls, avail := s.snapshot("k")
	last := calls[len(calls)-1]
	st := c.Stats()
	if !last.GetRelease() || st.GrantsReleased != 1 || last.GetUsed() != int64(st.LocalGrant) {
		t.Fatalf("last call %v, stats %+v", last, st)
	}
	if st.UnitsReturned != st.UnitsGranted-st.LocalGrant || st.UnitsWasted != 0 || st.UnitsReturned == 0 {
		t.Fatalf("returned %d, granted %d, used %d, wasted %d", st.UnitsReturned, st.UnitsGranted, st.LocalGrant, st.UnitsWasted)
	}
	if want := 1_000_000 - int64(st.LocalGrant) - s.strictAllowed; avail != want {
		t.Fatalf("the key has %d units after the release, want %d", avail, want)
	}
	if _, err := c.Admit(context.Background(), Request{Policy: "p", Key: "k"}); err != ErrClosed {
		t.Fatalf("Admit after Close: %v", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Collector())
	want := fmt.Sprintf(`
# HELP quorate_client_grant_units_total Units of this client's grants, by fate: granted (added by the cluster), returned (given back by a release), wasted (unspent when the grant's local deadline passed, it was replaced or its release failed); for sync (local-plus-global) policies, allowed (allowances answered, each replacing the last) and reported (units admitted locally that the cluster was told of).
# TYPE quorate_client_grant_units_total counter
quorate_client_grant_units_total{fate="allowed"} 0
quorate_client_grant_units_total{fate="granted"} %d
quorate_client_grant_units_total{fate="returned"} %d
quorate_client_grant_units_total{fate="reported"} 0
quorate_client_grant_units_total{fate="wasted"} 0
`, st.UnitsGranted, st.UnitsReturned)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "quorate_client_grant_units_total"); err != nil {
		t.Fatal(err)
	}
}

// TestGrantExhausted: a key with few units: the grant runs out, then every
// request goes to the server, which denies.
func TestGrantExhausted(t *testing.T) {
	s := newGrantServer("p", 30, 10, 10*time.Second)
	c := grantClient(t, s, nil)
	allowed := 0
	for range 200 {
		d, err := c.Admit(context.Background(), Request{Policy: "p", Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		} else if d.Outcome != Verified {
			t.Fatalf("a denial not from the server: %+v", d)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_, avail := s.snapshot("k")
	if st := c.Stats(); int64(allowed)+avail+int64(st.UnitsWasted) != 30 {
		t.Fatalf("allowed %d, left %d, wasted %d: want 30 in all", allowed, avail, st.UnitsWasted)
	}
}

// TestGrantUnimplemented: a cluster without budget leases: one Grant call,
// then strict decisions only, without errors.
func TestGrantUnimplemented(t *testing.T) {
	s := newGrantServer("p", 1000, 100, 10*time.Second)
	s.unimplemented = true
	c := grantClient(t, s, nil)
	for range 50 {
		d, err := c.Admit(context.Background(), Request{Policy: "p", Key: "k"})
		if err != nil || d.Outcome != Verified || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	eventually(t, 10*time.Second, "the refusal noted", func() bool {
		c.grants.mu.Lock()
		defer c.grants.mu.Unlock()
		return !c.grants.refused["p"].IsZero()
	})
	for range 50 {
		if _, err := c.Admit(context.Background(), Request{Policy: "p", Key: "k2"}); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.Verified != 100 || st.LocalGrant != 0 || st.GrantsAcquired != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestGrantNotUsed: DisableGrants, a policy without local mode, requests
// with MaxWait or with Also one of whose checks has no local decisions (the
// client does not know q): no grant, every request verified.
func TestGrantNotUsed(t *testing.T) {
	s := newGrantServer("p", 1000, 100, 10*time.Second)
	off := grantClient(t, s, func(cfg *Config) { cfg.DisableGrants = true })
	plain := grantClient(t, s, func(cfg *Config) { cfg.Policies[0].Local = LocalDecisions{} })
	on := grantClient(t, s, nil)
	holdGrant(t, on, "p", "k")
	for _, tc := range []struct {
		c *Client
		r Request
	}{
		{off, Request{Policy: "p", Key: "k"}},
		{plain, Request{Policy: "p", Key: "k"}},
		{on, Request{Policy: "p", Key: "k", Also: []Check{{Policy: "q", Key: "k"}}}},
		{on, Request{Policy: "p", Key: "k", MaxWait: time.Second}},
	} {
		for range 20 {
			d, err := tc.c.Admit(context.Background(), tc.r)
			if err != nil || d.Outcome != Verified {
				t.Fatalf("%+v: %+v, %v", tc.r, d, err)
			}
		}
	}
	calls, _ := s.snapshot("k")
	for _, m := range calls {
		if m.GetHolder() != on.grants.holder {
			t.Fatalf("a Grant call of a client that should make none: %v", m)
		}
	}
}

// TestGrantSeqConflictResyncs: a FailedPrecondition to a renewal (the
// grant's record has a later seq) drops the grant, wasting its units, and
// asks for a new one at seq 0; refused again, the policy is decided
// strictly for a while.
func TestGrantSeqConflictResyncs(t *testing.T) {
	s := newGrantServer("p", 1_000_000, 1000, 10*time.Second)
	c := grantClient(t, s, nil)
	holdGrant(t, c, "p", "k")
	// Another process claims the holder's grant with a later seq.
	s.mu.Lock()
	for _, g := range s.grants {
		g.seq += 100
	}
	n := len(s.calls)
	s.mu.Unlock()
	eventually(t, 10*time.Second, "the policy refused", func() bool {
		d, err := c.Admit(context.Background(), Request{Policy: "p", Key: "k"})
		if err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
		c.grants.mu.Lock()
		defer c.grants.mu.Unlock()
		return !c.grants.refused["p"].IsZero()
	})
	calls, _ := s.snapshot("k")
	if len(calls) < n+2 || calls[len(calls)-1].GetSeq() != 0 || calls[len(calls)-2].GetSeq() == 0 {
		t.Fatalf("calls after the claim: %v", calls[n:])
	}
	g := (*c.grants.states.Load())[bucketKey{"p", "k"}]
	if g.avail.sum() != 0 {
		t.Fatal("units spendable after the grant was dropped")
	}
}

// TestGrantIdleReleased: a key unused for a ttl gives its grant back; its
// next request starts a new one.
func TestGrantIdleReleased(t *testing.T) {
	s := newGrantServer("p", 1_000_000, 1000, 200*time.Millisecond)
	c := grantClient(t, s, nil)
	holdGrant(t, c, "p", "k")
	eventually(t, 10*time.Second, "the idle grant released", func() bool { return c.Stats().GrantsReleased == 1 })
	calls, avail := s.snapshot("k")
	st := c.Stats()
	if last := calls[len(calls)-1]; !last.GetRelease() || st.UnitsReturned != st.UnitsGranted-st.LocalGrant-st.UnitsWasted {
		t.Fatalf("last call %v, stats %+v", last, st)
	}
	// Wasted units are lost to the key, unless a local deadline voided
	// them (counted wasted) and the release still gave them back: a slow
	// renewal under load. The units spent locally are gone either way.
	left := 1_000_000 - int64(st.LocalGrant) - s.strictAllowed
	if avail < left-int64(st.UnitsWasted) || avail > left {
		t.Fatalf("the key has %d units, want %d less at most %d wasted", avail, left, st.UnitsWasted)
	}
	holdGrant(t, c, "p", "k")
	if st := c.Stats(); st.GrantsAcquired < 2 {
		t.Fatalf("%+v", st)
	}
}

// TestAdmitInto: the same decisions as Admit, into the caller's Decision.
func TestAdmitInto(t *testing.T) {
	s := newGrantServer("p", 1_000_000, 1000, 10*time.Second)
	c := grantClient(t, s, nil)
	var d Decision
	r := Request{Policy: "p", Key: "k"}
	if err := c.AdmitInto(context.Background(), &r, &d); err != nil || d.Outcome != Verified || !d.Allowed || d.RequestID == "" {
		t.Fatalf("%+v, %v", d, err)
	}
	eventually(t, 10*time.Second, "a local decision with 200 units left", func() bool {
		if err := c.AdmitInto(context.Background(), &r, &d); err != nil {
			t.Fatal(err)
		}
		return d.Outcome == LocalGrant && grantHeld(c, "p", "k") >= 200
	})
	if !d.Allowed || d.Limit != 1_000_000 || d.PolicyVersion != 1 || d.DeniedCheck != -1 || d.RequestID != "" {
		t.Fatalf("%+v", d)
	}
	if n := testing.AllocsPerRun(100, func() { _ = c.AdmitInto(context.Background(), &r, &d) }); n != 0 {
		t.Fatalf("%v allocations per local decision", n)
	}
}

func TestPolicyOfLocal(t *testing.T) {
	mg := int64(7)
	burst := int64(50)
	p := policyOf(&quoratev1.Policy{Name: "p", Limit: 100, Burst: &burst, Period: durationpb.New(time.Second),
		Local: &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: &mg, Ttl: durationpb.New(time.Minute)}})
	if p.Local != (LocalDecisions{Mode: "grant", MaxGrant: 7, TTL: time.Minute}) {
		t.Fatalf("%+v", p.Local)
	}
	if s, ok := grantSpecOf(p); !ok || s.maxGrant != 7 || s.ttl != time.Minute {
		t.Fatalf("%+v", s)
	}
	p.Local = LocalDecisions{Mode: "grant"}
	if s, ok := grantSpecOf(p); !ok || s.maxGrant != 5 || s.ttl != 10*time.Second {
		t.Fatalf("defaults: %+v", s)
	}
	if _, ok := grantSpecOf(policyOf(&quoratev1.Policy{Name: "q", Limit: 10})); ok {
		t.Fatal("a policy without local mode has a grant spec")
	}
	if err := (Policy{Name: "p", Local: LocalDecisions{Mode: "overshoot"}}).validate(); err == nil {
		t.Fatal("an unknown local mode validated")
	}
}

// TestGrantLocalDeadline: renewals that get no answer: at the grant's local
// deadline its units stop being spent and count as wasted; requests go to
// the server.
func TestGrantLocalDeadline(t *testing.T) {
	s := newGrantServer("p", 1_000_000, 1000, 400*time.Millisecond)
	c := grantClient(t, s, nil)
	eventually(t, 10*time.Second, "a grant of 10 units or more", func() bool {
		return holdGrant(t, c, "p", "k").Outcome == LocalGrant && grantHeld(c, "p", "k") >= 10
	})
	s.unavailable.Store(true)
	s.mu.Lock()
	var total int64
	for _, g := range s.grants {
		total = g.total
	}
	s.mu.Unlock()
	// No local decision after the deadline; the wasted units are the
	// grant's total (no renewal got through) less the local decisions.
	eventually(t, 10*time.Second, "the units wasted", func() bool {
		st := c.Stats()
		return st.UnitsWasted > 0 && st.UnitsWasted == uint64(total)-st.LocalGrant
	})
	for range 5 {
		d, err := c.Admit(context.Background(), Request{Policy: "p", Key: "k"})
		if err != nil || d.Outcome != Verified {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	s.unavailable.Store(false)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.UnitsGranted != st.LocalGrant+st.UnitsReturned+st.UnitsWasted {
		t.Fatalf("granted %d != local %d + returned %d + wasted %d", st.UnitsGranted, st.LocalGrant, st.UnitsReturned, st.UnitsWasted)
	}
}
