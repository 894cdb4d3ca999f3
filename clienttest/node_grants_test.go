package clienttest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// A Go client and a node holding grants on one key, side by side: the
// client holds its own, the node one for the plain callers it answers.
// Both decide most of their requests in memory, the key shows two holders,
// and together they never admit more than the limit: once both are done
// and give back what they hold, what they admitted plus what the key has
// left is the limit, less the units counted wasted.
func TestGoClientAndNodeShareAKey(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	const limit = 6000
	applyPolicies(t, c, &quoratev1.Policy{Name: "shared", Algorithm: "fixed_window", Limit: limit, Period: durationpb.New(24 * time.Hour),
		Local: &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(300), Ttl: durationpb.New(10 * time.Second)}})
	cl := newClient(t, c, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const each = 2000
	var clientAllowed, clientLocal, plainAllowed atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < each; i += 4 {
				d, err := cl.Admit(ctx, client.Request{Policy: "shared", Key: "{k}"})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					clientAllowed.Add(1)
				}
				if d.Outcome == client.LocalGrant {
					clientLocal.Add(1)
				}
			}
		})
		wg.Go(func() {
			for i := w; i < each; i += 4 {
				r, err := c.Admission(0).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "shared", Key: "{k}"}))
				if err != nil {
					t.Error(err)
					return
				}
				if r.Msg.GetAllowed() {
					plainAllowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	st, err := c.Admin(1).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var nodeLocal uint64
	for _, m := range st.Msg.GetMembers() {
		nodeLocal += m.GetStatus().GetNodeGrants().GetLocalDecisions()
	}
	t.Logf("client: %d allowed, %d from its grants; plain callers: %d allowed, %d from the node's grant",
		clientAllowed.Load(), clientLocal.Load(), plainAllowed.Load(), nodeLocal)
	if clientLocal.Load() < each/2 || nodeLocal < each/2 {
		t.Fatalf("client %d, node %d of %d decisions each from grants; want most of each", clientLocal.Load(), nodeLocal, each)
	}
	holders := func() int64 {
		st, err := c.Admin(1).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, m := range st.Msg.GetMembers() {
			for _, g := range m.GetStatus().GetGroups() {
				for _, h := range g.GetHotKeys() {
					if h.GetPolicy() == "shared" && h.GetKey() == "{k}" && g.GetRole() == "leader" {
						n = max(n, int64(h.GetGrantHolders()))
					}
				}
			}
		}
		return n
	}
	if n := holders(); n != 2 {
		t.Fatalf("the key shows %d grant holders, want 2 (the client and the node)", n)
	}
	// Both give back what they hold: the client closing, the node
	// stopping (a graceful stop releases).
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	wasted := int64(cl.Stats().UnitsWasted)
	c.Stop(0)
	peek, err := c.Admission(1).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: "shared", Key: "{k}"}))
	if err != nil {
		t.Fatal(err)
	}
	got := clientAllowed.Load() + plainAllowed.Load() + peek.Msg.GetRemaining()
	if got > limit || got < limit-wasted {
		t.Fatalf("allowed %d + %d + left %d = %d; want the limit %d, less at most the client's %d wasted",
			clientAllowed.Load(), plainAllowed.Load(), peek.Msg.GetRemaining(), got, limit, wasted)
	}
}
