package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
	"github.com/quorate/quorate/shard"
)

// FamilySlots moves slots, with their state, between data groups while
// the workloads run (AdminService.MoveSlots: freeze at the source, copy
// through the target's log, flip the shard map, the source deletes): each
// fault moves a contiguous run of 8–256 slots of a random group — two
// times in three one holding a workload key — to another random group and
// waits for the plan to end. Every fourth fault (in turn from a random
// start, so that a short run sees each kind) cancels its move shortly after
// it starts (CancelPlan: rolled back, or refused once the map flipped);
// every fourth splits a group instead (SplitGroup), while there are fewer
// than 12; and, when FamilyKill is among the families too, every fourth
// kills the meta leader — the plan's coordinator — shortly after its move
// starts, restarting it after the fault duration (faults are otherwise one
// at a time, so no kill would land during a plan). A plan that fails is the
// fault's error. It needs at least two
// data groups; it is not part of "mixed", name it (e.g. --faults slots,kill
// --groups 4).
const FamilySlots = "slots"

// Slot-move sizes and the split cap of FamilySlots.
const (
	slotsMinRun    = 8
	slotsMaxRun    = 256
	slotsMaxGroups = 12
	// slotsPlanWait bounds the wait for one plan; it goes on past the end
	// of the run, so the map is stable when the checks read the state.
	slotsPlanWait = 60 * time.Second
)

// slotModel is the nemesis's copy of the shard map's slot ranges, which
// ClusterStatus does not show (only each group's slot count): the first
// map's even split (shard.InitialMap) plus the moves of every plan since,
// read from ListPlans. It is checked against the slot counts before each
// use; while they disagree (or when no first map could be told) moves name
// a count of slots (the group's last ones) instead of a range.
type slotModel struct {
	owner  []uint32 // by slot; nil: unknown
	seen   uint64   // highest plan ID applied
	broken bool     // could not be built: never will
	agrees bool     // the last sync's slot counts matched
}

// sync brings m up to the plans and checks it against groups (agrees).
// groups and plans should come from one node (the meta leader): a view
// that lags the plans disagrees until it catches up.
func (m *slotModel) sync(groups []*quoratev1.ShardGroupStatus, plans []*quoratev1.PlanStatus) {
	m.agrees = false
	if m.broken {
		return
	}
	if m.owner == nil {
		// The first map, if no plan has changed it yet.
		for _, p := range plans {
			if outcomeOf(p).Slots > 0 || planActive(p.GetState()) {
				m.broken = true
				return
			}
			m.seen = max(m.seen, p.GetId())
		}
		ids := make([]uint32, len(groups))
		for i, g := range groups {
			ids[i] = g.GetId()
		}
		slices.Sort(ids)
		m.owner = make([]uint32, shard.SlotCount)
		for i, id := range ids {
			for s := i * shard.SlotCount / len(ids); s < (i+1)*shard.SlotCount/len(ids); s++ {
				m.owner[s] = id
			}
		}
	}
	ps := slices.Clone(plans)
	slices.SortFunc(ps, func(a, b *quoratev1.PlanStatus) int { return int(a.GetId()) - int(b.GetId()) })
	for _, p := range ps {
		if p.GetId() <= m.seen {
			continue
		}
		if planActive(p.GetState()) {
			break // applied once it ends
		}
		for _, st := range p.GetSteps() {
			if mv, ok := parseMoveAction(st.GetAction()); ok && (st.GetPhase() == "flipped" || st.GetPhase() == "done") {
				for s := mv.start; s < mv.end && int(s) < len(m.owner); s++ {
					m.owner[s] = mv.to
				}
			}
		}
		m.seen = p.GetId()
	}
	count := map[uint32]uint32{}
	for _, g := range m.owner {
		count[g]++
	}
	for _, g := range groups {
		if count[g.GetId()] != g.GetSlots() {
			return
		}
	}
	m.agrees = len(groups) > 0
}

// runAround returns a random run of n slots of group g's owned range that
// holds slot s (shorter when that range is).
func (m *slotModel) runAround(rng *rand.Rand, s int, n int) (start, end int) {
	g := m.owner[s]
	lo, hi := s, s+1
	for lo > 0 && m.owner[lo-1] == g {
		lo--
	}
	for hi < len(m.owner) && m.owner[hi] == g {
		hi++
	}
	n = min(n, hi-lo)
	first, last := max(lo, s-n+1), min(s, hi-n) // start within [first, last]
	start = first + rng.IntN(last-first+1)
	return start, start + n
}

// slots injects one FamilySlots fault.
func (n *Nemesis) slots(ctx context.Context, c *Cluster, rng *rand.Rand, opts NemesisOptions) Fault {
	f := Fault{Kind: "slots", Start: time.Now()} // slots-move, -move-cancel, -move-kill-leader or -split once chosen
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), slotsPlanWait)
	defer cancel()
	groups, plans, err := c.metaView(wctx, 10*time.Second)
	if err != nil {
		return finish(f, err)
	}
	n.slotMap.sync(groups, plans)
	var withSlots []*quoratev1.ShardGroupStatus
	for _, g := range groups {
		if g.GetSlots() > 0 {
			withSlots = append(withSlots, g)
		}
	}
	if len(groups) < 2 || len(withSlots) == 0 {
		return finish(f, fmt.Errorf("slot moves need two data groups, the cluster has %d", len(groups)))
	}

	// One fault in four splits, one in four cancels its move, and with
	// FamilyKill one in four kills the coordinator (the meta leader) while
	// its move runs: in turn, from a random start, so that a short run sees
	// every kind.
	if n.slotsTurn == 0 {
		n.slotsTurn = 1 + rng.IntN(4)
	}
	turn := n.slotsTurn % 4
	n.slotsTurn++
	var p *quoratev1.PlanStatus
	if turn == 0 && len(groups) < slotsMaxGroups {
		var big []*quoratev1.ShardGroupStatus
		for _, g := range groups {
			if g.GetSlots() >= 2*slotsMinRun {
				big = append(big, g)
			}
		}
		if len(big) > 0 {
			g := big[rng.IntN(len(big))]
			f.Kind, f.Node = "slots-split", fmt.Sprintf("group %d (%d slots)", g.GetId(), g.GetSlots())
			p, err = c.startPlan(wctx, 20*time.Second, fmt.Sprintf("split group %d:", g.GetId()),
				func(ctx context.Context, a quoratev1connect.AdminServiceClient) (*connect.Response[quoratev1.PlanResponse], error) {
					return a.SplitGroup(ctx, connect.NewRequest(&quoratev1.SplitGroupRequest{Group: g.GetId()}))
				})
		}
	}
	if f.Kind == "slots" {
		req, desc := n.pickMove(rng, groups, withSlots, opts.Keys)
		f.Kind = "slots-move"
		switch {
		case turn == 2:
			f.Kind = "slots-move-cancel"
		case turn == 3 && slices.Contains(opts.Families, FamilyKill):
			f.Kind = "slots-move-kill-leader"
		}
		f.Node = desc
		total := req.GetCount()
		if total == 0 {
			total = req.GetEnd() - req.GetStart()
		}
		p, err = c.startPlan(wctx, 20*time.Second, fmt.Sprintf("move %d slots from group %d to group %d", total, req.GetFrom(), req.GetTo()),
			func(ctx context.Context, a quoratev1connect.AdminServiceClient) (*connect.Response[quoratev1.PlanResponse], error) {
				return a.MoveSlots(ctx, connect.NewRequest(req))
			})
	}
	if err != nil {
		return finish(f, err)
	}
	cancelState := ""
	if f.Kind == "slots-move-cancel" {
		sleepCtx(wctx, time.Duration(rng.IntN(60))*time.Millisecond) // pacing: early in the copy, or after it
		cerr := c.adminRetry(wctx, 10*time.Second, func(ctx context.Context, a quoratev1connect.AdminServiceClient) error {
			_, err := a.CancelPlan(ctx, connect.NewRequest(&quoratev1.CancelPlanRequest{Id: p.GetId()}))
			return err
		})
		switch {
		case cerr == nil:
			cancelState = "cancelled"
		case connect.CodeOf(cerr) == connect.CodeFailedPrecondition:
			cancelState = "refused"
		default:
			return finish(f, fmt.Errorf("cancel plan %d: %w", p.GetId(), cerr))
		}
	}
	var killErr error
	if f.Kind == "slots-move-kill-leader" {
		sleepCtx(wctx, time.Duration(rng.IntN(60))*time.Millisecond) // pacing: early in the copy, or after it
		if l, err := c.Leader(wctx); err != nil {
			killErr = fmt.Errorf("no meta leader to kill: %w", err)
		} else {
			f.Node += "; killed " + c.Nodes[l].ID
			killErr = c.Kill(l)
			sleepCtx(wctx, opts.Duration)
			killErr = joinErr(killErr, c.Restart(l))
		}
	}
	done, err := c.waitPlan(wctx, p.GetId(), slotsPlanWait)
	if done != nil {
		f.Plan = outcomeOf(done)
		f.Plan.Cancel = cancelState
	}
	if err == nil && done.GetState() == "failed" {
		err = fmt.Errorf("plan %d failed: %s", done.GetId(), done.GetError())
	}
	return finish(f, joinErr(killErr, err))
}

// pickMove chooses a FamilySlots move: from a group with slots to another
// group, a run of 8–256 slots — around a workload key's slot two times in
// three — as a range when the slot model holds, else as a count.
func (n *Nemesis) pickMove(rng *rand.Rand, groups, withSlots []*quoratev1.ShardGroupStatus, keys []string) (*quoratev1.MoveSlotsRequest, string) {
	size := slotsMinRun + rng.IntN(slotsMaxRun-slotsMinRun+1)
	from := withSlots[rng.IntN(len(withSlots))]
	var m *slotModel
	if n.slotMap.owner != nil && n.slotMap.agrees {
		m = &n.slotMap
	}
	slot, key := -1, ""
	if m != nil {
		if len(keys) > 0 && rng.IntN(3) < 2 {
			key = keys[rng.IntN(len(keys))]
			slot = int(shard.SlotOf(key))
		} else {
			// A random slot of from's.
			k := rng.IntN(int(from.GetSlots()))
			for s, g := range m.owner {
				if g == from.GetId() {
					if k == 0 {
						slot = s
						break
					}
					k--
				}
			}
		}
	}
	if slot >= 0 {
		for _, g := range groups {
			if g.GetId() == m.owner[slot] {
				from = g
			}
		}
	}
	var others []uint32
	for _, g := range groups {
		if g.GetId() != from.GetId() {
			others = append(others, g.GetId())
		}
	}
	to := others[rng.IntN(len(others))]
	if slot < 0 {
		size = min(size, int(from.GetSlots()))
		return &quoratev1.MoveSlotsRequest{From: from.GetId(), To: to, Count: uint32(size)},
			fmt.Sprintf("group %d → %d: its last %d slots", from.GetId(), to, size)
	}
	start, end := m.runAround(rng, slot, size)
	desc := fmt.Sprintf("group %d → %d: [%d,%d)", from.GetId(), to, start, end)
	if key != "" {
		desc += " with key " + key
	}
	return &quoratev1.MoveSlotsRequest{From: from.GetId(), To: to, Start: uint32(start), End: uint32(end)}, desc
}

// metaView reads the shard map's groups and the plans from one node — the
// meta leader when a member knows it — retrying for up to d until the map
// has data groups (a node that has just restarted may answer before its
// meta replica has caught up).
func (c *Cluster) metaView(ctx context.Context, d time.Duration) ([]*quoratev1.ShardGroupStatus, []*quoratev1.PlanStatus, error) {
	deadline := time.Now().Add(d)
	for {
		via := c.nextMember()
		if l, err := c.Leader(ctx); err == nil {
			via = l
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := c.Admin(via).ClusterStatus(cctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		var plans *connect.Response[quoratev1.ListPlansResponse]
		if err == nil {
			plans, err = c.Admin(via).ListPlans(cctx, connect.NewRequest(&quoratev1.ListPlansRequest{}))
		}
		cancel()
		if err == nil && len(st.Msg.GetShardMap().GetGroups()) > 0 {
			return st.Msg.GetShardMap().GetGroups(), plans.Msg.GetPlans(), nil
		}
		if err == nil {
			err = fmt.Errorf("%s knows no data groups", c.Nodes[via].ID)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, nil, fmt.Errorf("no view of the shard map: %w", err)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}
