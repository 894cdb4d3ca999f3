package control

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// What a join may change, decided by the meta leader before it records
// anything (checkJoin, under joinMu):
//
//   - The cluster's feature level never drops: a node joins at the lowest
//     level among the registered nodes (fsm.MinFeatureLevel) or above. A
//     node below it could not apply entries the cluster already writes.
//     One node may register below it: a member of the meta group that is
//     not registered yet, asking for itself (firstOwnRegistration) — the
//     node that bootstrapped the cluster, when others joined before it
//     registered. It applies the log already; its registration only makes
//     the level say so.
//   - A registered node's addresses are its own. A join naming it with
//     other addresses is refused while a node answers as it at its
//     registered addresses, unless that node itself says (in its status)
//     that it now is at the join's addresses; and, on a cluster with an
//     access file, unless the caller proves to be that node (provenNode).
//     An open cluster has no way to tell who calls, so there the first
//     rule alone decides: a live node keeps its addresses, whoever asks.
//   - A registered node's feature level is what its binary says: a join
//     that changes it is refused unless a node answers as it at the join's
//     addresses with the join's level (a node registers its level again
//     when it restarts, running). Otherwise anyone could raise an older
//     node's level, and the cluster would write entries that node cannot
//     apply.

// checkJoin returns why the leader refuses r, the join asked for by ctx's
// request (nil when it may go ahead): a feature level below the cluster's,
// another node's addresses, or a registered node's level that the node
// does not say it runs (see above).
func (c *Controller) checkJoin(ctx context.Context, r *quoratev1.JoinRequest) error {
	if lvl := c.meta.FSM.MinFeatureLevel(); r.GetFeatureLevel() < lvl && !c.firstOwnRegistration(ctx, r) {
		return &admission.FieldError{Field: "feature_level", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("%d is below %d, the cluster's feature level (the lowest of its registered nodes): "+
				"a node below it could not apply what the cluster writes; run a binary of level %d or above (and no lower --max-feature-level)",
				r.GetFeatureLevel(), lvl, lvl)}
	}
	m, ok := c.meta.FSM.Node(r.GetId())
	if !ok {
		return c.checkNewNodeAnswers(ctx, r)
	}
	if err := c.checkAddrChange(ctx, m, r); err != nil {
		return err
	}
	if m.FeatureLevel == r.GetFeatureLevel() {
		return nil
	}
	at := fsm.Node{ID: r.GetId(), RaftAddr: r.GetRaftAddr(), APIAddr: r.GetApiAddr()}
	if where, st, live := c.answerAsNode(ctx, at); !live || st.GetFeatureLevel() != r.GetFeatureLevel() {
		says := "does not answer as it there"
		if live {
			says = fmt.Sprintf("says at its %s that it runs level %d", where, st.GetFeatureLevel())
		}
		return fmt.Errorf("%w: feature_level: node %s is registered at level %d; a join changes that only to the level the node runs, and it %s",
			ErrNotTheNode, strconv.Quote(m.ID), m.FeatureLevel, says)
	}
	return nil
}

// checkNewNodeAnswers returns why a node not registered yet may not join
// at r's addresses: nothing answers as it on the peer port at raft_addr.
// The meta leader asks there, over the same authenticated peer connection
// raft would use, so a node at a wrong address, or one without the
// cluster's peer secret, is refused before it is made a voter it could
// never reach. A meta member registering itself for the first time
// (firstOwnRegistration) is in the configuration already. With TLS the
// node's certificate is what lets it join (nodeMayCall), and a peer port
// accepts only certificates of registered nodes, so there is nothing to
// ask before the registration.
func (c *Controller) checkNewNodeAnswers(ctx context.Context, r *quoratev1.JoinRequest) error {
	if c.cfg.TLS || c.firstOwnRegistration(ctx, r) {
		return nil
	}
	if _, ok := c.answersAs(ctx, c.peerPorts, r.GetRaftAddr(), r.GetId()); ok {
		return nil
	}
	return fmt.Errorf("%w: raft_addr: nothing answers as node %s on the peer port at %s within %v: "+
		"check the address, that the node is running, and that every node has the same --peer-secret-file",
		ErrNotTheNode, strconv.Quote(r.GetId()), r.GetRaftAddr(), liveCheckTimeout)
}

// checkAddrChange returns why r may not give node m, registered, other
// addresses (nil when it keeps them, or may change them).
func (c *Controller) checkAddrChange(ctx context.Context, m fsm.Node, r *quoratev1.JoinRequest) error {
	if m.RaftAddr == r.GetRaftAddr() && m.APIAddr == r.GetApiAddr() {
		return nil
	}
	fields := changedAddrFields(m, r)
	if c.cfg.Access {
		id := engine.IdentityOf(ctx)
		if node, ok := provenNode(id); !ok || node != m.ID {
			return fmt.Errorf("%w: %s: node %s is registered at raft %s, api %s; only %s itself may change them "+
				"(its node certificate, or a bearer token of caller %s), and this join is by %s",
				access.ErrPermissionDenied, fields, strconv.Quote(m.ID), m.RaftAddr, m.APIAddr, m.ID, nodeCaller(m.ID), describeIdentity(id))
		}
	}
	if where, st, live := c.answerAsNode(ctx, m); live && (st.GetRaftAddr() != r.GetRaftAddr() || st.GetApiAddr() != r.GetApiAddr()) {
		return fmt.Errorf("%w: %s: node %s answers at its registered %s (and says it is at raft %s, api %s): "+
			"a running node keeps its addresses; to move it, stop it and start it at the new ones",
			ErrNodeLive, fields, strconv.Quote(m.ID), where, st.GetRaftAddr(), st.GetApiAddr())
	}
	return nil
}

// firstOwnRegistration reports whether r is the first registration of a
// node that is already a member of the meta group at r's Raft address,
// asked for by that node itself.
func (c *Controller) firstOwnRegistration(ctx context.Context, r *quoratev1.JoinRequest) bool {
	if _, registered := c.meta.FSM.Node(r.GetId()); registered {
		return false
	}
	if node, ok := provenNode(engine.IdentityOf(ctx)); !ok || node != r.GetId() {
		return false
	}
	f := c.meta.Raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	return slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool {
		return string(s.ID) == r.GetId() && string(s.Address) == r.GetRaftAddr()
	})
}

// changedAddrFields names the fields of r whose addresses differ from m's.
func changedAddrFields(m fsm.Node, r *quoratev1.JoinRequest) string {
	var out []string
	if m.RaftAddr != r.GetRaftAddr() {
		out = append(out, "raft_addr")
	}
	if m.APIAddr != r.GetApiAddr() {
		out = append(out, "api_addr")
	}
	return strings.Join(out, ", ")
}

// answerAsNode asks for the status of node m at m's addresses (its peer
// port, then its API port), each within liveCheckTimeout, and returns
// where it answered as m and what it said; false when it answered as m at
// neither. This node answers for itself without a call.
func (c *Controller) answerAsNode(ctx context.Context, m fsm.Node) (string, *quoratev1.NodeState, bool) {
	if m.ID == c.cfg.ID {
		return "own API (it is the meta leader)", &quoratev1.NodeState{
			Id: c.self.ID, RaftAddr: c.self.RaftAddr, ApiAddr: c.self.APIAddr, FeatureLevel: c.self.FeatureLevel}, true
	}
	if st, ok := c.answersAs(ctx, c.peerPorts, m.RaftAddr, m.ID); ok {
		return "peer port " + m.RaftAddr, st, true
	}
	if st, ok := c.answersAs(ctx, c.apiPorts, m.APIAddr, m.ID); ok {
		return "API " + m.APIAddr, st, true
	}
	return "", nil, false
}

// answersAs asks addr through p for its node's state, within
// liveCheckTimeout, and reports whether it answered as node id.
func (c *Controller) answersAs(ctx context.Context, p *engine.Peers, addr, id string) (*quoratev1.NodeState, bool) {
	if addr == "" {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, liveCheckTimeout)
	defer cancel()
	resp, err := p.At(addr).Admin.NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
	if err != nil || resp.Msg.GetNode().GetId() != id {
		return nil, false
	}
	return resp.Msg.GetNode(), true
}

// nodeCaller is the caller name that proves node id: the URI a node's
// certificate carries, quorate://node/<id>, which a token file may also
// give a bearer token.
func nodeCaller(id string) string { return certs.NodeURIScheme + "://" + certs.NodeURIHost + "/" + id }

// provenNode is the node id proves to be: a certificate or bearer token
// whose caller is quorate://node/<id> (nodeCaller), or a node's own call
// (engine.SourceNode, made by the node itself or sent over the peer port,
// which only nodes reach).
func provenNode(id access.Identity) (string, bool) {
	switch id.Source {
	case engine.SourceNode:
		node, ok := strings.CutPrefix(id.Caller, engine.NodeCallerPrefix)
		return node, ok && node != ""
	case access.SourceCertificate, access.SourceToken:
		u, err := url.Parse(id.Caller)
		if err != nil {
			return "", false
		}
		node, err := certs.NodeIDOfURI(u)
		return node, err == nil
	}
	return "", false
}

// describeIdentity names id for an error message.
func describeIdentity(id access.Identity) string {
	if id.Caller == "" {
		return "an anonymous caller"
	}
	return fmt.Sprintf("caller %s (%s)", strconv.Quote(id.Caller), id.Source)
}
