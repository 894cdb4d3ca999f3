package client

import (
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// The fake server's sync mode (local-plus-global), by the group's rules:
// nothing is spent ahead; a report of a live record charges used − the
// recorded used forcibly (past the limit: it already happened); an expired
// record is charged its whole allowance when it ends (swept at every call,
// its holder's included) and a later report of it is ignored (it starts a
// new record whose used is only a baseline); the allowance is min(want,
// the holder's share of the bound by demand, bound − the key's other
// allowances, what the key has left) and replaces the previous one; a
// record expires 2 sync intervals after its last answer (and with its
// window). Σ allowances of a key stay ≤ the bound (checked).

// syncCounters are the fake server's sync-mode counts.
type syncCounters struct {
	// reported are the units charged from reports; whole those charged
	// for expired records; overshoot the units charged beyond what the key
	// had left.
	reported, whole, overshoot int64
	// boundBroken counts answers after which a key's allowances added up
	// to more than the bound (never, if the fake is right).
	boundBroken int64
	at          []time.Time // when each Grant call arrived
}

// syncBound is ceil(limit × sync_interval / period) with the fake's
// period of an hour (or its window), at least 1.
func (s *grantServer) syncBound() int64 {
	period := time.Hour
	if s.window > 0 {
		period = s.window
	}
	return max(1, (s.limit*int64(s.syncInterval)+int64(period)-1)/int64(period))
}

// charge takes units already admitted from st, past its limit if need be;
// s.mu is held.
func (s *grantServer) charge(st *fakeKey, units int64) {
	s.sync.overshoot += max(0, units-max(st.avail, 0))
	st.avail -= units
}

// sweepSync ends the expired sync records, each charged its whole
// allowance; s.mu is held.
func (s *grantServer) sweepSync(now time.Time) {
	for k, g := range s.grants {
		if now.Before(g.expires) {
			continue
		}
		s.charge(s.key(k.key, now), g.total)
		s.sync.whole += g.total
		delete(s.grants, k)
	}
}

func (s *grantServer) grantSync(m *quoratev1.GrantRequest) (*connect.Response[quoratev1.GrantResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.calls = append(s.calls, m)
	s.sync.at = append(s.sync.at, now)
	s.sweepSync(now)
	st := s.key(m.GetKey(), now)
	gk := fakeGrantKey{m.GetPolicy(), m.GetKey(), m.GetHolder(), m.GetCaller()}
	g, live := s.grants[gk]
	if live {
		switch {
		case m.GetSeq() == g.seq:
			dup := proto.Clone(g.last).(*quoratev1.GrantResponse)
			dup.Duplicate = true
			return connect.NewResponse(dup), nil
		case m.GetSeq() < g.seq:
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("seq %d is behind the record's %d", m.GetSeq(), g.seq))
		case m.GetUsed() < g.used:
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("used %d is below %d", m.GetUsed(), g.used))
		}
		delta := m.GetUsed() - g.used
		s.charge(st, delta)
		s.sync.reported += delta
	}
	resp := &quoratev1.GrantResponse{DecidedAt: timestamppb.New(now), Limit: s.limit, PolicyVersion: 1}
	if m.GetRelease() {
		if live {
			resp.Total = g.total
			delete(s.grants, gk)
		}
		resp.Remaining = max(st.avail, 0)
		return connect.NewResponse(resp), nil
	}
	var othersAlloc int64
	var othersDemand uint64
	for k, o := range s.grants {
		if k.policy == gk.policy && k.key == gk.key && k != gk {
			othersAlloc += o.total
			othersDemand += o.demandMilli
		}
	}
	d := max(uint64(m.GetDemand()*1000), 1)
	bound := s.syncBound()
	allowance := max(0, min(m.GetWant(), fairShare(bound, d, othersDemand), bound-othersAlloc, max(st.avail, 0)))
	if !live {
		s.starts++
		g = &fakeGrant{started: now.Add(time.Duration(s.starts)), windowOf: st.win}
		s.grants[gk] = g
	}
	g.seq, g.used, g.total, g.demandMilli = m.GetSeq(), m.GetUsed(), allowance, d
	g.expires = now.Add(2 * s.syncInterval)
	if s.window > 0 {
		if end := time.Unix(0, (st.win+1)*int64(s.window)); end.Before(g.expires) {
			g.expires = end
		}
	}
	if othersAlloc+allowance > bound {
		s.sync.boundBroken++
	}
	resp.Total, resp.Added, resp.Remaining = allowance, allowance, max(st.avail, 0)
	resp.StartedAt, resp.ExpiresAt = timestamppb.New(g.started), timestamppb.New(g.expires)
	if allowance == 0 && st.avail <= 0 {
		resp.RetryAfter = durationpb.New(10 * time.Millisecond)
	}
	g.last = resp
	return connect.NewResponse(resp), nil
}

// newSyncServer is a fake server of a sync policy of limit units an hour.
func newSyncServer(policy string, limit int64, interval time.Duration) *grantServer {
	s := newGrantServer(policy, limit, 0, 0)
	s.syncInterval = interval
	return s
}

// syncSnapshot returns the sync counters and the Grant calls so far.
func (s *grantServer) syncSnapshot() (syncCounters, []*quoratev1.GrantRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.sync
	c.at = append([]time.Time(nil), c.at...)
	return c, append([]*quoratev1.GrantRequest(nil), s.calls...)
}
