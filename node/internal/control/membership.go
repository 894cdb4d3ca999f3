package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	"github.com/quorate/quorate/node/internal/replica"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// CheckJoinLevel checks the feature level a joining node says its binary
// applies: every binary sends one, and one above this binary's level
// cannot be checked against what this node knows. A newer node joins once
// the node it asks runs a binary as new.
func CheckJoinLevel(level uint32) error {
	switch {
	case level == 0:
		return &admission.FieldError{Field: "feature_level", Err: admission.ErrInvalidRequest,
			Reason: fmt.Sprintf("must be set, 1 to %d", fsm.FeatureLevel)}
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
func (c *Controller) register(ctx context.Context) {
	self := c.self
	ctx = engine.WithIdentity(ctx, engine.NodeIdentity(self.ID)) // its own join, whoever leads
	req := &quoratev1.JoinRequest{Id: self.ID, RaftAddr: self.RaftAddr, ApiAddr: self.APIAddr, FeatureLevel: self.FeatureLevel}
	b := engine.Doubling(20*time.Millisecond, time.Second)
	registered, lastRefusal := false, ""
	_, _ = engine.Retry(ctx, b, func() error {
		nodes := c.meta.FSM.Nodes()
		if !registered && slices.ContainsFunc(nodes, func(m fsm.Node) bool {
			return m.ID == self.ID && m.RaftAddr == self.RaftAddr && m.APIAddr == self.APIAddr
		}) {
			// Reachable and listed: a member. Its feature level may still
			// differ (it restarted with another --max-feature-level): keep
			// asking, more slowly, until it is recorded.
			registered = true
			close(c.registered)
			c.log.Debug("registered")
			b.InitialInterval, b.MaxInterval = time.Second, time.Minute
			b.Reset()
		}
		if slices.Contains(nodes, self) {
			return nil
		}
		err := c.joinOnce(ctx, req)
		switch {
		case err == nil || ctx.Err() != nil:
		case refusedJoin(err) && err.Error() != lastRefusal:
			// The cluster says no (feature level, addresses, rights):
			// retrying changes nothing until an operator does.
			lastRefusal = err.Error()
			c.log.Warn("the cluster refuses this node's join; retrying", "err", err)
		default:
			c.log.Debug("joining", "err", err)
		}
		return errNotRecorded
	})
}

// refusedJoin reports whether err is a join's refusal (rather than a
// failure to reach the leader).
func refusedJoin(err error) bool {
	var fe *admission.FieldError
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodePermissionDenied, connect.CodeUnauthenticated:
		return true
	}
	return errors.As(err, &fe) || errors.Is(err, ErrNodeLive) || errors.Is(err, access.ErrPermissionDenied)
}

// errNotRecorded tells the join loop's retry that this node is not yet
// recorded as it is.
var errNotRecorded = errors.New("not yet recorded as a member")

// joinOnce asks the leader (or, with no leader known, the --join address) to
// add and register this node. A node without state first learns the
// cluster's ID from the --join address; every join carries the ID this node
// recorded, and the node records the one the answer carries.
func (c *Controller) joinOnce(ctx context.Context, req *quoratev1.JoinRequest) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	if leaderAddr, _ := c.req.Leader(); leaderAddr == "" && c.cfg.Join != "" && !c.isLeader() {
		base := c.cfg.Join
		if c.mux.WaitingForClusterID() {
			if err := c.learnClusterID(ctx, base); err != nil {
				return fmt.Errorf("asking %s for the cluster ID: %w", base, err)
			}
		}
		req.ClusterId = c.mux.ClusterID()
		resp, err := c.apiPorts.Get(base).Admin.Join(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		return c.joined(resp.Msg, base)
	}
	req.ClusterId = c.mux.ClusterID()
	_, _, err := engine.Run(ctx, c.req, engine.Request[struct{}]{
		Route: engine.Routing{Idempotent: true},
		Local: func(ctx context.Context, _ engine.Dest) (*struct{}, error) { return nil, c.JoinAsLeader(ctx, req) },
		Forward: func(ctx context.Context, p *engine.PeerClient) (*struct{}, error) {
			// Over the peer port: the leader learns it is this node's own.
			fwd := connect.NewRequest(req)
			engine.SetForwardedIdentity(ctx, fwd.Header())
			resp, err := p.Admin.Join(ctx, fwd)
			if err != nil {
				return nil, err
			}
			return nil, c.joined(resp.Msg, "the meta leader")
		},
	})
	return err
}

// joined records the cluster ID a Join answer carries.
func (c *Controller) joined(resp *quoratev1.JoinResponse, from string) error {
	if id := resp.GetClusterId(); id != "" {
		if err := c.adoptClusterID(id, from); err != nil {
			c.log.Error("joined a cluster whose ID is not this node's", "err", err)
			return err
		}
	}
	return nil
}

// JoinAsLeader records the node's addresses (unless already recorded) and
// makes it a member at its Raft address (unless it already is one): a voter,
// or a non-voter once a cluster with data groups has MetaVoters voters. It
// first checks what the join may change (checkJoin) and records nothing
// when refused.
func (c *Controller) JoinAsLeader(ctx context.Context, r *quoratev1.JoinRequest) error {
	if err := c.checkJoinCluster(r); err != nil {
		return err
	}
	// One membership change at a time: the checks and the voter count read
	// below must include the change before, or concurrent joins all become
	// voters (or pass checks the one before would fail).
	c.joinMu.Lock()
	defer c.joinMu.Unlock()
	if err := c.checkJoin(ctx, r); err != nil {
		return err
	}
	want := fsm.Node{ID: r.GetId(), RaftAddr: r.GetRaftAddr(), APIAddr: r.GetApiAddr(), FeatureLevel: r.GetFeatureLevel()}
	if !slices.Contains(c.meta.FSM.Nodes(), want) {
		if _, err := c.req.Propose(ctx, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_RegisterNode{
			RegisterNode: &raftcmdv1.RegisterNode{Id: want.ID, RaftAddr: want.RaftAddr, ApiAddr: want.APIAddr, FeatureLevel: want.FeatureLevel},
		}, Actor: joinActor(ctx)}); err != nil {
			return err
		}
	}
	cf := c.meta.Raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return fmt.Errorf("%w: %v", engine.ErrNotProposed, err)
	}
	voters := 0
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == want.ID && string(s.Address) == want.RaftAddr {
			return nil
		}
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	timeout := c.cfg.RequestTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	// With data groups, the meta group needs only MetaVoters voters; later
	// nodes follow it as non-voters (every node keeps the shard map).
	add := c.meta.Raft.AddVoter
	if c.cfg.DataGroups > 0 && voters >= MetaVoters {
		add = c.meta.Raft.AddNonvoter
	}
	if err := replica.WaitFuture(ctx, add(raft.ServerID(want.ID), raft.ServerAddress(want.RaftAddr), 0, timeout)); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return engine.ErrNotLeader
		}
		return fmt.Errorf("%w: adding voter %s: %v", engine.ErrOutcomeUnknown, want.ID, err)
	}
	c.log.Info("added voter", "id", want.ID, "raft", want.RaftAddr, "api", want.APIAddr)
	return nil
}
