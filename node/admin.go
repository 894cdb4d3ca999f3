package node

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/control"
	"github.com/quorate/quorate/node/internal/engine"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
	"github.com/quorate/quorate/shard"
)

// adminHandler serves quorate.v1.AdminService.
type adminHandler struct {
	n *Node
}

var _ quoratev1connect.AdminServiceHandler = (*adminHandler)(nil)

func (h *adminHandler) NodeStatus(context.Context, *connect.Request[quoratev1.NodeStatusRequest]) (*connect.Response[quoratev1.NodeStatusResponse], error) {
	return connect.NewResponse(&quoratev1.NodeStatusResponse{Node: h.nodeState()}), nil
}

// nodeState is this node's own view of itself and the replicas it hosts.
func (h *adminHandler) nodeState() *quoratev1.NodeState {
	n := h.n
	_, leaderID := n.meta.Raft.LeaderWithID()
	out := &quoratev1.NodeState{
		Id:                  n.cfg.ID,
		Role:                roleName(n.meta.Raft.State()),
		LeaderId:            string(leaderID),
		Term:                n.meta.Raft.CurrentTerm(),
		LastAppliedIndex:    n.meta.Raft.AppliedIndex(),
		CommitIndex:         n.meta.Raft.CommitIndex(),
		MetaFsmAppliedIndex: n.meta.FSM.AppliedIndex(),
		LastLogIndex:        n.meta.Raft.LastIndex(),
		RaftAddr:            n.raftAddr,
		ApiAddr:             n.apiAddr,
		FeatureLevel:        n.cfg.featureLevel(),
		ClusterId:           n.mux.ClusterID(),
		ForwardedCalls:      n.engine.ForwardedCalls(),
		PolicyDecisions:     n.decisions.byPolicy(time.Now()),
		NodeGrants:          n.local.Status(),
	}
	plans := n.meta.FSM.Plans()
	for _, g := range n.engine.Hosted() {
		gs := &quoratev1.GroupState{
			Id:               uint32(g.ID),
			Role:             roleName(g.Raft.State()),
			LeaderId:         g.LeaderID(),
			Term:             g.Raft.CurrentTerm(),
			LastAppliedIndex: g.Raft.AppliedIndex(),
			CommitIndex:      g.Raft.CommitIndex(),
			Keys:             uint64(g.FSM.BucketCount() + g.FSM.SemaphoreCount()),
			DedupeEntries:    uint64(g.FSM.DedupeLen()),
		}
		if f := g.Raft.GetConfiguration(); f.Error() == nil {
			for _, sv := range f.Configuration().Servers {
				if sv.Suffrage == raft.Voter {
					gs.Voters = append(gs.Voters, string(sv.ID))
				} else {
					gs.Nonvoters = append(gs.Nonvoters, string(sv.ID))
				}
			}
		}
		if err, at := g.Health.Last(); err != nil {
			gs.StorageError, gs.StorageErrorAt = err.Error(), timestamppb.New(at)
		}
		if _, epoch, ranges, ok := g.FSM.Ownership(); ok {
			gs.MapEpoch = epoch
			for _, a := range ranges {
				gs.Slots += uint32(a.Range.Len())
			}
		}
		gs.Frozen = frozenStatus(g.FSM.Frozen(), plans)
		gs.HotKeys = withGrants(n.decisions.hotKeys(g.ID), g.FSM)
		out.Groups = append(out.Groups, gs)
		out.Buckets += gs.Keys
		out.DedupeEntries += gs.DedupeEntries
		out.DedupeBytes += uint64(max(0, g.FSM.DedupeBytes()))
	}
	out.Groups = append(out.Groups, n.groups.DamagedStates()...)
	return out
}

// frozenStatus lists a group's frozen slot ranges by migration, each with
// its plan's state as plans (the meta replica's) keep it.
func frozenStatus(frozen map[uint64]shard.SlotRange, plans []*raftcmdv1.Plan) []*quoratev1.FrozenSlots {
	var out []*quoratev1.FrozenSlots
	for m, r := range frozen {
		fs := &quoratev1.FrozenSlots{Start: uint32(r.Start), End: uint32(r.End), Migration: m, Plan: m >> 16, Step: uint32(m & 0xffff), PlanState: "unknown"}
		if i := slices.IndexFunc(plans, func(p *raftcmdv1.Plan) bool { return p.GetId() == fs.Plan }); i >= 0 {
			fs.PlanState = engine.PlanStateName(plans[i].GetState())
		}
		out = append(out, fs)
	}
	slices.SortFunc(out, func(a, b *quoratev1.FrozenSlots) int { return cmp.Compare(a.GetMigration(), b.GetMigration()) })
	return out
}

// shardMapStatus describes this node's meta replica's shard map (nil when
// it has none).
func (h *adminHandler) shardMapStatus() *quoratev1.ShardMapStatus {
	m, ok := h.n.meta.FSM.ShardMap()
	if !ok {
		return nil
	}
	out := &quoratev1.ShardMapStatus{Epoch: m.Epoch, Cordoned: m.Cordoned}
	slots := m.GroupSlots()
	for _, g := range m.Groups {
		out.Groups = append(out.Groups, &quoratev1.ShardGroupStatus{Id: uint32(g.ID), Replicas: g.Replicas, Slots: uint32(slots[g.ID]), Forming: g.Forming})
	}
	return out
}

func roleName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	default:
		return "shutdown"
	}
}

// ClusterStatus lists the members of this node's Raft configuration and asks
// each for its own state, concurrently, each within control.MemberStatusTimeout.
func (h *adminHandler) ClusterStatus(ctx context.Context, _ *connect.Request[quoratev1.ClusterStatusRequest]) (*connect.Response[quoratev1.ClusterStatusResponse], error) {
	n := h.n
	cf := n.meta.Raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, n.toConnectError(fmt.Errorf("%w: reading the raft configuration: %v", engine.ErrNotProposed, err))
	}
	addrs := make(map[string]string)
	for _, m := range n.meta.FSM.Nodes() {
		addrs[m.ID] = m.APIAddr
	}
	_, leaderID := n.meta.Raft.LeaderWithID()
	out := &quoratev1.ClusterStatusResponse{AnsweredBy: n.cfg.ID, LeaderId: string(leaderID), ShardMap: h.shardMapStatus(), ClusterId: n.controller.KnownClusterID()}
	var wg sync.WaitGroup
	for _, s := range cf.Configuration().Servers {
		m := &quoratev1.MemberStatus{
			Id:       string(s.ID),
			RaftAddr: string(s.Address),
			ApiAddr:  addrs[string(s.ID)],
			Suffrage: map[raft.ServerSuffrage]string{raft.Voter: "voter", raft.Nonvoter: "nonvoter", raft.Staging: "staging"}[s.Suffrage],
		}
		out.Members = append(out.Members, m)
		switch {
		case m.Id == n.cfg.ID:
			m.Status = h.nodeState()
		default:
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(ctx, control.MemberStatusTimeout)
				defer cancel()
				// Over the peer port, which members use between them.
				resp, err := n.peerPorts.At(m.RaftAddr).Admin.NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
				if err != nil {
					m.Error = err.Error()
					return
				}
				m.Status = resp.Msg.GetNode()
			})
		}
	}
	wg.Wait()
	slices.SortFunc(out.Members, func(a, b *quoratev1.MemberStatus) int { return cmp.Compare(a.Id, b.Id) })
	return connect.NewResponse(out), nil
}

// Join records a node's addresses and adds it as a voter; see the proto.
func (h *adminHandler) Join(ctx context.Context, req *connect.Request[quoratev1.JoinRequest]) (*connect.Response[quoratev1.JoinResponse], error) {
	n := h.n
	if err := checkJoinRequest(req.Msg); err != nil {
		return nil, n.toConnectError(err)
	}
	// Where the call came from, for the audit trail (a call forwarded over
	// the peer port keeps what its first node noted).
	ctx = engine.WithCallerAddr(ctx, req.Peer().Addr)
	return onMetaLeader(ctx, n, req, true,
		func(ctx context.Context) (*quoratev1.JoinResponse, error) {
			return &quoratev1.JoinResponse{ClusterId: n.controller.KnownClusterID()}, n.controller.JoinAsLeader(ctx, req.Msg)
		}, quoratev1connect.AdminServiceClient.Join)
}

func checkJoinRequest(r *quoratev1.JoinRequest) error {
	bad := func(field string, err error) error {
		return &admission.FieldError{Field: field, Reason: err.Error(), Err: admission.ErrInvalidRequest}
	}
	if err := (Config{ID: r.GetId()}).checkID(); err != nil {
		return bad("id", err)
	}
	if err := checkAdvertisable(r.GetRaftAddr()); err != nil {
		return bad("raft_addr", err)
	}
	if err := checkAdvertisable(r.GetApiAddr()); err != nil {
		return bad("api_addr", err)
	}
	return control.CheckJoinLevel(r.GetFeatureLevel())
}

// ApplyPolicies validates every policy, then stores them all through the log.
func (h *adminHandler) ApplyPolicies(ctx context.Context, req *connect.Request[quoratev1.ApplyPoliciesRequest]) (*connect.Response[quoratev1.ApplyPoliciesResponse], error) {
	n := h.n
	if k := len(req.Msg.GetPolicies()); k > fsm.MaxPolicies {
		return nil, n.toConnectError(engine.BadRequest("policies", "one apply carries at most %d policies (got %d)", fsm.MaxPolicies, k))
	}
	cmd := &raftcmdv1.PutPolicies{}
	names := make([]string, 0, len(req.Msg.GetPolicies()))
	for i, p := range req.Msg.GetPolicies() {
		if err := CheckExplicitZeros(p); err != nil {
			return nil, n.toConnectError(admission.Nested(fmt.Sprintf("policies[%d].", i), err))
		}
		ap := PolicyFromAPI(p)
		if err := ap.Validate(); err != nil {
			return nil, n.toConnectError(admission.Nested(fmt.Sprintf("policies[%d].", i), err))
		}
		cmd.Policies = append(cmd.Policies, fsm.PolicyToProto(ap))
		names = append(names, ap.Name)
	}
	return serve(ctx, n, req, engine.Request[quoratev1.ApplyPoliciesResponse]{Route: engine.Routing{Idempotent: true},
		Local: func(ctx context.Context, _ engine.Dest) (*quoratev1.ApplyPoliciesResponse, error) {
			// The leader's table is current but for entries still
			// committing; the meta group checks again when it applies.
			if have, added := n.meta.FSM.PolicyCount(names); added > 0 && have+added > fsm.MaxPolicies {
				return nil, fmt.Errorf("%w: the registry holds at most %d (it has %d; this apply adds %d)", fsm.ErrTooManyPolicies, fsm.MaxPolicies, have, added)
			}
			res, err := n.engine.Propose(ctx, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_PutPolicies{PutPolicies: cmd}, Actor: control.ActorOf(ctx, "")})
			if err != nil {
				return nil, err
			}
			return &quoratev1.ApplyPoliciesResponse{Policies: policiesToAPI(res.(*fsm.PoliciesResult).Policies)}, nil
		}},
		func(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[quoratev1.ApplyPoliciesRequest]) (*connect.Response[quoratev1.ApplyPoliciesResponse], error) {
			return p.Admin.ApplyPolicies(ctx, fwd)
		})
}

// DeletePolicies deletes policies through the log, all or none.
func (h *adminHandler) DeletePolicies(ctx context.Context, req *connect.Request[quoratev1.DeletePoliciesRequest]) (*connect.Response[quoratev1.DeletePoliciesResponse], error) {
	n := h.n
	names := req.Msg.GetNames()
	if len(names) == 0 {
		return nil, n.toConnectError(engine.BadRequest("names", "must name at least one policy"))
	}
	if len(names) > fsm.MaxPolicies {
		return nil, n.toConnectError(engine.BadRequest("names", "at most %d in one call (got %d)", fsm.MaxPolicies, len(names)))
	}
	for i, name := range names {
		if err := checkPolicyName(fmt.Sprintf("names[%d]", i), name); err != nil {
			return nil, n.toConnectError(err)
		}
	}
	// A repeat of a delete that applied answers NotFound.
	return serve(ctx, n, req, engine.Request[quoratev1.DeletePoliciesResponse]{Route: engine.Routing{},
		Local: func(ctx context.Context, _ engine.Dest) (*quoratev1.DeletePoliciesResponse, error) {
			res, err := n.engine.Propose(ctx, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_DeletePolicies{
				DeletePolicies: &raftcmdv1.DeletePolicies{Names: names}}, Actor: control.ActorOf(ctx, "")})
			if err != nil {
				return nil, err
			}
			return &quoratev1.DeletePoliciesResponse{Policies: policiesToAPI(res.(*fsm.PoliciesResult).Policies)}, nil
		}},
		func(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[quoratev1.DeletePoliciesRequest]) (*connect.Response[quoratev1.DeletePoliciesResponse], error) {
			return p.Admin.DeletePolicies(ctx, fwd)
		})
}

// GetPolicy answers from this node's replica, which may lag the leader.
func (h *adminHandler) GetPolicy(_ context.Context, req *connect.Request[quoratev1.GetPolicyRequest]) (*connect.Response[quoratev1.GetPolicyResponse], error) {
	pv, ok := h.n.meta.FSM.Policy(req.Msg.GetName())
	if !ok {
		return nil, h.n.toConnectError(fmt.Errorf("%w %s", fsm.ErrUnknownPolicy, admission.Quote(req.Msg.GetName())))
	}
	return connect.NewResponse(&quoratev1.GetPolicyResponse{Policy: PolicyToAPI(pv.Policy, pv.Version)}), nil
}

func policiesToAPI(pvs []fsm.PolicyVersion) []*quoratev1.Policy {
	out := make([]*quoratev1.Policy, 0, len(pvs))
	for _, pv := range pvs {
		out = append(out, PolicyToAPI(pv.Policy, pv.Version))
	}
	return out
}

// ListPolicies answers from this node's replica, which may lag the leader.
func (h *adminHandler) ListPolicies(context.Context, *connect.Request[quoratev1.ListPoliciesRequest]) (*connect.Response[quoratev1.ListPoliciesResponse], error) {
	return connect.NewResponse(&quoratev1.ListPoliciesResponse{Policies: policiesToAPI(h.n.meta.FSM.Policies())}), nil
}

// Policies answers the policies the caller may use (AdmissionService.
// Policies, a data call) from this node's replica, which may lag the
// leader: those its request names, or every one, that its access entry
// allows. authorize has refused a request naming one it may not use.
func (h *admissionHandler) Policies(ctx context.Context, req *connect.Request[quoratev1.PoliciesRequest]) (*connect.Response[quoratev1.PoliciesResponse], error) {
	id := engine.IdentityOf(ctx)
	var named map[string]bool
	if names := req.Msg.GetNames(); len(names) > 0 {
		named = make(map[string]bool, len(names))
		for _, name := range names {
			named[name] = true
		}
	}
	var out []fsm.PolicyVersion
	for _, pv := range h.n.meta.FSM.Policies() {
		if (named == nil || named[pv.Policy.Name]) && h.n.auth.authz.MayUse(id, pv.Policy.Name) {
			out = append(out, pv)
		}
	}
	return connect.NewResponse(&quoratev1.PoliciesResponse{Policies: policiesToAPI(out)}), nil
}

// CheckExplicitZeros refuses a policy that sets burst, max_cost,
// dedupe_retention, lease_ttl, local.max_grant, local.ttl or
// local.sync_interval to zero: zero is how the stored form says "the
// default", so an explicit zero would silently become the default (burst:
// limit, max_cost: burst, dedupe_retention: 10m, lease_ttl: 1m, ...).
// Leave such a field unset for its default.
func CheckExplicitZeros(p *quoratev1.Policy) error {
	zero := func(field, def string) error {
		return &admission.FieldError{Field: field, Err: admission.ErrInvalidPolicy,
			Reason: "must not be 0: leave it unset for the default (" + def + ")"}
	}
	switch {
	case p.Burst != nil && p.GetBurst() == 0:
		return zero("burst", "limit")
	case p.MaxCost != nil && p.GetMaxCost() == 0:
		return zero("max_cost", "burst")
	case p.DedupeRetention != nil && p.GetDedupeRetention().AsDuration() == 0:
		return zero("dedupe_retention", admission.DefaultDedupeRetention.String())
	case p.LeaseTtl != nil && p.GetLeaseTtl().AsDuration() == 0:
		return zero("lease_ttl", admission.DefaultLeaseTTL.String())
	case p.GetLocal() != nil && p.GetLocal().MaxGrant != nil && p.GetLocal().GetMaxGrant() == 0:
		return zero("local.max_grant", "a tenth of the burst")
	case p.GetLocal().GetTtl() != nil && p.GetLocal().GetTtl().AsDuration() == 0:
		return zero("local.ttl", admission.DefaultGrantTTL.String())
	case p.GetLocal().GetSyncInterval() != nil && p.GetLocal().GetSyncInterval().AsDuration() == 0:
		return zero("local.sync_interval", admission.DefaultSyncInterval.String())
	}
	return nil
}

// PolicyFromAPI converts a policy from the API's wire form. It does not
// validate.
func PolicyFromAPI(p *quoratev1.Policy) admission.Policy {
	return admission.Policy{
		Name:            p.GetName(),
		Algorithm:       admission.Algorithm(p.GetAlgorithm()),
		Limit:           p.GetLimit(),
		Period:          p.GetPeriod().AsDuration(),
		Burst:           p.GetBurst(),
		MaxCost:         p.GetMaxCost(),
		OnUnavailable:   admission.OnUnavailable(p.GetOnUnavailable()),
		DedupeRetention: p.GetDedupeRetention().AsDuration(),
		Calendar:        admission.Calendar(p.GetCalendar()),
		Shadow:          p.GetShadow(),
		LeaseTTL:        p.GetLeaseTtl().AsDuration(),
		Local: admission.Local{
			Mode:     admission.LocalMode(p.GetLocal().GetMode()),
			MaxGrant: p.GetLocal().GetMaxGrant(),
			TTL:      p.GetLocal().GetTtl().AsDuration(),
			// sync_interval: sync mode only.
			SyncInterval: p.GetLocal().GetSyncInterval().AsDuration(),
		},
	}
}

// PolicyToAPI converts a policy to the API's wire form, as given: fields
// left to their defaults stay unset (zero). version is output only (0 when
// sending a policy).
func PolicyToAPI(p admission.Policy, version uint64) *quoratev1.Policy {
	out := &quoratev1.Policy{
		Name:          p.Name,
		Algorithm:     string(p.Algorithm),
		Limit:         p.Limit,
		Period:        durationpb.New(p.Period),
		OnUnavailable: string(p.OnUnavailable),
		Version:       version,
		Calendar:      string(p.Calendar),
		Shadow:        p.Shadow,
	}
	if p.Burst != 0 {
		out.Burst = &p.Burst
	}
	if p.MaxCost != 0 {
		out.MaxCost = &p.MaxCost
	}
	if p.LeaseTTL != 0 {
		out.LeaseTtl = durationpb.New(p.LeaseTTL)
	}
	if p.DedupeRetention != 0 {
		out.DedupeRetention = durationpb.New(p.DedupeRetention)
	}
	if l := p.Local; l != (admission.Local{}) {
		out.Local = &quoratev1.LocalDecisions{Mode: string(l.Mode)}
		if l.MaxGrant != 0 {
			out.Local.MaxGrant = &l.MaxGrant
		}
		if l.TTL != 0 {
			out.Local.Ttl = durationpb.New(l.TTL)
		}
		if l.SyncInterval != 0 {
			out.Local.SyncInterval = durationpb.New(l.SyncInterval)
		}
	}
	return out
}

// Status is this node's own view of itself and its Raft group, as NodeStatus
// answers it.
func (n *Node) Status() *quoratev1.NodeState { return (&adminHandler{n: n}).nodeState() }
