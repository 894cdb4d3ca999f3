package node_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// A request forwarded to a leader that stalls — here its answer is held
// back after its entry is in Raft, as if the process were paused — is given
// up by the forwarding node as soon as it sees the group elect another
// leader, and, carrying a request ID, sent to the new leader: the caller is
// answered while the old leader is still stalled (before, it waited for the
// forward's own timeout, past the request's deadline), and spends once.
func TestForwardGivenUpWhenTheLeaderChanges(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	const budget = 10
	applyPolicy(t, c, "paid", budget, 366*24*time.Hour, budget)
	leader := c.Leader(t)
	via := (leader + 1) % c.Len()

	stalled := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	c.Observer(leader).SetProposed(func(env *raftcmdv1.Envelope) {
		if rid := env.GetAdmit().GetRequestId(); rid != "charge-9" && !strings.HasPrefix(rid, "charge-9\x00") {
			return
		}
		once.Do(func() { close(stalled) })
		<-release
	})
	t.Cleanup(func() { close(release) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type answer struct {
		allowed, duplicate bool
		err                error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := admitID(ctx, c, via, "paid", "acct", "billing", "charge-9")
		answered <- answer{resp.GetAllowed(), resp.GetDuplicate(), err}
	}()
	select {
	case <-stalled:
	case a := <-answered:
		t.Fatalf("answered before the leader held its entry: %+v", a)
	case <-ctx.Done():
		t.Fatal("the request never reached the leader")
	}
	if err := node.TransferMetaLeadership(c.Node(leader)); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	var a answer
	select {
	case a = <-answered:
	case <-ctx.Done():
		t.Fatal("no answer after the leader changed")
	}
	if a.err != nil {
		t.Fatalf("the forwarding node did not go to the new leader: %v", a.err)
	}
	if !a.allowed {
		t.Fatalf("denied: %+v", a)
	}
	t.Logf("answered by the new leader while the old one stalls (duplicate=%v)", a.duplicate)
	survivor := via
	if got := remainingAfterOneMore(t, ctx, c, survivor, "paid", "acct"); got != budget-1 {
		t.Fatalf("bucket holds %d after one charge; want %d (exactly one spend)", got, budget-1)
	}
}
