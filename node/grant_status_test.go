package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// grantShown returns node i's status figures of key's grants, and whether
// its status lists the key.
func grantShown(ctx context.Context, c *nodetest.Cluster, i int, policy, key string) (holders uint32, unspent int64, ok bool, err error) {
	st, err := c.Admin(i).NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
	if err != nil {
		return 0, 0, false, err
	}
	for _, g := range st.Msg.GetNode().GetGroups() {
		for _, h := range g.GetHotKeys() {
			if h.GetPolicy() == policy && h.GetKey() == key {
				return h.GetGrantHolders(), h.GetGrantedUnspent(), true, nil
			}
		}
	}
	return 0, 0, false, nil
}

// A grant still held after its group's leader dies is shown by the new
// leader's status (and every replica's): grants are the group's replicated
// state, not what the old leader counted.
func TestGrantShownAfterFailover(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{grantPolicy()}})); err != nil {
		t.Fatal(err)
	}
	const key = "{f}:k"
	leader := c.Leader(t)
	for range 5 {
		if _, err := c.Admission(leader).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "search", Key: key, Strict: true})); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := c.Admission(leader).Grant(ctx, connect.NewRequest(&quoratev1.GrantRequest{Policy: "search", Key: key, Caller: "gw", Holder: "h", Want: 100, Demand: 1}))
	if err != nil || resp.Msg.GetTotal() < 1 {
		t.Fatalf("grant: %v, %v", resp, err)
	}
	total := resp.Msg.GetTotal()
	shows := func(i int) error {
		holders, unspent, ok, err := grantShown(ctx, c, i, "search", key)
		switch {
		case err != nil:
			return err
		case !ok || holders != 1 || unspent != total:
			return fmt.Errorf("node %d shows %s with %d holders, %d units (listed: %v); want 1 holder, %d units", i, key, holders, unspent, ok, total)
		}
		return nil
	}
	c.Eventually(t, 10*time.Second, "the leader showing the grant", func() error { return shows(leader) })
	c.Kill(leader)
	next := c.Leader(t)
	c.Eventually(t, 20*time.Second, "the new leader and every replica showing the grant", func() error {
		if err := shows(next); err != nil {
			return err
		}
		for i := range c.Len() {
			if c.Running(i) {
				if err := shows(i); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
