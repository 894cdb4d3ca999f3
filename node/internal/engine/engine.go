package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/groupcommit"
	"github.com/quorate/quorate/node/internal/replica"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// The request engine: every request that runs on a group's leader — a data
// command, a batch of Admits, an admin call on the meta leader — is a batch
// of items that decide routes, proposes or forwards, and retries, with one
// set of rules. A unary call is a batch of one.

// Config is what the engine takes of the node's configuration.
type Config struct {
	ID             string        // the node's
	DataGroups     int           // how many data groups the cluster expects (0: one group)
	RequestTimeout time.Duration // the longest a request runs here
	// MigrationChunkBytes is the size of a slot move's chunk.
	MigrationChunkBytes int
	// Observer is told of each command proposed as leader; may be nil.
	Observer Observer
}

// Metrics are the request path's series the engine feeds.
type Metrics interface {
	// Entry counts an entry of cmds commands appended to group id's log.
	Entry(id shard.GroupID, cmds int)
	// Applied observes an entry's propose-to-apply time.
	Applied(id shard.GroupID, start time.Time)
}

// Decisions are told of each command decided as leader (hot keys, rates).
type Decisions interface {
	Record(id shard.GroupID, res any)
}

// Engine is a node's request engine (package doc). New makes it before the
// meta replica opens, whose group commit it is; SetMeta gives it the
// replica once open.
type Engine struct {
	cfg       Config
	meta      *replica.Replica
	groups    *replica.Set
	peerPorts *Peers
	metrics   Metrics
	decisions Decisions
	clock     func() time.Time
	// forwardedCalls counts the data calls (each item of a batch) this node
	// forwarded to another node for want of leading the key's group, each
	// attempt once (NodeState.forwarded_calls).
	forwardedCalls atomic.Uint64
}

// New returns the engine of a node whose data replicas are groups, that
// forwards over peerPorts and stamps entries with clock's time.
func New(cfg Config, groups *replica.Set, peerPorts *Peers, m Metrics, d Decisions, clock func() time.Time) *Engine {
	return &Engine{cfg: cfg, groups: groups, peerPorts: peerPorts, metrics: m, decisions: d, clock: clock}
}

// SetMeta gives the engine the node's meta replica, once open.
func (n *Engine) SetMeta(g *replica.Replica) { n.meta = g }

// Meta is the node's meta replica.
func (n *Engine) Meta() *replica.Replica { return n.meta }

// ForwardedCalls counts the data calls forwarded to another node.
func (n *Engine) ForwardedCalls() uint64 { return n.forwardedCalls.Load() }

// Now is the time a leader stamps.
func (n *Engine) Now() time.Time { return n.clock() }

// Log is replica g's log as its group commit sees it (groupcommit_glue.go).
func (n *Engine) Log(g *replica.Replica) groupcommit.Log { return groupLog{n, g} }

// Routing says how decide may treat a request.
type Routing struct {
	// Data: the request works on key's state and goes to the key's Data
	// group; otherwise it goes to the meta group.
	Data bool
	Key  string

	// Forwarded: the request came from another node; never forward it again.
	Forwarded bool
	// Idempotent: the request carries a request ID, so a retry after an
	// unknown outcome gets the first answer and spends nothing.
	Idempotent bool
}

// Item is one request on its way to a decision: routed by Route to a
// group, decided there when this node leads it (Here), else forwarded to
// its leader (Away). Run makes the item of a unary request; AdmitBatch's
// handler makes one per Admit and decides them together (Decide).
type Item struct {
	Route Routing
	Here  Here
	Away  Away

	Err     error // the last attempt's
	unknown error // the last attempt whose outcome is unknown, if any
}

// Here is the leader's part of an item: Env is proposed, sharing entries
// with the other items of its group, and its FSM result lands in Res. A
// request that is not one command (an acquire that waits, an admin call)
// has Local instead, run with the group's destination.
type Here struct {
	Env   *raftcmdv1.Envelope
	Local func(ctx context.Context, d Dest) error
	Res   any
}

// Away is the forwarding part of an item: an Admit (Admit set) rides the
// leader's queue of forwarded Admits and its answer lands in Resp; any
// other request is sent by Forward, whose error classifyRemote sorts.
type Away struct {
	Admit   *quoratev1.AdmitRequest
	Forward func(ctx context.Context, p *PeerClient) error
	Resp    *quoratev1.AdmitResponse

	// Via is this node's replica of the group the item was forwarded for
	// (nil when it hosts none) and ViaLeader the leader it was sent to, by
	// the last attempt ("" when that attempt did not forward it).
	Via       *replica.Replica
	ViaLeader string
}

// errPending tells decide's retry that some items are to be tried again.
var errPending = errors.New("items pending")

// Decide runs items to a decision: each ends with Err nil (Here.Res or
// Away.Resp set, or Local's work done) or its final error. An item certainly not
// applied (ErrNotProposed: no leader, leadership moved, a route refusal) is
// routed again until ctx ends, 5 ms doubling to 100 ms between attempts;
// one whose outcome is unknown only when it is idempotent. Once an
// attempt's outcome was unknown, a later "not proposed" does not replace it
// in the answer. A forwarded item that reaches a node not leading its group
// is answered ErrNotLeader, never forwarded again.
func (n *Engine) Decide(ctx context.Context, items []*Item) {
	pending := items
	attempt := -1
	_, stopped := Retry(ctx, Doubling(5*time.Millisecond, 100*time.Millisecond), func() error {
		attempt++
		n.Attempt(ctx, pending, attempt)
		again := pending[:0:0]
		for _, it := range pending {
			if it.Err == nil {
				continue
			}
			unknown := errors.Is(it.Err, ErrOutcomeUnknown)
			if unknown {
				it.unknown = it.Err
			}
			if it.Route.Forwarded && errors.Is(it.Err, ErrNotLeader) {
				// Never forwarded again: the forwarding node routes it anew.
				if it.unknown != nil {
					it.Err = it.unknown // an earlier attempt here may have applied
				}
				continue
			}
			if errors.Is(it.Err, ErrNotProposed) || (unknown && it.Route.Idempotent) {
				again = append(again, it)
			}
		}
		if pending = again; len(pending) == 0 {
			return nil
		}
		return errPending
	})
	if stopped != nil {
		for _, it := range pending {
			if it.unknown != nil {
				it.Err = it.unknown
			}
			it.Err = fmt.Errorf("%w (%v)", it.Err, stopped)
		}
	}
}

// Attempt routes each item once: those of groups led here are decided
// here, group by group; the others are forwarded, leader by leader. Legs
// run concurrently; a single leg (a unary call) runs on the caller's
// goroutine.
func (n *Engine) Attempt(ctx context.Context, items []*Item, attempt int) {
	type leg struct {
		d     Dest
		items []*Item
	}
	local := map[*replica.Replica]*leg{}
	remote := map[string][]*Item{}
	for _, it := range items {
		it.Here.Res, it.Away.Resp, it.Err = nil, nil, nil
		it.Away.Via, it.Away.ViaLeader = nil, ""
		d, err := n.DestFor(it.Route)
		switch {
		case err != nil:
			it.Err = err
		case d.Replica != nil && d.Replica.IsLeader():
			if local[d.Replica] == nil {
				local[d.Replica] = &leg{d: d}
			}
			local[d.Replica].items = append(local[d.Replica].items, it)
		case it.Route.Forwarded:
			it.Err = ErrNotLeader
		default:
			if addr, leaderID := n.ForwardAddr(d, attempt); addr == "" {
				it.Err = fmt.Errorf("%w: no leader of group %d known (leader id %q)", ErrNotProposed, d.ID, leaderID)
			} else {
				it.Away.Via, it.Away.ViaLeader = d.Replica, leaderID
				remote[addr] = append(remote[addr], it)
				if it.Route.Data {
					n.forwardedCalls.Add(1)
				}
			}
		}
	}
	var legs []func()
	for _, l := range local {
		legs = append(legs, func() { n.decideHere(ctx, l.d, l.items) })
	}
	for addr, its := range remote {
		legs = append(legs, func() { n.forwardTo(ctx, n.peerPorts.At(addr), its) })
	}
	if len(legs) == 1 {
		legs[0]()
		return
	}
	var wg sync.WaitGroup
	for _, f := range legs {
		wg.Go(f)
	}
	wg.Wait()
}

// decideHere decides items on d's group, which this node leads: their
// commands all at once (proposeAll), then each local function in turn. A
// route refusal means nothing was applied: the item is routed again.
func (n *Engine) decideHere(ctx context.Context, d Dest, items []*Item) {
	var ps []*proposal
	for _, it := range items {
		if it.Here.Env != nil {
			ps = append(ps, &proposal{env: it.Here.Env})
		}
	}
	n.proposeAll(ctx, d, ps)
	for _, it := range items {
		if it.Here.Env != nil {
			p := ps[0]
			ps = ps[1:]
			it.Here.Res, it.Err = p.res, p.err
			n.decisions.Record(d.ID, p.res) // hot keys and rates (decisions.go)
		} else {
			it.Err = it.Here.Local(ctx, d)
		}
		if isRouteError(it.Err) {
			it.Err = fmt.Errorf("%w: %v", ErrNotProposed, it.Err)
		}
	}
}

// forwardTo sends items to the leader p, the others one call each. A lone
// Admit rides p's queue, sharing AdmitBatch calls with other callers'; the
// Admits of a leg with several (a client's AdmitBatch on a follower) are
// already a batch and go at once in a call of their own: queued behind the
// calls in flight they waited a round trip more (about 15% fewer
// decisions/s for batches of 100, measured with quorate-bench).
func (n *Engine) forwardTo(ctx context.Context, p *PeerClient, items []*Item) {
	var queued []*fwdItem
	for _, it := range items {
		if it.Away.Admit != nil {
			queued = append(queued, newFwdItem(it.Away.Admit))
		}
	}
	switch {
	case len(queued) == 1:
		p.Admits.Add(queued...)
	case len(queued) > 1:
		go n.peerPorts.sendForwards(p, slices.Clone(queued)) // sendForwards reuses its slice
	}
	for _, it := range items {
		if it.Away.Admit == nil {
			it.Err = classifyRemote(it.Away.Forward(ctx, p))
			continue
		}
		q := queued[0]
		queued = queued[1:]
		it.Away.Resp, it.Err = it.waitForward(ctx, q)
	}
}

// errLeaderChanged ends the wait for a forwarded Admit whose group has
// another leader now.
var errLeaderChanged = errors.New("the group's leader changed")

// waitForward waits for the answer to the forwarded Admit q. An item with a
// request ID waits only until this node's replica of the group takes
// another node than it.Away.ViaLeader for the leader: then the outcome is
// unknown (or, if q was not sent yet, it was certainly not applied), and
// the item is sent to the new leader, whose answer is the first one's,
// rather than waiting for a leader that died or is paused.
func (it *Item) waitForward(ctx context.Context, q *fwdItem) (*quoratev1.AdmitResponse, error) {
	via := it.Away.Via
	if !it.Route.Idempotent || via == nil || via.Leader == nil {
		// Without a request ID a retry could spend twice: the old
		// leader's answer (or its failure) is the only one to have.
		return q.wait(ctx)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(via.Leader.Context(), func() { cancel(errLeaderChanged) })
	defer stop()
	if via.LeaderID() != it.Away.ViaLeader {
		cancel(errLeaderChanged)
	}
	resp, err := q.wait(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(wctx), errLeaderChanged) {
		class := ErrOutcomeUnknown
		if errors.Is(err, ErrNotProposed) {
			class = ErrNotProposed
		}
		return nil, fmt.Errorf("%w: %v while the request was forwarded to %s", class, errLeaderChanged, it.Away.ViaLeader)
	}
	return resp, err
}

// proposal is one command proposed to a group led here, and its outcome.
type proposal struct {
	env *raftcmdv1.Envelope // as the caller gave it: never changed but for its map epoch
	out *raftcmdv1.Envelope // as proposed (keyRequestID)
	res any
	err error
}

// proposeAll proposes each command to d's group, which this node leads, and
// waits for each: the batchable ones into its group commit all at once, so
// they share entries. A command's key is folded into its request ID
// (keyRequestID); a command naming a policy the group does not have is not
// proposed when the meta group, caught up, does not have it either: it is
// answered fsm.ErrUnknownPolicy without a log entry (unless a request ID of
// it is recorded: the FSM answers a repeat from its record, whatever became
// of the policy). When the meta group has it, a data group gets the meta
// table first (knowPolicies), and a command the group refused for want of
// it (a change racing the check) is proposed once more: the refused one
// changed nothing.
func (n *Engine) proposeAll(ctx context.Context, d Dest, ps []*proposal) {
	for _, p := range ps {
		p.out = keyRequestID(p.env)
	}
	n.proposeRound(ctx, d, ps)
	var again []*proposal
	for _, p := range ps {
		if errors.Is(p.err, fsm.ErrUnknownPolicy) && d.ID != shard.MetaGroup {
			again = append(again, p)
		}
	}
	if len(again) > 0 {
		n.proposeRound(ctx, d, again)
	}
}

// proposeRound proposes those of ps whose policies d's group knows (or now
// copied from the meta group); the others get knowPolicies' error.
func (n *Engine) proposeRound(ctx context.Context, d Dest, ps []*proposal) {
	waits := make([]func() (any, error), len(ps))
	var ops []*groupcommit.Op
	for i, p := range ps {
		if p.err = n.knowPolicies(ctx, d, p.out); p.err != nil {
			continue
		}
		p.out.MapEpoch = d.Epoch
		if fsm.Batchable(p.out) {
			op := groupcommit.NewOp(p.out)
			ops = append(ops, op)
			waits[i] = func() (any, error) { return waitOp(ctx, op) }
		} else {
			waits[i] = n.applyAlone(ctx, d.Replica, p.out)
		}
	}
	if len(ops) > 0 {
		d.Replica.Batch.Add(ops...)
	}
	for i, p := range ps {
		if waits[i] != nil {
			p.res, p.err = waits[i]()
		}
	}
}

// ProposeTo is proposeAll of one command. Errors: ErrNotLeader and other
// ErrNotProposed (certainly not applied), ErrOutcomeUnknown, or the FSM's
// refusal.
func (n *Engine) ProposeTo(ctx context.Context, d Dest, env *raftcmdv1.Envelope) (any, error) {
	p := &proposal{env: env}
	n.proposeAll(ctx, d, []*proposal{p})
	return p.res, p.err
}

// Propose is proposeTo the meta group.
func (n *Engine) Propose(ctx context.Context, env *raftcmdv1.Envelope) (any, error) {
	return n.ProposeTo(ctx, n.MetaDest(), env)
}
