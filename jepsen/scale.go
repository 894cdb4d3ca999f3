package jepsen

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// ScaleNodes is how many nodes the scale scenario adds, then removes.
const ScaleNodes = 2

// dataReplicas is how many replicas the server gives each data group
// (fewer on a smaller cluster).
const dataReplicas = 3

// scaleStepWait bounds each step of the scale scenario. Draining waits
// for the drained nodes to close their replicas, which a follower does
// only after the server's removal grace (30 s).
const scaleStepWait = 60 * time.Second

// Scale runs the scale scenario while the workloads go on: N members →
// N+ScaleNodes → N, on a cluster started with ClusterOptions.Spare ≥
// ScaleNodes and data groups. Each step is recorded as a fault:
//
//  1. scale-join: start the spare nodes one at a time with `quorate serve
//     --join` (Cluster.AddNode), each a member once the cluster lists it
//     answering;
//  2. scale-split: split the group owning the most slots (SplitGroup): the
//     new group's replicas go to the nodes holding the fewest replicas, the
//     new ones, and half the slots move to it with their state;
//  3. scale-move-replica: move a replica of a group the new nodes do not
//     hold onto one of them (MoveReplica), off a node about to be drained;
//  4. for each of ScaleNodes original nodes — n1, which bootstrapped the
//     cluster, and random others — one at a time: scale-drain: DrainNode,
//     then wait until the shard map places no replica on it and every
//     group's replicas serve it on the other members, under one leader
//     among them; scale-remove: take it out of the members the clients use
//     (Cluster.Withdraw), RemoveNode while it still runs, and wait until
//     ClusterStatus lists exactly the remaining members, all answering,
//     with a full set of meta voters. Removing it before the next drain
//     keeps that drain from placing replicas back on it (DrainNode picks the
//     registered node holding the fewest replicas: a drained one first);
//  5. scale-stop: once each drained node hosts no data group replica any
//     more (a node closes a replica the map no longer places on it when the
//     group's leader removed it as leader, else after the server's removal
//     grace of 30 s), stop it (Cluster.Retire).
//
// It returns the first error; the faults record how far it went.
func (n *Nemesis) Scale(ctx context.Context, c *Cluster, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x5ca1e))
	original := c.Live()
	step := func(kind, node string, do func(f *Fault) error) error {
		f := Fault{Kind: kind, Node: node, Start: time.Now()}
		err := do(&f)
		n.record(finish(f, err))
		if err != nil {
			return fmt.Errorf("%s %s: %w", kind, node, err)
		}
		return nil
	}
	var added []string
	for range ScaleNodes {
		if err := step("scale-join", "", func(f *Fault) error {
			i, err := c.AddNode(ctx)
			if err == nil {
				f.Node = c.Nodes[i].ID
				added = append(added, f.Node)
			}
			return err
		}); err != nil {
			return err
		}
	}
	// Which originals go: n1 and random others.
	drained := []string{c.Nodes[original[0]].ID}
	for _, p := range rng.Perm(len(original) - 1)[:min(ScaleNodes-1, len(original)-1)] {
		drained = append(drained, c.Nodes[original[1+p]].ID)
	}

	if err := step("scale-split", "", func(f *Fault) error {
		st, err := c.clusterStatus(ctx, 10*time.Second)
		if err != nil {
			return err
		}
		var big *quoratev1.ShardGroupStatus
		for _, g := range st.GetShardMap().GetGroups() {
			if big == nil || g.GetSlots() > big.GetSlots() {
				big = g
			}
		}
		if big == nil {
			return fmt.Errorf("the cluster has no data groups")
		}
		f.Node = fmt.Sprintf("group %d (%d slots)", big.GetId(), big.GetSlots())
		p, err := c.startPlan(ctx, 20*time.Second, fmt.Sprintf("split group %d:", big.GetId()),
			func(ctx context.Context, a quoratev1connect.AdminServiceClient) (*connect.Response[quoratev1.PlanResponse], error) {
				return a.SplitGroup(ctx, connect.NewRequest(&quoratev1.SplitGroupRequest{Group: big.GetId()}))
			})
		if err != nil {
			return err
		}
		done, err := c.waitPlan(ctx, p.GetId(), scaleStepWait)
		if done != nil {
			f.Plan = outcomeOf(done)
			f.Node += " → " + done.GetSummary()
		}
		if err == nil && done.GetState() != "done" {
			err = fmt.Errorf("plan %d ended %s: %s", done.GetId(), done.GetState(), done.GetError())
		}
		return err
	}); err != nil {
		return err
	}

	if err := step("scale-move-replica", "", func(f *Fault) error {
		st, err := c.clusterStatus(ctx, 10*time.Second)
		if err != nil {
			return err
		}
		for _, g := range st.GetShardMap().GetGroups() {
			reps := g.GetReplicas()
			if slices.ContainsFunc(reps, func(r string) bool { return slices.Contains(added, r) }) {
				continue
			}
			for _, from := range reps {
				if !slices.Contains(drained, from) {
					continue
				}
				req := &quoratev1.MoveReplicaRequest{Group: g.GetId(), From: from, To: added[rng.IntN(len(added))]}
				f.Node = fmt.Sprintf("group %d: %s → %s", req.GetGroup(), req.GetFrom(), req.GetTo())
				return c.adminRetry(ctx, 20*time.Second, func(ctx context.Context, a quoratev1connect.AdminServiceClient) error {
					_, err := a.MoveReplica(ctx, connect.NewRequest(req))
					return err
				})
			}
		}
		f.Node = "none needed"
		return nil
	}); err != nil {
		return err
	}

	// One node at a time: drain it (its groups' leaders hand its replicas
	// to other nodes), then remove it from the cluster while it still runs,
	// so that the next drain cannot place replicas on it (DrainNode picks
	// the registered node holding the fewest replicas: a drained one first).
	var keep []string
	for _, id := range c.LiveIDs() {
		if !slices.Contains(drained, id) {
			keep = append(keep, id)
		}
	}
	for _, id := range drained {
		i := slices.IndexFunc(c.Nodes, func(nd *Node) bool { return nd.ID == id })
		if err := step("scale-drain", id, func(f *Fault) error {
			var moves uint32
			err := c.adminRetry(ctx, 20*time.Second, func(ctx context.Context, a quoratev1connect.AdminServiceClient) error {
				resp, err := a.DrainNode(ctx, connect.NewRequest(&quoratev1.DrainNodeRequest{Id: id}))
				if err == nil {
					moves = resp.Msg.GetMoves()
				}
				return err
			})
			if err != nil {
				return err
			}
			f.Node += fmt.Sprintf(" (%d replicas moved)", moves)
			members := c.LiveIDs()
			others := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == id })
			return c.pollStatus(ctx, scaleStepWait, func(st *quoratev1.ClusterStatusResponse) []string {
				return replicaProblems(st, members, others, min(dataReplicas, len(keep)))
			})
		}); err != nil {
			return err
		}
		if err := step("scale-remove", id, func(*Fault) error {
			c.Withdraw(i)
			if err := c.adminRetry(ctx, 20*time.Second, func(ctx context.Context, a quoratev1connect.AdminServiceClient) error {
				_, err := a.RemoveNode(ctx, connect.NewRequest(&quoratev1.RemoveNodeRequest{Id: id}))
				return err
			}); err != nil {
				return err
			}
			return c.pollStatus(ctx, scaleStepWait, func(st *quoratev1.ClusterStatusResponse) []string {
				return memberProblems(st, c.LiveIDs())
			})
		}); err != nil {
			return err
		}
	}
	// Stop them once they have closed their replicas: a node closes a
	// replica the map no longer places on it when the group's leader
	// removed it as leader, else after the server's removal grace (30 s),
	// by when the group has replaced it. Stopping one earlier could leave a
	// group with two of four voters down (this one and the replica an
	// earlier drain replaced, if its removal is not yet done).
	return step("scale-stop", strings.Join(drained, " "), func(*Fault) error {
		deadline := time.Now().Add(scaleStepWait)
		for _, id := range drained {
			i := slices.IndexFunc(c.Nodes, func(nd *Node) bool { return nd.ID == id })
			for c.Running(i) { // (a fault that killed it cannot restart it: it is withdrawn)
				hosts, err := c.hostedGroups(ctx, i)
				if err == nil && len(hosts) == 0 {
					break
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					return fmt.Errorf("%s still hosts data groups %v (%v) after %v", id, hosts, err, scaleStepWait)
				}
				sleepCtx(ctx, 200*time.Millisecond)
			}
			if err := c.Retire(i); err != nil {
				return err
			}
		}
		return nil
	})
}

// hostedGroups asks node i (NodeStatus) which data group replicas it hosts.
func (c *Cluster) hostedGroups(ctx context.Context, i int) ([]uint32, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := c.Admin(i).NodeStatus(cctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
	if err != nil {
		return nil, err
	}
	var out []uint32
	for _, g := range resp.Msg.GetNode().GetGroups() {
		if g.GetId() != 0 {
			out = append(out, g.GetId())
		}
	}
	return out, nil
}

// pollStatus polls ClusterStatus on the members until problems finds none,
// for up to d; the error lists what was still wrong.
func (c *Cluster) pollStatus(ctx context.Context, d time.Duration, problems func(*quoratev1.ClusterStatusResponse) []string) error {
	deadline := time.Now().Add(d)
	var last []string
	for {
		st, err := c.clusterStatus(ctx, time.Until(deadline))
		if err == nil {
			if last = problems(st); len(last) == 0 {
				return nil
			}
		} else {
			last = []string{err.Error()}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("after %v: %s", d, strings.Join(last, "; "))
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// memberProblems lists how st's members differ from want: every one of
// them, no other, each answering; and at least min(3, len(want)) voters.
func memberProblems(st *quoratev1.ClusterStatusResponse, want []string) []string {
	var problems, have []string
	voters := 0
	for _, m := range st.GetMembers() {
		have = append(have, m.GetId())
		if !slices.Contains(want, m.GetId()) {
			problems = append(problems, fmt.Sprintf("%s is still a member", m.GetId()))
		} else if m.GetStatus() == nil {
			problems = append(problems, fmt.Sprintf("member %s does not answer: %s", m.GetId(), m.GetError()))
		}
		if m.GetSuffrage() == "voter" {
			voters++
		}
	}
	for _, id := range want {
		if !slices.Contains(have, id) {
			problems = append(problems, fmt.Sprintf("%s is not a member", id))
		}
	}
	if voters < min(3, len(want)) {
		problems = append(problems, fmt.Sprintf("%d meta voters among %v", voters, have))
	}
	return problems
}

// replicaProblems lists what keeps st's data groups from being whole:
// each needs want distinct replicas in the shard map, all among live, each
// of which reports the group as leader or follower, all of them naming the
// same leader, one of the replicas. members are the IDs that should be
// members (answering) — live and any other still running.
func replicaProblems(st *quoratev1.ClusterStatusResponse, members, live []string, want int) []string {
	hosted := map[string]map[uint32]*quoratev1.GroupState{}
	for _, m := range st.GetMembers() {
		if m.GetStatus() == nil {
			continue
		}
		hosted[m.GetId()] = map[uint32]*quoratev1.GroupState{}
		for _, g := range m.GetStatus().GetGroups() {
			hosted[m.GetId()][g.GetId()] = g
		}
	}
	problems := memberProblems(st, members)
	groups := st.GetShardMap().GetGroups()
	if len(groups) == 0 {
		return append(problems, "no shard map")
	}
	for _, g := range groups {
		reps := g.GetReplicas()
		distinct := slices.Compact(slices.Sorted(slices.Values(reps)))
		if len(reps) != want || len(distinct) != want {
			problems = append(problems, fmt.Sprintf("group %d has replicas %v, want %d", g.GetId(), reps, want))
		}
		leaders := map[string]bool{}
		for _, r := range reps {
			if !slices.Contains(live, r) {
				problems = append(problems, fmt.Sprintf("group %d has a replica on %s, not a live member", g.GetId(), r))
				continue
			}
			gs := hosted[r][g.GetId()]
			switch {
			case hosted[r] == nil:
				problems = append(problems, fmt.Sprintf("group %d: %s does not answer", g.GetId(), r))
			case gs == nil:
				problems = append(problems, fmt.Sprintf("group %d: %s does not host it yet", g.GetId(), r))
			case gs.GetRole() != "leader" && gs.GetRole() != "follower":
				problems = append(problems, fmt.Sprintf("group %d: %s is %s", g.GetId(), r, gs.GetRole()))
			default:
				leaders[gs.GetLeaderId()] = true
			}
		}
		if ls := slices.Sorted(maps.Keys(leaders)); len(ls) > 1 || (len(ls) == 1 && !slices.Contains(reps, ls[0])) {
			problems = append(problems, fmt.Sprintf("group %d: its replicas see leaders %q", g.GetId(), ls))
		}
	}
	return problems
}

// CheckGroupReplicas polls the cluster (for up to d) until every data
// group has min(3, members) replicas in the shard map, all on live members,
// each serving it (leader or follower) under one leader among them. It
// fails with what was still wrong at the deadline.
func CheckGroupReplicas(ctx context.Context, c *Cluster, d time.Duration) Verdict {
	v := Verdict{Checker: "group-replicas", OK: true}
	live := c.LiveIDs()
	want := min(dataReplicas, len(live))
	var groups int
	err := c.pollStatus(ctx, d, func(st *quoratev1.ClusterStatusResponse) []string {
		groups = len(st.GetShardMap().GetGroups())
		return replicaProblems(st, live, live, want)
	})
	if err != nil {
		v.violate("%v", err)
		v.Summary = fmt.Sprintf("data groups not whole on members %v", live)
		return v
	}
	v.Summary = fmt.Sprintf("%d data groups, each with %d replicas serving on members %v", groups, want, live)
	return v
}

// checkScale is the scale scenario's verdict: it completed, and the
// cluster's members are nodes members, exactly those running, all
// answering, with a full set of meta voters.
func checkScale(ctx context.Context, c *Cluster, nodes int, scaleErr error) Verdict {
	v := Verdict{Checker: "scale", OK: true}
	live := c.LiveIDs()
	v.Summary = fmt.Sprintf("%d → %d → %d members: %s at the end", nodes, nodes+ScaleNodes, len(live), strings.Join(live, " "))
	if scaleErr != nil {
		v.violate("the scenario stopped: %v", scaleErr)
	}
	if len(live) != nodes {
		v.violate("%d members at the end, want %d", len(live), nodes)
	}
	if err := c.pollStatus(ctx, 10*time.Second, func(st *quoratev1.ClusterStatusResponse) []string {
		return memberProblems(st, live)
	}); err != nil {
		v.violate("members: %v", err)
	}
	return v
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
