package node

import (
	"context"
	"math"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// MaxGrantDemand bounds GrantRequest.demand (units per second); holder is
// bounded by fsm.MaxHolderBytes.
const MaxGrantDemand = 1e12

// Grant serves budget leases (AdmissionService.Grant): a holder's grant of
// a policy's units on a key, sized and spent by the key's group through
// its log (fsm.GrantResult).
func (h *admissionHandler) Grant(ctx context.Context, req *connect.Request[quoratev1.GrantRequest]) (*connect.Response[quoratev1.GrantResponse], error) {
	cmd, err := grantCommand(req.Msg)
	if err != nil {
		return nil, h.n.toConnectError(err)
	}
	return serve(ctx, h.n, req, grantRequest(cmd), forwardGrant)
}

// heldGrant makes one Grant call for the grants the node holds itself
// (package local), as the Grant handler serves one, under the node's own
// identity.
func (n *Node) heldGrant(ctx context.Context, m *quoratev1.GrantRequest) (*quoratev1.GrantResponse, error) {
	cmd, err := grantCommand(m)
	if err != nil {
		return nil, n.toConnectError(err)
	}
	return run(engine.WithIdentity(ctx, engine.NodeIdentity(n.cfg.ID)), n, m, false, grantRequest(cmd), forwardGrant)
}

// grantRequest is a Grant of cmd for the engine. A repeat of a call is
// answered from the grant's record (same seq), so a Grant may be retried
// anywhere.
func grantRequest(cmd *raftcmdv1.Grant) engine.Request[quoratev1.GrantResponse] {
	return engine.Request[quoratev1.GrantResponse]{Route: engine.Routing{Data: true, Key: cmd.GetKey(), Idempotent: true},
		Command: &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Grant{Grant: cmd}},
		Answer:  engine.AnswerOf(grantResponse)}
}

// forwardGrant sends a Grant to its key's group leader p.
func forwardGrant(ctx context.Context, p *engine.PeerClient, fwd *connect.Request[quoratev1.GrantRequest]) (*connect.Response[quoratev1.GrantResponse], error) {
	return p.Admission.Grant(ctx, fwd)
}

// grantCommand checks a GrantRequest without state and builds its command.
func grantCommand(m *quoratev1.GrantRequest) (*raftcmdv1.Grant, error) {
	if err := checkPolicyName("policy", m.GetPolicy()); err != nil {
		return nil, err
	}
	if err := admission.CheckKeyCost(m.GetKey(), 1); err != nil {
		return nil, err
	}
	switch h := m.GetHolder(); {
	case h == "":
		return nil, engine.BadRequest("holder", "must not be empty")
	case len(h) > fsm.MaxHolderBytes:
		return nil, engine.BadRequest("holder", "must be at most %d bytes (got %d)", fsm.MaxHolderBytes, len(h))
	}
	if len(m.GetCaller()) > dedupe.MaxCallerBytes {
		return nil, engine.BadRequest("caller", "must be at most %d bytes (got %d)", dedupe.MaxCallerBytes, len(m.GetCaller()))
	}
	if !m.GetRelease() && m.GetWant() < 1 {
		return nil, engine.BadRequest("want", "must be at least 1 (got %d)", m.GetWant())
	}
	if m.GetUsed() < 0 {
		return nil, engine.BadRequest("used", "must be at least 0 (got %d)", m.GetUsed())
	}
	d := m.GetDemand()
	if math.IsNaN(d) || d < 0 || d > MaxGrantDemand {
		return nil, engine.BadRequest("demand", "must be a number of units per second from 0 to %g (got %v)", MaxGrantDemand, d)
	}
	return &raftcmdv1.Grant{
		Policy: m.GetPolicy(), Key: m.GetKey(), Holder: m.GetHolder(), Caller: m.GetCaller(),
		Seq: m.GetSeq(), Want: max(m.GetWant(), 0), Used: m.GetUsed(),
		DemandMilli: int64(math.Round(d * 1000)), Release: m.GetRelease(),
	}, nil
}

// grantResponse is the API's form of a Grant's result.
func grantResponse(r *fsm.GrantResult) *quoratev1.GrantResponse {
	out := &quoratev1.GrantResponse{
		Total: r.Total, Added: r.Added, Limit: r.Decision.Limit, Remaining: r.Decision.Remaining,
		DecidedAt: unixTime(r.DecidedAt), PolicyVersion: r.PolicyVersion, Returned: r.Returned,
		Share: float64(r.ShareMicro) / 1e6, Duplicate: r.Duplicate, CountedDemand: float64(r.DemandMilli) / 1000,
	}
	if r.StartedAt != 0 {
		out.StartedAt = unixTime(r.StartedAt)
		out.ExpiresAt = unixTime(r.ExpiresAt)
	}
	if r.Decision.RetryAfter > 0 {
		out.RetryAfter = durationpb.New(r.Decision.RetryAfter)
	}
	if r.Decision.ResetAfter > 0 {
		out.ResetAfter = durationpb.New(r.Decision.ResetAfter)
	}
	out.Window, out.Quota = windowOf(r.Window), r.Quota
	return out
}

// withGrants adds to each hot key the budget leases its group's replica f
// holds on it (fsm.GrantedKey: live holders, and the units granted and not
// reported spent, a local-plus-global holder's allowance whole), then up to
// grantKeysShown more keys that hold grants, the most units first, with no
// decisions counted. Grants are the group's replicated state, so any
// replica shows them — a new leader after a failover, whose hot keys (what
// it counted while leading) are new, as well.
func withGrants(hot []*quoratev1.HotKey, f *fsm.FSM) []*quoratev1.HotKey {
	type id struct{ policy, key string }
	shown := make(map[id]bool, len(hot))
	for _, h := range hot {
		shown[id{h.GetPolicy(), h.GetKey()}] = true
		if gk, ok := f.GrantedKeyOf(h.GetPolicy(), h.GetKey()); ok {
			h.GrantHolders, h.GrantedUnspent = gk.Holders, gk.Unspent
		}
	}
	extra := 0
	for _, gk := range f.GrantedKeys(len(hot) + grantKeysShown) {
		if extra == grantKeysShown {
			break
		}
		if !shown[id{gk.Policy, gk.Key}] {
			hot = append(hot, &quoratev1.HotKey{Policy: gk.Policy, Key: gk.Key, GrantHolders: gk.Holders, GrantedUnspent: gk.Unspent})
			extra++
		}
	}
	return hot
}

// grantKeysShown is how many keys that hold grants but are not among its
// hot keys a group's status lists.
const grantKeysShown = 10

// policy is the named policy as this node's meta replica has it.
func (n *Node) policy(name string) (admission.Policy, bool) {
	pv, ok := n.meta.FSM.Policy(name)
	return pv.Policy, ok
}

// policyAPI is policy in the API's form.
func (n *Node) policyAPI(name string) (*quoratev1.Policy, bool) {
	pv, ok := n.meta.FSM.Policy(name)
	if !ok {
		return nil, false
	}
	return PolicyToAPI(pv.Policy, pv.Version), true
}
