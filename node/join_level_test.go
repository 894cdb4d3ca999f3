package node_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// A Join without a feature level, with one above what the binary knows,
// or with one below the cluster's (the lowest of its registered nodes: a
// node there could not apply what the cluster writes) is refused on every
// node, naming the field, for a new node and for a registered one at its
// own addresses alike; it changes nothing: the registry and the cluster's
// level stay, and removals still work.
func TestJoinFeatureLevelIsChecked(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	before := node.Registry(c.Node(0))
	self := before["node3"]
	intruder := func(level uint32) *quoratev1.JoinRequest {
		return &quoratev1.JoinRequest{Id: "intruder", RaftAddr: "127.0.0.1:1", ApiAddr: "127.0.0.1:2", FeatureLevel: level}
	}
	below := fmt.Sprintf("is below %d, the cluster's feature level", fsm.FeatureLevel)
	for _, tc := range []struct {
		name string
		req  *quoratev1.JoinRequest
		want string
	}{
		{"no level", intruder(0), "must be set"},
		{"unknown level", intruder(99), "99 is above"},
		{"level 1", intruder(1), "1 " + below},
		{"node3 at level 1", &quoratev1.JoinRequest{Id: "node3", RaftAddr: self.RaftAddr, ApiAddr: self.APIAddr, FeatureLevel: 1}, below},
		{"node3 one level down", &quoratev1.JoinRequest{Id: "node3", RaftAddr: self.RaftAddr, ApiAddr: self.APIAddr, FeatureLevel: fsm.FeatureLevel - 1}, below},
	} {
		for i := range c.Len() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.Admin(i).Join(ctx, connect.NewRequest(tc.req))
			cancel()
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument ||
				!strings.Contains(err.Error(), "feature_level") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s through node %d: %v; want invalid_argument naming feature_level (%q)", tc.name, i, err, tc.want)
			}
		}
	}
	for i := range c.Len() {
		if got := node.Registry(c.Node(i)); !maps.Equal(got, before) {
			t.Fatalf("node %d: registry %v, want %v", i, got, before)
		}
	}
	for i := range c.Len() {
		if got := node.MinFeatureLevel(c.Node(i)); got != fsm.FeatureLevel {
			t.Fatalf("node %d: cluster feature level %d, want %d", i, got, fsm.FeatureLevel)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Msg.GetMembers() {
		if m.GetId() == "intruder" {
			t.Fatalf("the refused node is a member: %v", m)
		}
	}
	// Removal (which needs the cluster's level) still works.
	c.Stop(2)
	c.Eventually(t, 20*time.Second, "node3 removed", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Admin(0).RemoveNode(ctx, connect.NewRequest(&quoratev1.RemoveNodeRequest{Id: "node3"}))
		return err
	})
}
