package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// admitIDCost admits cost units of policy/key under (caller "rid", id) on
// node i, retrying with the same request while the cluster is unavailable.
func admitIDCost(t *testing.T, c *nodetest.Cluster, i int, policy, key, id string, cost int64) (*quoratev1.AdmitResponse, error) {
	t.Helper()
	var out *quoratev1.AdmitResponse
	var last error
	c.Eventually(t, 20*time.Second, "admit "+key, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: policy, Key: key, Caller: "rid", RequestId: id, Cost: &cost}))
		if connect.CodeOf(err) == connect.CodeUnavailable {
			return err
		}
		out, last = nil, err
		if err == nil {
			out = resp.Msg
		}
		return nil
	})
	return out, last
}

// A request is (caller, request_id, key): the same request_id with another
// key is another request, decided afresh whether the keys share a group or
// not; with the same key but another cost it is refused; a repeat is a
// duplicate; Refund and leases name requests the same way.
func TestRequestIdentityIncludesTheKey(t *testing.T) {
	c := newMultiGroupCluster(t)
	applyBucket(t, c, "p", 100)
	applyConcurrency(t, c, "slots", 1, time.Hour)
	groupOf := func(key string) uint32 {
		g, ok := node.GroupOf(c.Node(0), key)
		if !ok {
			t.Fatalf("no group for %q", key)
		}
		return g
	}
	first, sameGroup := "{s}first", "{s}second"
	otherGroup := ""
	for i := 0; otherGroup == ""; i++ {
		if k := fmt.Sprintf("other-%d", i); groupOf(k) != groupOf(first) {
			otherGroup = k
		}
	}
	if groupOf(first) != groupOf(sameGroup) {
		t.Fatalf("keys with one hash tag in groups %d and %d", groupOf(first), groupOf(sameGroup))
	}

	const id = "order-7"
	r, err := admitIDCost(t, c, 0, "p", first, id, 3)
	if err != nil || !r.GetAllowed() || r.GetDuplicate() {
		t.Fatalf("first: %v, %v", r, err)
	}
	for i, key := range []string{sameGroup, otherGroup} {
		r, err := admitIDCost(t, c, 1+i, "p", key, id, 5)
		if err != nil || !r.GetAllowed() || r.GetDuplicate() || r.GetRemaining() != 95 {
			t.Fatalf("same request_id, key %s (group %d): %v, %v; want a fresh decision", key, groupOf(key), r, err)
		}
	}
	for i := range c.Len() {
		r, err := admitIDCost(t, c, i, "p", first, id, 3)
		if err != nil || !r.GetDuplicate() || r.GetRemaining() != 97 {
			t.Fatalf("repeat on node %d: %v, %v; want the first answer, duplicate", i, r, err)
		}
		_, err = admitIDCost(t, c, i, "p", first, id, 4)
		wantCode(t, "same request_id and key, another cost", err, connect.CodeInvalidArgument, "request_id")
	}

	// Refund names the request by its key too: each comes back once.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, want := range map[string]int64{first: 3, sameGroup: 5, otherGroup: 5} {
		resp, err := c.Admission(1).Refund(ctx, connect.NewRequest(&quoratev1.RefundRequest{Caller: "rid", RequestId: id, Key: i}))
		if err != nil || !resp.Msg.GetRefunded() || resp.Msg.GetCost() != want {
			t.Fatalf("refund of %s: %v, %v; want %d back", i, resp, err, want)
		}
	}
	_, err = c.Admission(2).Refund(ctx, connect.NewRequest(&quoratev1.RefundRequest{Caller: "rid", RequestId: id, Key: "{s}never"}))
	wantCode(t, "refund of a key the request_id never had", err, connect.CodeNotFound, "")
	_, err = c.Admission(2).Refund(ctx, connect.NewRequest(&quoratev1.RefundRequest{Caller: "rid", RequestId: id}))
	wantCode(t, "refund without a key", err, connect.CodeInvalidArgument, "key")

	// Leases: one request_id acquires a slot of two keys of one group.
	for _, key := range []string{first, sameGroup} {
		resp, err := c.Lease(0).AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{Policy: "slots", Key: key, Caller: "rid", RequestId: "lease-1"}))
		if err != nil || !resp.Msg.GetAllowed() || resp.Msg.GetDuplicate() {
			t.Fatalf("acquire %s: %v, %v; want a fresh lease", key, resp, err)
		}
	}
}
