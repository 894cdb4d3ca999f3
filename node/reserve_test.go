package node_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

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
		Name: "llm-tokens", Algorithm: "quota", Limit: 1000, MaxCost: 500, Calendar: "year",
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
