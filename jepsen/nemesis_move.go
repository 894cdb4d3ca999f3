package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// FamilyMove moves a data group's replica to a node outside the group
// (AdminService.MoveReplica), so decisions go on while the group's leader
// adds the new replica and removes the old one — the leader itself, half the
// time. It needs data groups and more nodes than replicas per group; it is
// not part of "mixed", name it (e.g. --faults move,kill --nodes 5 --groups 8).
const FamilyMove = "move"

// moveReplica asks a random node to move a random replica of a random data
// group (its leader's, when known, half of the time) to a random node
// outside the group, and waits (up to d×4) until the new replica serves.
func (n *Nemesis) moveReplica(ctx context.Context, c *Cluster, rng *rand.Rand, d time.Duration) Fault {
	f := Fault{Kind: "move-replica", Start: time.Now()}
	var st *quoratev1.ClusterStatusResponse
	var err error
	live := c.Live()
	for i := range len(live) {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		var resp *connect.Response[quoratev1.ClusterStatusResponse]
		resp, err = c.Admin(live[(rng.IntN(len(live))+i)%len(live)]).ClusterStatus(cctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		cancel()
		if err == nil {
			st = resp.Msg
			break
		}
	}
	if st == nil {
		return finish(f, fmt.Errorf("no status: %w", err))
	}
	groups := st.GetShardMap().GetGroups()
	if len(groups) == 0 {
		return finish(f, errors.New("the cluster has no data groups"))
	}
	g := groups[rng.IntN(len(groups))]
	var outside []string
	for _, id := range c.LiveIDs() {
		if !slices.Contains(g.GetReplicas(), id) {
			outside = append(outside, id)
		}
	}
	if len(outside) == 0 {
		return finish(f, fmt.Errorf("group %d is on every node", g.GetId()))
	}
	from := g.GetReplicas()[rng.IntN(len(g.GetReplicas()))]
	if rng.IntN(2) == 0 {
		for _, m := range st.GetMembers() {
			for _, gs := range m.GetStatus().GetGroups() {
				if gs.GetId() == g.GetId() && gs.GetRole() == "leader" {
					from, f.Kind = m.GetId(), "move-replica-leader"
				}
			}
		}
	}
	to := outside[rng.IntN(len(outside))]
	f.Node = fmt.Sprintf("group %d: %s → %s", g.GetId(), from, to)
	req := &quoratev1.MoveReplicaRequest{Group: g.GetId(), From: from, To: to}
	deadline := time.Now().Add(4 * d)
	for i := 0; ; i++ {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = c.Admin(live[i%len(live)]).MoveReplica(cctx, connect.NewRequest(req))
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return finish(f, err)
	}
	// Until the new replica answers for the group (leader or follower).
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if serving(ctx, c, to, g.GetId()) {
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return finish(f, nil)
}

// serving reports whether member id says it hosts group gid as leader or
// follower.
func serving(ctx context.Context, c *Cluster, id string, gid uint32) bool {
	for _, i := range c.Live() {
		if c.Nodes[i].ID != id {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		resp, err := c.Admin(i).NodeStatus(cctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
		if err != nil {
			return false
		}
		for _, g := range resp.Msg.GetNode().GetGroups() {
			if g.GetId() == gid && (g.GetRole() == "leader" || g.GetRole() == "follower") {
				return true
			}
		}
	}
	return false
}
