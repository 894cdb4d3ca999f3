package client

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// grantServer is a one-node admission service for the grant tests: one
// policy whose keys each hold a counter of units (avail), spent by Admit
// and by grants as AdmissionService.Grant's contract says: units are spent
// from the key when granted, a renewal only tops up and extends, a release
// gives back total - used, an expired grant gives nothing back; seq fences
// the holder's calls; each holder's top-up is sized by its share of the
// key's demand (the sizing rule of the design). With window > 0 every key
// starts each window of that length (by the server's clock) with limit
// units and a grant never outlives its window.
type grantServer struct {
	quoratev1connect.UnimplementedAdmissionServiceHandler
	policy   string
	limit    int64
	maxGrant int64
	ttl      time.Duration
	window   time.Duration
	// unimplemented answers Grant Unimplemented, as nodes before budget
	// leases do.
	unimplemented bool
	// unavailable answers Grant Unavailable (no leader), set by a test.
	unavailable atomic.Bool
	// syncInterval > 0 makes the policy local.mode sync
	// (grantserver_sync_test.go); sync are its counters.
	syncInterval time.Duration
	sync         syncCounters

	mu     sync.Mutex
	keys   map[string]*fakeKey
	grants map[fakeGrantKey]*fakeGrant
	// calls are the Grant requests answered, in order.
	calls []*quoratev1.GrantRequest
	// strictAllowed counts the Admits allowed; overUsed the calls that
	// reported more used than granted (a client that spent past its grant).
	strictAllowed, overUsed int64
	starts                  int64 // makes each started_at distinct
}

type fakeKey struct {
	avail int64
	win   int64 // the window avail belongs to
}

type fakeGrantKey struct{ policy, key, holder, caller string }

type fakeGrant struct {
	total, used         int64
	seq                 uint64
	demandMilli         uint64
	started, expires    time.Time
	last                *quoratev1.GrantResponse
	windowOf, decidedAt int64
}

func newGrantServer(policy string, units, maxGrant int64, ttl time.Duration) *grantServer {
	return &grantServer{policy: policy, limit: units, maxGrant: maxGrant, ttl: ttl,
		keys: map[string]*fakeKey{}, grants: map[fakeGrantKey]*fakeGrant{}}
}

// clientPolicy is the policy as a client is given it.
func (s *grantServer) clientPolicy() Policy {
	if s.syncInterval > 0 {
		return Policy{Name: s.policy, Limit: s.limit, Period: time.Hour, Version: 1,
			Local: LocalDecisions{Mode: "sync", SyncInterval: s.syncInterval}}
	}
	return Policy{Name: s.policy, Limit: s.limit, Period: time.Hour, Version: 1,
		Local: LocalDecisions{Mode: "grant", MaxGrant: s.maxGrant, TTL: s.ttl}}
}

// key is k's state now; s.mu is held.
func (s *grantServer) key(k string, now time.Time) *fakeKey {
	st, ok := s.keys[k]
	if !ok {
		st = &fakeKey{avail: s.limit, win: s.windowOf(now)}
		s.keys[k] = st
	}
	if w := s.windowOf(now); w != st.win {
		st.avail, st.win = s.limit, w
	}
	return st
}

func (s *grantServer) windowOf(t time.Time) int64 {
	if s.window == 0 {
		return 0
	}
	return t.UnixNano() / int64(s.window)
}

func (s *grantServer) admitOne(m *quoratev1.AdmitRequest) *quoratev1.AdmitResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	cost := max(m.GetCost(), 1)
	st := s.key(m.GetKey(), time.Now())
	r := &quoratev1.AdmitResponse{Limit: s.limit, PolicyVersion: 1, DecidedAt: timestamppb.Now()}
	if st.avail >= cost {
		st.avail -= cost
		s.strictAllowed++
		r.Allowed = true
	}
	r.Remaining = st.avail
	return r
}

func (s *grantServer) Admit(_ context.Context, req *connect.Request[quoratev1.AdmitRequest]) (*connect.Response[quoratev1.AdmitResponse], error) {
	return connect.NewResponse(s.admitOne(req.Msg)), nil
}

func (s *grantServer) AdmitBatch(_ context.Context, req *connect.Request[quoratev1.AdmitBatchRequest]) (*connect.Response[quoratev1.AdmitBatchResponse], error) {
	out := &quoratev1.AdmitBatchResponse{}
	for _, m := range req.Msg.GetRequests() {
		out.Results = append(out.Results, &quoratev1.AdmitBatchResult{Result: &quoratev1.AdmitBatchResult_Response{Response: s.admitOne(m)}})
	}
	return connect.NewResponse(out), nil
}

func (s *grantServer) Grant(_ context.Context, req *connect.Request[quoratev1.GrantRequest]) (*connect.Response[quoratev1.GrantResponse], error) {
	if s.unimplemented {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("node: Grant is not served yet"))
	}
	if s.unavailable.Load() {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("node: no leader"))
	}
	m := req.Msg
	if m.GetPolicy() != s.policy {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("policy %q has no local decisions", m.GetPolicy()))
	}
	if s.syncInterval > 0 {
		return s.grantSync(m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, m)
	now := time.Now()
	st := s.key(m.GetKey(), now)
	gk := fakeGrantKey{m.GetPolicy(), m.GetKey(), m.GetHolder(), m.GetCaller()}
	g, ok := s.grants[gk]
	if ok && (!now.Before(g.expires) || g.windowOf != st.win) {
		delete(s.grants, gk) // expired: its unspent units stay spent
		ok = false
	}
	if ok {
		switch {
		case m.GetSeq() == g.seq:
			dup := proto.Clone(g.last).(*quoratev1.GrantResponse)
			dup.Duplicate = true
			return connect.NewResponse(dup), nil
		case m.GetSeq() < g.seq:
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("seq %d is behind the grant's %d", m.GetSeq(), g.seq))
		case m.GetUsed() < g.used:
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("used %d is below %d", m.GetUsed(), g.used))
		case m.GetUsed() > g.total:
			s.overUsed++
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("used %d is above total %d", m.GetUsed(), g.total))
		}
		g.used = m.GetUsed()
	}
	resp := &quoratev1.GrantResponse{DecidedAt: timestamppb.New(now), Limit: s.limit, PolicyVersion: 1}
	if m.GetRelease() {
		if ok {
			resp.Returned = g.total - g.used
			resp.Total = g.total
			st.avail += resp.Returned
			delete(s.grants, gk)
		}
		resp.Remaining = st.avail
		return connect.NewResponse(resp), nil
	}
	if !ok {
		s.starts++
		g = &fakeGrant{started: now.Add(time.Duration(s.starts)), windowOf: st.win}
		s.grants[gk] = g
	}
	g.seq = m.GetSeq()
	g.demandMilli = uint64(m.GetDemand() * 1000)
	var others uint64
	for k, o := range s.grants {
		if k.policy == gk.policy && k.key == gk.key && k != gk && now.Before(o.expires) {
			others += o.demandMilli
		}
	}
	unspent := g.total - g.used
	topUp := min(m.GetWant()-unspent, s.maxGrant-unspent, fairShare(st.avail, max(g.demandMilli, 1), others), st.avail)
	if topUp > 0 {
		g.total += topUp
		st.avail -= topUp
		resp.Added = topUp
	}
	g.expires = now.Add(s.ttl)
	if s.window > 0 {
		g.expires = time.Unix(0, (st.win+1)*int64(s.window))
		if e := now.Add(s.ttl); e.Before(g.expires) {
			g.expires = e
		}
	}
	resp.Total, resp.Remaining = g.total, st.avail
	resp.StartedAt, resp.ExpiresAt = timestamppb.New(g.started), timestamppb.New(g.expires)
	if resp.Added == 0 && st.avail == 0 {
		resp.RetryAfter = durationpb.New(10 * time.Millisecond)
	}
	g.last = resp
	return connect.NewResponse(resp), nil
}

// fairShare is ceil(avail·d / (others+d)) in 128-bit arithmetic.
func fairShare(avail int64, d, others uint64) int64 {
	if avail <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(avail), d)
	den := others + d
	q, r := bits.Div64(hi%den, lo, den)
	if r != 0 {
		q++
	}
	return int64(q)
}

// forget drops every grant record, as a group that lost the key's slot
// does: the holder's next call starts a new grant. It returns the units
// granted by the records dropped.
func (s *grantServer) forget() (total int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.grants {
		total += g.total
	}
	clear(s.grants)
	return total
}

// snapshot returns the Grant calls answered so far and the key's units.
func (s *grantServer) snapshot(key string) (calls []*quoratev1.GrantRequest, avail int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*quoratev1.GrantRequest(nil), s.calls...), s.key(key, time.Now()).avail
}

func serveTB(t testing.TB, h quoratev1connect.AdmissionServiceHandler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(quoratev1connect.NewAdmissionServiceHandler(h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// grantClient is a client of s's policy with fast retries.
func grantClient(t testing.TB, s *grantServer, mod func(*Config)) *Client {
	t.Helper()
	cfg := Config{Servers: []string{serveTB(t, s)}, InitialBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond,
		Policies: []Policy{s.clientPolicy()}, NoPolicyFetch: true}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronization
	}
}
