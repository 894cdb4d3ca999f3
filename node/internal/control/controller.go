package control

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

// Controller is a node's control plane: the loops that keep this node's
// replicas, the groups' Raft configurations, the registry and the cluster
// ID in line with the meta group's state (the group loop in groups.go and
// replicas.go, the plan loop in plans.go, registration in membership.go,
// the cluster-ID loop in clusterid.go, expiry in expire.go, the damaged
// replicas' backoff in package replica's damaged.go), and the admin
// operations that change that state on the meta leader (drains, replica
// moves, rebalancing, plans, joins and removals). It acts only where this
// node leads the group concerned, from that group's replicated state; what
// it keeps in memory is pacing, which a restart or a new leader may begin
// afresh.
//
// It reaches the rest of the node only through the dependencies named in
// Deps: the meta replica, the hosted data replicas, opening a replica, the
// request path, and the clients of other nodes' ports.
type Controller struct {
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
	req RequestPath
	// apiPorts and peerPorts are clients of other nodes' API ports and of
	// their peer ports' forwarding channel (status calls).
	apiPorts, peerPorts *engine.Peers
	// mux is the peer port, whose cluster-ID gate the controller sets.
	mux *peermux.Mux

	registered chan struct{} // closed once this node's addresses are in the registry
	joinMu     sync.Mutex    // one meta membership change at a time (JoinAsLeader, RemoveNode)
	clusterMu  sync.Mutex    // recording the cluster ID (adoptClusterID)

	// pace is the pacing of each data replica hosted here, by group; only
	// the group loop's goroutine touches it.
	pace map[shard.GroupID]*pacing
}

// Config is what the control plane needs of the node's configuration.
type Config struct {
	// ID, RaftAddr, APIAddr and FeatureLevel are what this node registers:
	// its ID, its advertised addresses and the feature level it applies.
	ID, RaftAddr, APIAddr string
	FeatureLevel          uint32
	// DataDir is the node's data directory (its cluster-id file).
	DataDir string
	// Join is the --join address as the API's base URL; "" without.
	Join string
	// DataGroups is how many data groups the first shard map has, once
	// ExpectNodes nodes registered; 0 for a single-group cluster.
	DataGroups, ExpectNodes int
	// RequestTimeout bounds each of the control plane's proposals and calls.
	RequestTimeout time.Duration
	// MigrationProgressInterval is how often a slot move's copy records its
	// progress in the plan.
	MigrationProgressInterval time.Duration
	// TLS says both ports are TLS (node certificates); Access that the API
	// authenticates callers (an access file).
	TLS, Access bool
}

// Deps are the parts of the node the control plane reaches.
type Deps struct {
	Log *slog.Logger
	// Meta is the meta replica.
	Meta *replica.Replica
	// Replicas are the hosted data replicas.
	Replicas *replica.Set
	// Shared is the node's shared Raft log.
	Shared *replica.SharedLogs
	// Open opens (or creates) a replica's stores and starts its raft
	// (replica.Host.Open).
	Open func(id shard.GroupID, boot []raft.Server) (*replica.Replica, error)
	// Req is the request path (*engine.Engine).
	Req RequestPath
	// APIPorts and PeerPorts are clients of other nodes' API ports and of
	// their peer ports' forwarding channel.
	APIPorts, PeerPorts *engine.Peers
	// Mux is the peer port, whose cluster-ID gate the controller sets.
	Mux *peermux.Mux
}

// DataReplicas is how many replicas each data group has (fewer when the
// cluster has fewer nodes).
const DataReplicas = 3

// MetaVoters is how many nodes vote in the meta group of a cluster with data
// groups; later nodes join it as non-voters and still get every change.
const MetaVoters = 3

// pacing is what the group loop remembers of a data replica between ticks.
type pacing struct {
	g *replica.Replica // the replica the times are of: a reopened one starts afresh
	// leadingSince is when the group loop first saw the replica lead (zero
	// while it does not), lastTransfer when it last handed leadership
	// over, unplacedSince when the shard map stopped placing it here (zero
	// while it does).
	leadingSince, lastTransfer, unplacedSince time.Time
}

// RequestPath is what the control plane asks of the node's request path.
// *engine.Engine is one.
type RequestPath interface {
	// Propose and ProposeTo append an entry to a group led here (Propose:
	// the meta group; ProposeTo: the group of d).
	Propose(ctx context.Context, env *raftcmdv1.Envelope) (any, error)
	ProposeTo(ctx context.Context, d engine.Dest, env *raftcmdv1.Envelope) (any, error)
	// Decide runs requests on their group's leader (engine.Run is how the
	// control plane calls it).
	engine.Decider
	// Leader is the meta leader's API address and ID, as known here.
	Leader() (apiAddr, id string)
	// SyncPolicies copies the meta group's policy table into a data group
	// led here.
	SyncPolicies(ctx context.Context, g *replica.Replica) error
	// ApplyToGroup proposes a slot-migration entry to a group's leader,
	// wherever it is; ExportPage reads a page of a migration's state from
	// one of the source group's replicas.
	ApplyToGroup(ctx context.Context, id shard.GroupID, env *raftcmdv1.Envelope) error
	ExportPage(ctx context.Context, from shard.GroupID, migration uint64, r shard.SlotRange, cursor []byte) (fsm.ExportPage, error)
	// Now is the time a leader stamps.
	Now() time.Time
}

var _ RequestPath = (*engine.Engine)(nil)

// New returns the control plane of the node cfg and d describe, not yet
// running.
func New(cfg Config, d Deps) *Controller {
	return &Controller{
		cfg:        cfg,
		log:        d.Log,
		self:       fsm.Node{ID: cfg.ID, RaftAddr: cfg.RaftAddr, APIAddr: cfg.APIAddr, FeatureLevel: cfg.FeatureLevel},
		meta:       d.Meta,
		replicas:   d.Replicas,
		shared:     d.Shared,
		open:       d.Open,
		req:        d.Req,
		apiPorts:   d.APIPorts,
		peerPorts:  d.PeerPorts,
		mux:        d.Mux,
		registered: make(chan struct{}),
		pace:       make(map[shard.GroupID]*pacing),
	}
}

// Registered is closed once this node's addresses are in its own replica of
// the registry: it is a member that others can forward to.
func (c *Controller) Registered() <-chan struct{} { return c.registered }

// Run runs the control plane's loops until ctx is done and they returned:
// registration, expiry, the group loop, the plan loop and the cluster-ID
// loop, each on a goroutine of its own.
func (c *Controller) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){c.register, c.expireLoop, c.groupLoop, c.planLoop, c.clusterIDLoop} {
		wg.Go(func() { loop(ctx) })
	}
	wg.Wait()
}

// hosted returns every replica on this node, the meta group's first, then
// the data groups' by ID.
func (c *Controller) hosted() []*replica.Replica {
	return append([]*replica.Replica{c.meta}, c.replicas.Sorted()...)
}

// paceOf is the pacing of data replica g. Group loop only.
func (c *Controller) paceOf(g *replica.Replica) *pacing {
	p := c.pace[g.ID]
	if p == nil || p.g != g {
		p = &pacing{g: g}
		c.pace[g.ID] = p
	}
	return p
}

// forgetPacing drops the pacing of replicas no longer hosted. Group loop
// only.
func (c *Controller) forgetPacing() {
	for id, p := range c.pace {
		if c.replicas.Get(id) != p.g {
			delete(c.pace, id)
		}
	}
}

// isLeader reports whether this node leads the meta group.
func (c *Controller) isLeader() bool { return c.meta.IsLeader() }

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
