package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// checkJoinLevel checks the feature level a joining node says its binary
// applies. A join without one comes from a binary older than feature levels
// (it would lower the cluster's level to 0: no more removals or slot
// moves); one above this binary's level cannot be checked against what this
// node knows. Both are refused: a newer node joins once the node it asks
// runs a binary as new.
func checkJoinLevel(level uint32) error {
	switch {
	case level == 0:
		return &admission.FieldError{Field: "feature_level", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("must be set, 1 to %d: the joining binary is too old for this cluster", fsm.FeatureLevel)}
	case level > fsm.FeatureLevel:
		return &admission.FieldError{Field: "feature_level", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("%d is above %d, the highest this node's binary knows: upgrade the cluster's nodes first", level, fsm.FeatureLevel)}
	}
	return nil
}

// register makes sure this node is a voter of the cluster and that its
// addresses are in the replicated registry, so other nodes can forward to it
// and list it. It retries until that is so or ctx is done: a node without
// state asks Config.Join; a node with state asks the leader it knows.
func (n *Node) register(ctx context.Context) {
	self := fsm.Node{ID: n.cfg.ID, RaftAddr: n.raftAddr, APIAddr: n.apiAddr, FeatureLevel: fsm.FeatureLevel}
	if n.cfg.featureLevel != nil {
		self.FeatureLevel = *n.cfg.featureLevel
	}
	req := &quoratev1.JoinRequest{Id: self.ID, RaftAddr: self.RaftAddr, ApiAddr: self.APIAddr, FeatureLevel: self.FeatureLevel}
	b := doubling(20*time.Millisecond, time.Second)
	registered := false
	_, _ = retry(ctx, b, func() error {
		nodes := n.meta.fsm.Nodes()
		if !registered && slices.ContainsFunc(nodes, func(m fsm.Node) bool {
			return m.ID == self.ID && m.RaftAddr == self.RaftAddr && m.APIAddr == self.APIAddr
		}) {
			// Reachable and listed: a member. Its feature level may still
			// lag (a leader running an older binary records none): keep
			// asking, more slowly, until it is recorded.
			registered = true
			close(n.registered)
			n.log.Debug("registered")
			b.InitialInterval, b.MaxInterval = time.Second, time.Minute
			b.Reset()
		}
		if slices.Contains(nodes, self) {
			return nil
		}
		err := n.joinOnce(ctx, req)
		if err != nil && ctx.Err() == nil {
			n.log.Debug("joining", "err", err)
		}
		return errNotRecorded
	})
}

// errNotRecorded tells the join loop's retry that this node is not yet
// recorded as it is.
var errNotRecorded = errors.New("not yet recorded as a member")

// joinOnce asks the leader (or, with no leader known, the --join address) to
// add and register this node. A node without state first learns the
// cluster's ID from the --join address; every join carries the ID this node
// recorded, and the node records the one the answer carries.
func (n *Node) joinOnce(ctx context.Context, req *quoratev1.JoinRequest) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	if leaderAddr, _ := n.leader(); leaderAddr == "" && n.cfg.Join != "" && !n.isLeader() {
		base, _ := joinURL(n.cfg.Join)
		if n.mux.WaitingForClusterID() {
			if err := n.learnClusterID(ctx, base); err != nil {
				return fmt.Errorf("asking %s for the cluster ID: %w", base, err)
			}
		}
		req.ClusterId = n.mux.ClusterID()
		resp, err := n.peers.get(base).admin.Join(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		return n.joined(resp.Msg, base)
	}
	req.ClusterId = n.mux.ClusterID()
	return n.onLeader(ctx, routing{idempotent: true},
		func(ctx context.Context, _ dest) error { return n.joinAsLeader(ctx, req) },
		func(ctx context.Context, p *peerClient) error {
			resp, err := p.admin.Join(ctx, connect.NewRequest(req))
			if err != nil {
				return err
			}
			return n.joined(resp.Msg, "the meta leader")
		})
}

// joined records the cluster ID a Join answer carries.
func (n *Node) joined(resp *quoratev1.JoinResponse, from string) error {
	if id := resp.GetClusterId(); id != "" {
		if err := n.adoptClusterID(id, from); err != nil {
			n.log.Error("joined a cluster whose ID is not this node's", "err", err)
			return err
		}
	}
	return nil
}

// Registered is closed once this node's addresses are in its own replica of
// the registry: it is a member that others can forward to.
func (n *Node) Registered() <-chan struct{} { return n.registered }
