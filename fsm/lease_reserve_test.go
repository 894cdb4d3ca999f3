package fsm_test

import (
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// A reservation held with a lease lives as long as the lease: renewing the
// lease extends it, a leader change shifts both, and when the lease expires
// unreleased, the reservation's units come back.
func TestLeaseReservationFollowsItsLease(t *testing.T) {
	l := newTermFSM(t, concurrency("calls", 2, 10*time.Second),
		admission.Policy{Name: "tokens", Algorithm: admission.AlgorithmQuota, Limit: 100, Calendar: admission.CalendarYear})
	sec := int64(time.Second)
	acquire := &raftcmdv1.Envelope{NowUnixNano: t0, Body: &raftcmdv1.Envelope_Lease{Lease: &raftcmdv1.LeaseOp{
		Kind: raftcmdv1.LeaseOp_KIND_ACQUIRE, Policy: "calls", Key: "k", ReservePolicy: "tokens", ReserveEstimate: 60, Caller: "svc", Secret: testSecret}}}
	res, ok := l.apply(acquire).(*fsm.LeaseResult)
	if !ok || !res.Allowed || res.ReservationID == "" {
		t.Fatalf("acquire with a reservation: %+v", res)
	}
	remaining := func(now int64) int64 {
		r, ok := l.apply(&raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Peek{Peek: &raftcmdv1.Peek{Policy: "tokens", Key: "k"}}}).(*fsm.PeekResult)
		if !ok {
			t.Fatal("peek failed")
		}
		return r.Decision.Remaining
	}
	if got := remaining(t0 + 1); got != 40 {
		t.Fatalf("after the acquire %d tokens remain, want 40", got)
	}
	// A Commit cannot name it, not even its holder's: the lease's release
	// settles it.
	commit := commitEnv(t0+1, fsm.ReservationID("tokens", "k", res.ReservationID, [16]byte(testSecret)), 0, "")
	commit.GetCommit().Caller = "svc"
	wantErr(t, "commit of a lease's reservation", l.apply(commit), fsm.ErrNoReservation)
	if got := remaining(t0 + 1); got != 40 {
		t.Fatalf("after a refused commit %d tokens remain, want 40", got)
	}
	// Renew at +8s for 10s more: the reservation now ends at +18s too.
	l.ok(t0+8*sec, renewOp("calls", "k", res.Lease.Token))
	l.expire(t0 + 17*sec)
	if got := remaining(t0 + 17*sec); got != 40 {
		t.Fatalf("at +17s (lease renewed to +18s) %d remain, want 40", got)
	}
	// Unreleased, the lease expires at +18s and the units come back.
	l.expire(t0 + 18*sec)
	if got := remaining(t0 + 18*sec); got != 100 || l.f.ReservationCount() != 0 {
		t.Fatalf("after the lease expired %d remain (want 100), %d reservations", got, l.f.ReservationCount())
	}
	// Not enough tokens: the acquire takes no slot.
	big := &raftcmdv1.Envelope{NowUnixNano: t0 + 19*sec, Body: &raftcmdv1.Envelope_Lease{Lease: &raftcmdv1.LeaseOp{
		Kind: raftcmdv1.LeaseOp_KIND_ACQUIRE, Policy: "calls", Key: "k", ReservePolicy: "tokens", ReserveEstimate: 100, Caller: "svc", Secret: testSecret}}}
	if r := l.apply(big).(*fsm.LeaseResult); !r.Allowed {
		t.Fatalf("100 of 100 tokens: %+v", r)
	}
	big.NowUnixNano = t0 + 20*sec
	if r := l.apply(big).(*fsm.LeaseResult); r.Allowed || r.Held != 1 || r.RetryAfter <= 0 {
		t.Fatalf("another 100 with none left: %+v", r)
	}
}
