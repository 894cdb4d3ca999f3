package node

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	"github.com/quorate/quorate/node/internal/replica"
	"github.com/quorate/quorate/peermux"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// controller is a node's control plane: the loops that keep this node's
// replicas, the groups' Raft configurations, the registry and the cluster
// ID in line with the meta group's state (the group loop in groups.go and
// replicas.go, the plan loop in plans.go, registration in membership.go,
// the cluster-ID loop in clusterid.go, expiry in expire.go, the damaged
// replicas' backoff in damaged.go), and the admin operations that change
// that state on the meta leader (drains, replica moves, rebalancing,
// plans, joins and removals). It acts only where this node leads the group
// concerned, from that group's replicated state; what it keeps in memory
// is pacing, which a restart or a new leader may begin afresh.
//
// It reaches the rest of the node only through the dependencies named in
// its fields: the meta replica, the hosted data replicas, opening a
// replica, the request path, and the clients of other nodes' ports.
type controller struct {
	cfg  Config
	log  *slog.Logger
	self fsm.Node // what this node registers: ID, addresses, feature level
	// meta is the meta replica: its FSM is read, and its Raft
	// configuration changed while it leads.
	meta *replica.Replica
	// replicas are the hosted data replicas, opened and closed here.
	replicas *replica.Set
	// shared is the node's shared Raft log: a removed replica's entries in
	// it are dropped.
	shared *replica.SharedLogs
	// open opens (or creates) a replica's stores and starts its raft.
	open func(id shard.GroupID, boot []raft.Server) (*replica.Replica, error)
	// req is the request path: entries are proposed, and calls made on a
	// group's leader, through it.
	req requestPath
	// peers and fwd are clients of other nodes' API ports and of their
	// peer ports' forwarding channel (status calls).
	apiPorts, peerPorts *engine.Peers
	// mux is the peer port, whose cluster-ID gate the controller sets.
	mux *peermux.Mux

	registered chan struct{} // closed once this node's addresses are in the registry
	joinMu     sync.Mutex    // one meta membership change at a time (joinAsLeader, removeNode)
	clusterMu  sync.Mutex    // recording the cluster ID (adoptClusterID)

	// pace is the pacing of each data replica hosted here, by group; only
	// the group loop's goroutine touches it.
	pace map[shard.GroupID]*pacing
}

// pacing is what the group loop remembers of a data replica between ticks.
type pacing struct {
	g *replica.Replica // the replica the times are of: a reopened one starts afresh
	// leadingSince is when the group loop first saw the replica lead (zero
	// while it does not), lastTransfer when it last handed leadership
	// over, unplacedSince when the shard map stopped placing it here (zero
	// while it does).
	leadingSince, lastTransfer, unplacedSince time.Time
}

// requestPath is what the control plane asks of the node's request path.
// *Node is one.
type requestPath interface {
	// propose and proposeTo append an entry to a group led here (propose:
	// the meta group; proposeTo: the group of d).
	Propose(ctx context.Context, env *raftcmdv1.Envelope) (any, error)
	ProposeTo(ctx context.Context, d engine.Dest, env *raftcmdv1.Envelope) (any, error)
	// onLeader runs local on the meta group's leader (this node) or remote
	// on the node that leads it, with the request path's retries.
	OnLeader(ctx context.Context, r engine.Routing, local func(context.Context, engine.Dest) error, remote func(context.Context, *engine.PeerClient) error) error
	// leader is the meta leader's API address and ID, as known here.
	Leader() (apiAddr, id string)
	// syncPolicies copies the meta group's policy table into a data group
	// led here.
	SyncPolicies(ctx context.Context, g *replica.Replica) error
	// applyToGroup proposes a slot-migration entry to a group's leader,
	// wherever it is; exportPage reads a page of a migration's state from
	// one of the source group's replicas.
	ApplyToGroup(ctx context.Context, id shard.GroupID, env *raftcmdv1.Envelope) error
	ExportPage(ctx context.Context, from shard.GroupID, migration uint64, r shard.SlotRange, cursor []byte) (fsm.ExportPage, error)
	// now is the time a leader stamps.
	Now() time.Time
}

var _ requestPath = (*engine.Engine)(nil)

// newController returns n's control plane, not yet running.
func newController(n *Node) *controller {
	self := fsm.Node{ID: n.cfg.ID, RaftAddr: n.raftAddr, APIAddr: n.apiAddr, FeatureLevel: n.cfg.featureLevel()}
	return &controller{
		cfg:        n.cfg,
		log:        n.log,
		self:       self,
		meta:       n.meta,
		replicas:   n.groups,
		shared:     n.shared,
		open:       n.host.Open,
		req:        n.engine,
		apiPorts:   n.apiPorts,
		peerPorts:  n.peerPorts,
		mux:        n.mux,
		registered: make(chan struct{}),
		pace:       make(map[shard.GroupID]*pacing),
	}
}

// run runs the control plane's loops until ctx is done and they returned:
// registration, expiry, the group loop, the plan loop and the cluster-ID
// loop, each on a goroutine of its own.
func (c *controller) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){c.register, c.expireLoop, c.groupLoop, c.planLoop, c.clusterIDLoop} {
		wg.Go(func() { loop(ctx) })
	}
	wg.Wait()
}

// hosted returns every replica on this node, the meta group's first, then
// the data groups' by ID.
func (c *controller) hosted() []*replica.Replica {
	return append([]*replica.Replica{c.meta}, c.replicas.Sorted()...)
}

// paceOf is the pacing of data replica g. Group loop only.
func (c *controller) paceOf(g *replica.Replica) *pacing {
	p := c.pace[g.ID]
	if p == nil || p.g != g {
		p = &pacing{g: g}
		c.pace[g.ID] = p
	}
	return p
}

// forgetPacing drops the pacing of replicas no longer hosted. Group loop
// only.
func (c *controller) forgetPacing() {
	for id, p := range c.pace {
		if c.replicas.Get(id) != p.g {
			delete(c.pace, id)
		}
	}
}

// isLeader reports whether this node leads the meta group.
func (c *controller) isLeader() bool { return c.meta.IsLeader() }

// every runs f every d until ctx is done.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}
