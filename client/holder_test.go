package client

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// testHolder is a Holder of s's policy (and of any policy in more) as a
// node holds one: its Grant calls go to s through a Connect client over
// HTTP, one call each; grantCalls counts them by key. Strict decisions go
// to s the same way (decide).
type testHolder struct {
	*Holder
	cl         quoratev1connect.AdmissionServiceClient
	mu         sync.Mutex
	grantCalls map[string]int
}

func newTestHolder(t testing.TB, s *grantServer, mod func(*HolderConfig), more ...*quoratev1.Policy) *testHolder {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(hc.CloseIdleConnections)
	cl := quoratev1connect.NewAdmissionServiceClient(hc, serveTB(t, s))
	local := &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(s.maxGrant), Ttl: durationpb.New(s.ttl)}
	if s.syncInterval > 0 {
		local = &quoratev1.LocalDecisions{Mode: "sync", SyncInterval: durationpb.New(s.syncInterval)}
	}
	policies := map[string]*quoratev1.Policy{s.policy: {Name: s.policy, Algorithm: "token_bucket", Limit: s.limit,
		Period: durationpb.New(time.Hour), Version: 1, Local: local}}
	for _, p := range more {
		policies[p.GetName()] = p
	}
	th := &testHolder{cl: cl, grantCalls: map[string]int{}}
	cfg := HolderConfig{
		Grant: func(ctx context.Context, req *quoratev1.GrantRequest) (*quoratev1.GrantResponse, error) {
			resp, err := cl.Grant(ctx, connect.NewRequest(req))
			th.mu.Lock()
			th.grantCalls[req.GetKey()]++
			th.mu.Unlock()
			if err != nil {
				return nil, err
			}
			return resp.Msg, nil
		},
		Policy: func(name string) (*quoratev1.Policy, bool) {
			p, ok := policies[name]
			return p, ok
		},
		Caller: "node-1",
	}
	if mod != nil {
		mod(&cfg)
	}
	h, err := NewHolder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	th.Holder = h
	t.Cleanup(h.Close)
	return th
}

func (th *testHolder) calls(key string) int {
	th.mu.Lock()
	defer th.mu.Unlock()
	return th.grantCalls[key]
}

// decide is what a node does with a request: the holder's decision, else
// the cluster's (an Admit call). local says which.
func (th *testHolder) decide(t testing.TB, r *Request) (allowed, local bool) {
	t.Helper()
	if d := th.Decide(r); d != nil {
		if !d.Allowed || d.Outcome != LocalGrant {
			t.Errorf("a holder's decision %+v", d)
		}
		return true, true
	}
	resp, err := th.cl.Admit(context.Background(), connect.NewRequest(&quoratev1.AdmitRequest{Policy: r.Policy, Key: r.Key, Cost: proto.Int64(r.Cost)}))
	if err != nil {
		t.Error(err)
		return false, false
	}
	return resp.Msg.GetAllowed(), false
}

// TestHolderDecidesHotKeyLocally: a hot key's requests, from 4 goroutines
// until the key's units are gone, are mostly decided by the holder after
// its first grant; every unit is admitted once, locally or by the server,
// and every unit granted is spent, given back or wasted.
func TestHolderDecidesHotKeyLocally(t *testing.T) {
	const units = 20_000
	s := newGrantServer("p", units, 500, 10*time.Second)
	h := newTestHolder(t, s, nil)
	var local, strict, denied atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for denied.Load() < 50 {
				switch allowed, isLocal := h.decide(t, &Request{Policy: "p", Key: "k"}); {
				case isLocal:
					local.Add(1)
				case allowed:
					strict.Add(1)
				default:
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	st := h.Stats()
	if st.LocalGrant != uint64(local.Load()) || local.Load() < units/2 {
		t.Fatalf("Stats.LocalGrant %d, %d local decisions seen of %d allowed", st.LocalGrant, local.Load(), local.Load()+strict.Load())
	}
	h.Close()
	st = h.Stats()
	calls, avail := s.snapshot("k")
	for _, m := range calls {
		if m.GetCaller() != "node-1" || m.GetHolder() != h.g.holder {
			t.Fatalf("a Grant call %v, want caller node-1 and the holder's name", m)
		}
	}
	if s.overUsed != 0 {
		t.Fatalf("%d calls reported more used than granted", s.overUsed)
	}
	if st.UnitsGranted != uint64(local.Load())+st.UnitsReturned+st.UnitsWasted {
		t.Fatalf("granted %d != local %d + returned %d + wasted %d", st.UnitsGranted, local.Load(), st.UnitsReturned, st.UnitsWasted)
	}
	// The server's record: the units its grants took and kept are the
	// holder's local decisions and its waste.
	if byGrants := units - avail - s.strictAllowed; byGrants != local.Load()+int64(st.UnitsWasted) || s.strictAllowed != strict.Load() {
		t.Fatalf("the server's grants kept %d units (strict %d of %d), want local %d + wasted %d",
			byGrants, s.strictAllowed, strict.Load(), local.Load(), st.UnitsWasted)
	}
	if st.GrantsAcquired == 0 || st.GrantsHeld != 0 {
		t.Fatalf("after Close: %+v", st)
	}
	t.Logf("local %d, strict %d, %+v", local.Load(), strict.Load(), st)
}

// TestHolderWant: a key Want refuses is never decided locally and no grant
// is asked for it; Want is asked on a miss only, not at every decision.
func TestHolderWant(t *testing.T) {
	s := newGrantServer("p", 1_000_000, 1000, 10*time.Second)
	var asked sync.Map // key -> *atomic.Int64
	h := newTestHolder(t, s, func(cfg *HolderConfig) {
		cfg.Want = func(policy, key string) bool {
			n, _ := asked.LoadOrStore(key, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			return key == "hot"
		}
	})
	eventually(t, 10*time.Second, "a local decision of the hot key", func() bool {
		_, local := h.decide(t, &Request{Policy: "p", Key: "hot"})
		return local
	})
	for range 1000 {
		if _, local := h.decide(t, &Request{Policy: "p", Key: "hot"}); !local {
			break // the grant may run short: the rest goes to the server
		}
	}
	for range 200 {
		if allowed, local := h.decide(t, &Request{Policy: "p", Key: "cold"}); local || !allowed {
			t.Fatalf("the cold key: allowed %v, local %v", allowed, local)
		}
	}
	if n := h.calls("cold"); n != 0 {
		t.Fatalf("%d Grant calls for a key Want refused", n)
	}
	if n, _ := asked.Load("cold"); n.(*atomic.Int64).Load() != 200 {
		t.Fatalf("Want asked %d times of the cold key, want 200 (once per decision: it holds no state)", n.(*atomic.Int64).Load())
	}
	if n, _ := asked.Load("hot"); n.(*atomic.Int64).Load() != 1 {
		t.Fatalf("Want asked %d times of the hot key, want once (its first request)", n.(*atomic.Int64).Load())
	}
	if st := h.Stats(); st.GrantsHeld != 1 || st.LocalGrant == 0 {
		t.Fatalf("%+v", st)
	}
}

// TestHolderRefusedPolicy: a policy the cluster refuses grants for (Grant
// answered Unimplemented, or FailedPrecondition for a policy without local
// decisions) gets one Grant call, then strict decisions for a while, with
// no more calls.
func TestHolderRefusedPolicy(t *testing.T) {
	for _, tc := range []struct {
		name, policy  string
		unimplemented bool
	}{{"Unimplemented", "p", true}, {"FailedPrecondition", "q", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newGrantServer("p", 1_000_000, 1000, 10*time.Second)
			s.unimplemented = tc.unimplemented
			// q has local decisions as the holder knows it, none as the
			// server does.
			h := newTestHolder(t, s, nil, &quoratev1.Policy{Name: "q", Algorithm: "token_bucket", Limit: 1000,
				Period: durationpb.New(time.Hour), Version: 1, Local: &quoratev1.LocalDecisions{Mode: "grant"}})
			r := &Request{Policy: tc.policy, Key: "k"}
			if d := h.Decide(r); d != nil {
				t.Fatalf("a first request decided from a grant: %+v", d)
			}
			eventually(t, 10*time.Second, "the refusal noted", func() bool {
				h.g.mu.Lock()
				defer h.g.mu.Unlock()
				return !h.g.refused[tc.policy].IsZero()
			})
			for i := range 1000 {
				r := &Request{Policy: tc.policy, Key: []string{"k", "k2"}[i%2]}
				if d := h.Decide(r); d != nil {
					t.Fatalf("a refused policy's request decided from a grant: %+v", d)
				}
			}
			if n, n2 := h.calls("k"), h.calls("k2"); n != 1 || n2 != 0 {
				t.Fatalf("%d Grant calls for k and %d for k2, want 1 and 0", n, n2)
			}
			if st := h.Stats(); st.GrantsAcquired != 0 || st.LocalGrant != 0 || st.GrantsHeld != 0 {
				t.Fatalf("%+v", st)
			}
		})
	}
}

// TestHolderCloseReleases: Close gives every grant held back: the server
// gets a release and its units back, and the holder decides nothing after.
func TestHolderCloseReleases(t *testing.T) {
	const units = 1_000_000
	s := newGrantServer("p", units, 1000, 10*time.Second)
	h := newTestHolder(t, s, nil)
	for _, key := range []string{"k", "k2"} {
		eventually(t, 10*time.Second, "a grant of "+key, func() bool {
			_, local := h.decide(t, &Request{Policy: "p", Key: key})
			return local
		})
	}
	if st := h.Stats(); st.GrantsHeld != 2 {
		t.Fatalf("%d grants held, want 2", st.GrantsHeld)
	}
	h.Close()
	st := h.Stats()
	if st.GrantsReleased != 2 || st.UnitsReturned == 0 || st.UnitsWasted != 0 || st.GrantsHeld != 0 ||
		st.UnitsReturned != st.UnitsGranted-st.LocalGrant {
		t.Fatalf("after Close: %+v", st)
	}
	var left int64
	calls, _ := s.snapshot("k")
	for _, key := range []string{"k", "k2"} {
		var last *quoratev1.GrantRequest
		for _, m := range calls {
			if m.GetKey() == key {
				last = m
			}
		}
		if !last.GetRelease() {
			t.Fatalf("the last call of %s: %v", key, last)
		}
		_, avail := s.snapshot(key)
		left += avail
	}
	if want := 2*units - int64(st.LocalGrant) - s.strictAllowed; left != want {
		t.Fatalf("the keys hold %d units after the releases, want %d", left, want)
	}
	if d := h.Decide(&Request{Policy: "p", Key: "k"}); d != nil {
		t.Fatalf("Decide after Close: %+v", d)
	}
}

// TestHolderNotLocal: requests a grant never decides — with a RequestID,
// MaxWait, a negative cost, or Also naming a key without a grant — are
// left to the cluster, and nothing is spent from the grant for them.
func TestHolderNotLocal(t *testing.T) {
	s := newGrantServer("p", 1_000_000, 1000, 10*time.Second)
	h := newTestHolder(t, s, nil)
	eventually(t, 10*time.Second, "a grant", func() bool {
		_, local := h.decide(t, &Request{Policy: "p", Key: "{a}k"})
		return local
	})
	before := h.Stats().LocalGrant
	for _, r := range []*Request{
		{Policy: "p", Key: "{a}k", RequestID: "r1"},
		{Policy: "p", Key: "{a}k", MaxWait: time.Second},
		{Policy: "p", Key: "{a}k", Cost: -1},
		{Policy: "p", Key: "{a}k", Also: []Check{{Policy: "p", Key: "{a}other"}}},
		{Policy: "p", Key: "{a}k", Also: []Check{{Policy: "unknown", Key: "{a}k"}}},
	} {
		if d := h.Decide(r); d != nil {
			t.Fatalf("%+v decided from a grant: %+v", r, d)
		}
	}
	if got := h.Stats().LocalGrant; got != before {
		t.Fatalf("local decisions %d, want %d", got, before)
	}
}

// TestHolderMultiCheck: a request with Also whose checks all hold grants
// is decided by the holder, one local decision charging every check.
func TestHolderMultiCheck(t *testing.T) {
	s := newGrantServer("p", 1_000_000, 1000, 10*time.Second)
	h := newTestHolder(t, s, nil)
	for _, key := range []string{"{a}k", "{a}j"} {
		eventually(t, 10*time.Second, "a grant of "+key, func() bool {
			_, local := h.decide(t, &Request{Policy: "p", Key: key})
			return local
		})
	}
	before := h.Stats().LocalGrant
	var d *Decision
	eventually(t, 10*time.Second, "a local multi-check decision", func() bool {
		d = h.Decide(&Request{Policy: "p", Key: "{a}k", Cost: 2, Also: []Check{{Policy: "p", Key: "{a}j", Cost: 3}}})
		return d != nil
	})
	if !d.Allowed || d.Outcome != LocalGrant || len(d.Checks) != 2 || d.Checks[1].Key != "{a}j" || !d.Checks[1].Allowed {
		t.Fatalf("%+v", d)
	}
	if got := h.Stats().LocalGrant - before; got != 1 {
		t.Fatalf("one multi-check decision counted as %d", got)
	}
}

// TestHolderSync: a sync (local-plus-global) policy's requests are decided
// from allowances, and Close's final report tells the server every one.
func TestHolderSync(t *testing.T) {
	s := newSyncServer("p", 1_000_000_000, 200*time.Millisecond)
	h := newTestHolder(t, s, nil)
	var local int64
	eventually(t, 10*time.Second, "1000 local decisions", func() bool {
		if _, isLocal := h.decide(t, &Request{Policy: "p", Key: "k"}); isLocal {
			local++
		}
		return local >= 1000
	})
	h.Close()
	st := h.Stats()
	_, calls := s.syncSnapshot()
	last := calls[len(calls)-1]
	if !last.GetRelease() || last.GetUsed() != local || int64(st.LocalGrant) != local || int64(st.UnitsReported) != local {
		t.Fatalf("local %d; last call %v; %+v", local, last, st)
	}
}

// TestNewHolderValidates: a HolderConfig without Grant or Policy, or with a
// negative Timeout, is refused by an error naming the field.
func TestNewHolderValidates(t *testing.T) {
	grant := func(context.Context, *quoratev1.GrantRequest) (*quoratev1.GrantResponse, error) { return nil, nil }
	policy := func(string) (*quoratev1.Policy, bool) { return nil, false }
	for _, tc := range []struct {
		field string
		cfg   HolderConfig
	}{
		{"Grant", HolderConfig{Policy: policy}},
		{"Policy", HolderConfig{Grant: grant}},
		{"Timeout", HolderConfig{Grant: grant, Policy: policy, Timeout: -time.Second}},
	} {
		h, err := NewHolder(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), "HolderConfig."+tc.field) {
			t.Fatalf("%s: %v, %v", tc.field, h, err)
		}
	}
	h, err := NewHolder(HolderConfig{Grant: grant, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
}
