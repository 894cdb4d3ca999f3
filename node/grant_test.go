package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// grantPolicy is a fixed window of 1,000 units an hour whose clients may
// decide locally from budget leases of at most 400 units.
func grantPolicy() *quoratev1.Policy {
	return &quoratev1.Policy{Name: "search", Algorithm: "fixed_window", Limit: 1000, Period: durationpb.New(time.Hour),
		Local: &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(400), Ttl: durationpb.New(time.Minute)}}
}

// Budget leases on a 3-node cluster: grants are spent in the log, so strict
// admits and granted units together never exceed the limit; grants are
// sized by the holders' demand; a retried call gets its first answer
// (across nodes and a leader's death); a stale seq changes nothing; a
// release gives back what was not used, and the policy shows its local
// decisions.
func TestGrantOnACluster(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	applied, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{grantPolicy()}}))
	if err != nil {
		t.Fatal(err)
	}
	if l := applied.Msg.GetPolicies()[0].GetLocal(); l.GetMode() != "grant" || l.GetMaxGrant() != 400 || l.GetTtl().AsDuration() != time.Minute {
		t.Fatalf("stored local: %v", l)
	}
	grant := func(i int, r *quoratev1.GrantRequest) (*quoratev1.GrantResponse, error) {
		r.Policy, r.Key, r.Caller = "search", "{t}:k", "gw"
		resp, err := c.Admission(i).Grant(ctx, connect.NewRequest(r))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	// Holder a sees 0.7 units a second, b 0.3: b asks after a already
	// holds its share; each is capped by max_grant and by its share of what
	// is left. (Both under 1 unit a second: holders not seen spending yet
	// count as claimed up to that.)
	a, err := grant(0, &quoratev1.GrantRequest{Holder: "a", Want: 1000, Demand: 0.7})
	if err != nil {
		t.Fatal(err)
	}
	if a.GetAdded() != 400 || a.GetTotal() != 400 || a.GetRemaining() != 600 || a.GetStartedAt() == nil || a.GetWindow().AsDuration() != time.Hour {
		t.Fatalf("a's grant: %v", a)
	}
	b, err := grant(1, &quoratev1.GrantRequest{Holder: "b", Want: 1000, Demand: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	// b's share is 3/10 of the 600 left: 180.
	if b.GetAdded() != 180 || b.GetRemaining() != 420 || b.GetShare() < 0.29 || b.GetShare() > 0.31 {
		t.Fatalf("b's grant: %v", b)
	}
	// Strict admits spend only what no grant holds.
	cost := int64(420)
	if r, err := c.Admission(2).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "search", Key: "{t}:k", Cost: &cost, Strict: true})); err != nil || !r.Msg.GetAllowed() {
		t.Fatalf("admit the 420 left: %v, %v", r, err)
	}
	if r, err := c.Admission(2).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "search", Key: "{t}:k", Strict: true})); err != nil || r.Msg.GetAllowed() {
		t.Fatalf("one more strict admit: %v, %v; want denied", r, err)
	}
	// The key is hot at its group's leader, which shows the two holders
	// and the 580 units they hold unspent (a 400, b 180: none reported
	// used yet).
	nodetest.Eventually(t, 30*time.Second, "the hot key with its grants", func() error {
		for i := range c.Len() {
			st, err := c.Admin(i).NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
			if err != nil {
				return err
			}
			for _, g := range st.Msg.GetNode().GetGroups() {
				for _, h := range g.GetHotKeys() {
					if h.GetPolicy() == "search" && h.GetKey() == "{t}:k" {
						if h.GetGrantHolders() != 2 || h.GetGrantedUnspent() != 580 {
							return fmt.Errorf("node %d: hot key %v, want 2 holders, 580 units", i, h)
						}
						return nil
					}
				}
			}
		}
		return errors.New("no node shows {t}:k hot")
	})
	// a renews (seq 1) having used 350: nothing is left to add.
	renew := &quoratev1.GrantRequest{Holder: "a", Seq: 1, Want: 400, Used: 350, Demand: 0.7}
	r1, err := grant(2, proto.Clone(renew).(*quoratev1.GrantRequest))
	if err != nil || r1.GetAdded() != 0 || r1.GetTotal() != 400 || r1.GetRetryAfter() == nil {
		t.Fatalf("a's renewal with nothing left: %v, %v", r1, err)
	}
	// The retry of that renewal, after the leader's death, gets its answer.
	c.Kill(c.Leader(t))
	nodetest.Eventually(t, time.Minute, "a retried renewal", func() error {
		for i := range c.Len() {
			if !c.Running(i) {
				continue
			}
			again, err := grant(i, proto.Clone(renew).(*quoratev1.GrantRequest))
			if err != nil {
				return err
			}
			if !again.GetDuplicate() || again.GetTotal() != 400 || !proto.Equal(again.GetStartedAt(), a.GetStartedAt()) {
				t.Fatalf("retried renewal: %v", again)
			}
			return nil
		}
		return nil
	})
	running := 0
	for !c.Running(running) {
		running++
	}
	// An older seq is refused and changes nothing.
	if _, err := grant(running, &quoratev1.GrantRequest{Holder: "a", Seq: 0, Want: 10, Demand: 0.7}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("a stale seq: %v, want FailedPrecondition", err)
	}
	// a releases having used 350 of 400: 50 come back and are admitted
	// strictly, and no more.
	rel, err := grant(running, &quoratev1.GrantRequest{Holder: "a", Seq: 2, Used: 350, Release: true})
	if err != nil || rel.GetReturned() != 50 {
		t.Fatalf("release: %v, %v", rel, err)
	}
	fifty := int64(50)
	if r, err := c.Admission(running).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "search", Key: "{t}:k", Cost: &fifty, Strict: true})); err != nil || !r.Msg.GetAllowed() || r.Msg.GetRemaining() != 0 {
		t.Fatalf("admit the 50 given back: %v, %v", r, err)
	}
	// Bad requests name their field.
	for _, tc := range []struct {
		r     *quoratev1.GrantRequest
		field string
	}{
		{&quoratev1.GrantRequest{Want: 1}, "holder"},
		{&quoratev1.GrantRequest{Holder: "h", Want: 0}, "want"},
		{&quoratev1.GrantRequest{Holder: "h", Want: 1, Used: -1}, "used"},
		{&quoratev1.GrantRequest{Holder: "h", Want: 1, Demand: -2}, "demand"},
	} {
		_, err := grant(running, tc.r)
		if connect.CodeOf(err) != connect.CodeInvalidArgument || fieldOf(err) != tc.field {
			t.Errorf("%v: %v, want InvalidArgument on %s", tc.r, err, tc.field)
		}
	}
}
