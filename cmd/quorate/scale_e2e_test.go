package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/devcluster"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// newGroupsCluster starts n nodes with groups data groups and waits until
// the shard map exists with every group formed.
func newGroupsCluster(t *testing.T, n, groups int) *nodetest.Cluster {
	t.Helper()
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: n, Configure: func(_ int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = groups, n
	}})
	shardMap(t, c, 0, func(sm *quoratev1.ShardMapStatus) error {
		if len(sm.GetGroups()) != groups {
			return fmt.Errorf("%d groups", len(sm.GetGroups()))
		}
		return nil
	})
	return c
}

// shardMap polls node i's ClusterStatus until cond accepts its shard map
// (with no group forming), and returns the whole status.
func shardMap(t *testing.T, c *nodetest.Cluster, i int, cond func(*quoratev1.ShardMapStatus) error) *quoratev1.ClusterStatusResponse {
	t.Helper()
	var out *quoratev1.ClusterStatusResponse
	c.Eventually(t, 30*time.Second, "the shard map", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := c.Admin(i).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return err
		}
		sm := resp.Msg.GetShardMap()
		if sm == nil {
			return errors.New("no shard map yet")
		}
		for _, g := range sm.GetGroups() {
			if g.GetForming() {
				return fmt.Errorf("group %d forming", g.GetId())
			}
		}
		if err := cond(sm); err != nil {
			return err
		}
		out = resp.Msg
		return nil
	})
	return out
}

// The README's scaling commands with --wait, each sent to a node that is not
// the meta leader: the plans are read consistently there, so every wait
// follows its plan to the end instead of failing with "plan N is not listed".
func TestPlanWaitsOnAFollower(t *testing.T) {
	c := newGroupsCluster(t, 3, 2)
	leader := c.Leader(t)
	followers := []string{c.APIURL((leader + 1) % 3), c.APIURL((leader + 2) % 3)}
	for i, args := range [][]string{
		{"admin", "group", "split", "1", "--wait"},
		{"admin", "slots", "move", "--from", "3", "--to", "2", "--count", "100", "--wait"},
		{"admin", "group", "add", "--wait"},
	} {
		args = append(args, "--server", followers[i%2], "--timeout", "60s")
		out, errOut, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("quorate %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
		}
		if !strings.Contains(out, " done: ") {
			t.Errorf("quorate %s: output does not end with the plan done:\n%s", strings.Join(args, " "), out)
		}
		if !strings.Contains(errOut, "waiting up to 1m0s (--timeout) for plan ") {
			t.Errorf("quorate %s: stderr does not say what it waits for:\n%s", strings.Join(args, " "), errOut)
		}
	}
}

// As in the README: node5 is pre-registered but never started, then node4 is
// drained and removed. The drain places nothing on node5 (it would never
// open its replicas, and the wait would never end) and completes. An
// explicit move onto node5 is allowed, but its wait says why it does not
// progress and gives up at --timeout.
func TestDrainSkipsNodesThatNeverStarted(t *testing.T) {
	c := newGroupsCluster(t, 4, 2)
	leader := c.Leader(t)
	follower := c.APIURL((leader + 1) % 4)
	port := freePortRange(t, 2)
	out, errOut, err := runCLI(t, "admin", "node", "add", "node5", "--server", follower,
		"--raft-addr", fmt.Sprintf("127.0.0.1:%d", port), "--api-addr", fmt.Sprintf("127.0.0.1:%d", port+1))
	if err != nil {
		t.Fatalf("node add: %v\n%s%s", err, out, errOut)
	}
	drained := "node4"
	server := c.APIURL(0)
	if c.Node(0).ID() == drained {
		server = c.APIURL(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stdout, stderr devcluster.Output
	err = run(ctx, []string{"admin", "node", "drain", drained, "--remove", "--server", server, "--timeout", "60s"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("node drain %s --remove: %v\nstdout:\n%s\nstderr:\n%s", drained, err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), drained+" removed from the cluster") {
		t.Errorf("drain output:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "waiting up to 1m0s (--timeout) for "+drained+" to host no data group replica") {
		t.Errorf("drain stderr does not say what it waits for:\n%s", stderr.String())
	}
	st := shardMap(t, c, 0, func(sm *quoratev1.ShardMapStatus) error { return nil })
	for _, g := range st.GetShardMap().GetGroups() {
		if slices.Contains(g.GetReplicas(), "node5") || slices.Contains(g.GetReplicas(), drained) {
			t.Errorf("group %d has replicas %v: none may be on node5 (never started) or %s (drained)", g.GetId(), g.GetReplicas(), drained)
		}
	}

	// Asked for explicitly, a move onto node5 is written; its wait says
	// why it cannot end, and ends at --timeout.
	g := st.GetShardMap().GetGroups()[0]
	start := time.Now()
	out, errOut, err = runCLI(t, "admin", "replica", "move", "--group", fmt.Sprint(g.GetId()), "--from", g.GetReplicas()[0],
		"--to", "node5", "--wait", "--timeout", "3s", "--server", server)
	if elapsed := time.Since(start); elapsed > 15*time.Second {
		t.Errorf("replica move --wait --timeout 3s took %v", elapsed)
	}
	wantErrNaming(t, err, "gave up waiting for node5", "--timeout 3s", "node5 has not joined the cluster")
	if !strings.Contains(errOut, "waiting up to 3s (--timeout) for node5") || !strings.Contains(errOut, "still waiting for node5") {
		t.Errorf("replica move stderr lacks the wait's progress lines:\n%s", errOut)
	}
	if !strings.Contains(out, "node5 has not joined the cluster") {
		t.Errorf("replica move output does not say why it waits:\n%s", out)
	}
}
