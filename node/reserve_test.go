package node_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// A reservation taken on one node survives a full cluster restart and is
// committed on another; the commit is exactly-once across nodes and the
// quota counts exactly the committed cost.
func TestReserveCommitAcrossNodesAndRestart(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{{
		Name: "llm-tokens", Algorithm: "quota", Limit: 1000, MaxCost: proto.Int64(500), Calendar: "year",
	}}})); err != nil {
		t.Fatal(err)
	}
	res, err := c.Admission(1).Reserve(ctx, connect.NewRequest(&quoratev1.ReserveRequest{
		Policy: "llm-tokens", Key: "team-a", Estimate: 400, Caller: "gateway", RequestId: "res-1"}))
	if err != nil || !res.Msg.GetAllowed() || res.Msg.GetRemaining() != 600 {
		t.Fatalf("reserve: %v, %v", res, err)
	}
	// Ordinary admissions count the reservation.
	over := int64(601)
	if _, err := c.Admission(2).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "llm-tokens", Key: "team-a", Cost: &over})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a cost above max_cost: %v", err) // 601 > max_cost 500: refused before anything else
	}
	big := int64(500)
	if r, err := c.Admission(2).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "llm-tokens", Key: "team-a", Cost: &big})); err != nil || !r.Msg.GetAllowed() {
		t.Fatalf("admit 500 of the 600 left: %v, %v", r, err)
	}
	for i := range c.Len() {
		c.Kill(i)
	}
	for i := range c.Len() {
		c.Start(i)
	}
	c.WaitReady(t)
	commit, err := c.Admission(0).Commit(ctx, connect.NewRequest(&quoratev1.CommitRequest{
		ReservationId: res.Msg.GetReservationId(), Actual: 250, Caller: "gateway", RequestId: "com-1"}))
	if err != nil || commit.Msg.GetCharged() != 250 || commit.Msg.GetReleased() != 150 {
		t.Fatalf("commit: %v, %v", commit, err)
	}
	again, err := c.Admission(2).Commit(ctx, connect.NewRequest(&quoratev1.CommitRequest{
		ReservationId: res.Msg.GetReservationId(), Actual: 250, Caller: "gateway", RequestId: "com-1"}))
	if err != nil || !again.Msg.GetDuplicate() || again.Msg.GetCharged() != 250 {
		t.Fatalf("retried commit: %v, %v", again, err)
	}
	_, err = c.Admission(1).Commit(ctx, connect.NewRequest(&quoratev1.CommitRequest{
		ReservationId: res.Msg.GetReservationId(), Actual: 250}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a second commit without the request ID: %v, want NotFound", err)
	}
	peek, err := c.Admission(1).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: "llm-tokens", Key: "team-a"}))
	if err != nil || peek.Msg.GetRemaining() != 1000-500-250 {
		t.Fatalf("peek: %v, %v; want %d remaining", peek, err, 1000-500-250)
	}
}

// A lease can hold a reservation (an LLM call: one of 2 slots, and an
// estimate of the month's tokens); ReleaseLease's actual_cost settles it,
// and a lease acquired without room for its estimate takes no slot.
func TestLeaseWithReservationSettlesOnRelease(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{
		{Name: "inference", Algorithm: "concurrency", Limit: 2, LeaseTtl: durationpb.New(time.Minute)},
		{Name: "tokens", Algorithm: "quota", Limit: 1000, MaxCost: proto.Int64(800), Calendar: "month"},
	}})); err != nil {
		t.Fatal(err)
	}
	acq, err := c.Lease(1).AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{
		Policy: "inference", Key: "{team-a}", ReservePolicy: "tokens", ReserveEstimate: 800, Caller: "gw", RequestId: "call-1"}))
	if err != nil || !acq.Msg.GetAllowed() || acq.Msg.GetReservationId() == "" {
		t.Fatalf("acquire with a reservation: %v, %v", acq, err)
	}
	// Only 200 units are left: a second call with the same estimate is
	// refused whole — no slot taken either.
	second, err := c.Lease(2).AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{
		Policy: "inference", Key: "{team-a}", ReservePolicy: "tokens", ReserveEstimate: 800}))
	if err != nil || second.Msg.GetAllowed() || second.Msg.GetHeld() != 1 {
		t.Fatalf("second acquire: %v, %v", second, err)
	}
	cost := int64(300)
	rel, err := c.Lease(0).ReleaseLease(ctx, connect.NewRequest(&quoratev1.ReleaseLeaseRequest{
		LeaseId: acq.Msg.GetLeaseId(), FencingToken: acq.Msg.GetFencingToken(), ActualCost: &cost, Caller: "gw", RequestId: "rel-1"}))
	if err != nil || rel.Msg.GetCharged() != 300 || rel.Msg.GetReleasedUnits() != 500 {
		t.Fatalf("release with actual_cost: %v, %v", rel, err)
	}
	peek, err := c.Admission(2).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: "tokens", Key: "{team-a}"}))
	if err != nil || peek.Msg.GetRemaining() != 700 {
		t.Fatalf("tokens left: %v, %v; want 700", peek, err)
	}
	// actual_cost on a lease without a reservation is bad input.
	plain, err := c.Lease(0).AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{Policy: "inference", Key: "{team-a}"}))
	if err != nil || !plain.Msg.GetAllowed() {
		t.Fatalf("plain acquire: %v, %v", plain, err)
	}
	_, err = c.Lease(0).ReleaseLease(ctx, connect.NewRequest(&quoratev1.ReleaseLeaseRequest{
		LeaseId: plain.Msg.GetLeaseId(), FencingToken: plain.Msg.GetFencingToken(), ActualCost: &cost}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || fieldOf(err) != "actual_cost" {
		t.Fatalf("actual_cost without a reservation: %v", err)
	}
}
