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

// A Join without a feature level, or with one above what the binary knows,
// is refused on every node, naming the field, and changes nothing. Once
// every registered node is at a higher level than this binary's (as nodes
// of a later binary register), a join at this binary's level is refused
// too: a node below the cluster's level could not apply what it writes.
func TestJoinFeatureLevelIsChecked(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	before := node.Registry(c.Node(0))
	intruder := func(level uint32) *quoratev1.JoinRequest {
		return &quoratev1.JoinRequest{Id: "intruder", RaftAddr: "127.0.0.1:1", ApiAddr: "127.0.0.1:2", FeatureLevel: level}
	}
	refused := func(name string, req *quoratev1.JoinRequest, want string) {
		t.Helper()
		for i := range c.Len() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.Admin(i).Join(ctx, connect.NewRequest(req))
			cancel()
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument ||
				!strings.Contains(err.Error(), "feature_level") || !strings.Contains(err.Error(), want) {
				t.Fatalf("%s through node %d: %v; want invalid_argument naming feature_level (%q)", name, i, err, want)
			}
		}
	}
	refused("no level", intruder(0), "must be set")
	refused("unknown level", intruder(fsm.FeatureLevel+1), fmt.Sprintf("%d is above", fsm.FeatureLevel+1))
	for i := range c.Len() {
		if got := node.Registry(c.Node(i)); !maps.Equal(got, before) {
			t.Fatalf("node %d: registry %v, want %v", i, got, before)
		}
		if got := node.MinFeatureLevel(c.Node(i)); got != fsm.FeatureLevel {
			t.Fatalf("node %d: cluster feature level %d, want %d", i, got, fsm.FeatureLevel)
		}
	}

	const later = fsm.FeatureLevel + 1
	c.Eventually(t, 20*time.Second, fmt.Sprintf("every node registered at %d", later), func() error {
		leader := c.Leader(t)
		for id := range before {
			if err := node.RegisterAtLevel(c.Node(leader), id, later); err != nil {
				return err
			}
		}
		for i := range c.Len() {
			if got := node.MinFeatureLevel(c.Node(i)); got != later {
				return fmt.Errorf("node %d: cluster feature level %d", i, got)
			}
		}
		return nil
	})
	refused("below the cluster's level", intruder(fsm.FeatureLevel),
		fmt.Sprintf("%d is below %d, the cluster's feature level", fsm.FeatureLevel, later))
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
}
