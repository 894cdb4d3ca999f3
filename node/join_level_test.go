package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// A Join without a feature level, or with one above what the binary knows,
// is refused on every node (naming the field) and changes nothing: the
// cluster's level stays, and removals still work.
func TestJoinFeatureLevelIsChecked(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	for _, tc := range []struct {
		name  string
		level uint32
		want  string
	}{
		{"no level", 0, "must be set"},
		{"unknown level", 99, "99 is above"},
	} {
		for i := range c.Len() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.Admin(i).Join(ctx, connect.NewRequest(&quoratev1.JoinRequest{
				Id: "intruder", RaftAddr: "127.0.0.1:1", ApiAddr: "127.0.0.1:2", FeatureLevel: tc.level}))
			cancel()
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument ||
				!strings.Contains(err.Error(), "feature_level") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s through node %d: %v; want invalid_argument naming feature_level (%q)", tc.name, i, err, tc.want)
			}
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
