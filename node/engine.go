package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
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

// routing says how decide may treat a request.
type routing struct {
	// data: the request works on key's state and goes to the key's data
	// group; otherwise it goes to the meta group.
	data bool
	key  string

	// forwarded: the request came from another node; never forward it again.
	forwarded bool
	// idempotent: the request carries a request ID, so a retry after an
	// unknown outcome gets the first answer and spends nothing.
	idempotent bool
}

// item is one request on its way to a decision: routed by rt to a group,
// decided there when this node leads it, else forwarded to its leader.
type item struct {
	rt routing

	// On the leader (this node): env is proposed, sharing entries with the
	// other items of its group, and its FSM result lands in res. A request
	// that is not one command (an acquire that waits, an admin call) has
	// local instead, run with the group's destination.
	env   *raftcmdv1.Envelope
	local func(ctx context.Context, d dest) error
	res   any
	// by is the replica whose FSM decided env into res (its policy table
	// gives an Admit answer its windows: admitResponse).
	by *replica.Replica

	// Elsewhere: an Admit (admit set) rides the leader's queue of forwarded
	// Admits and its answer lands in resp; any other request is sent by
	// forward, whose error classifyRemote sorts.
	admit   *quoratev1.AdmitRequest
	forward func(ctx context.Context, p *peerClient) error
	resp    *quoratev1.AdmitResponse

	// via is this node's replica of the group the item was forwarded for
	// (nil when it hosts none) and viaLeader the leader it was sent to, by
	// the last attempt ("" when that attempt did not forward it).
	via       *replica.Replica
	viaLeader string

	err     error // the last attempt's
	unknown error // the last attempt whose outcome is unknown, if any
}

// errPending tells decide's retry that some items are to be tried again.
var errPending = errors.New("items pending")

// decide runs items to a decision: each ends with err nil (res or resp
// set, or local's work done) or its final error. An item certainly not
// applied (ErrNotProposed: no leader, leadership moved, a route refusal) is
// routed again until ctx ends, 5 ms doubling to 100 ms between attempts;
// one whose outcome is unknown only when it is idempotent. Once an
// attempt's outcome was unknown, a later "not proposed" does not replace it
// in the answer. A forwarded item that reaches a node not leading its group
// is answered ErrNotLeader, never forwarded again.
func (n *Node) decide(ctx context.Context, items []*item) {
	pending := items
	attempt := -1
	_, stopped := retry(ctx, doubling(5*time.Millisecond, 100*time.Millisecond), func() error {
		attempt++
		n.attempt(ctx, pending, attempt)
		again := pending[:0:0]
		for _, it := range pending {
			if it.err == nil {
				continue
			}
			unknown := errors.Is(it.err, ErrOutcomeUnknown)
			if unknown {
				it.unknown = it.err
			}
			if it.rt.forwarded && errors.Is(it.err, ErrNotLeader) {
				// Never forwarded again: the forwarding node routes it anew.
				if it.unknown != nil {
					it.err = it.unknown // an earlier attempt here may have applied
				}
				continue
			}
			if errors.Is(it.err, ErrNotProposed) || (unknown && it.rt.idempotent) {
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
				it.err = it.unknown
			}
			it.err = fmt.Errorf("%w (%v)", it.err, stopped)
		}
	}
}

// attempt routes each item once: those of groups led here are decided
// here, group by group; the others are forwarded, leader by leader. Legs
// run concurrently; a single leg (a unary call) runs on the caller's
// goroutine.
func (n *Node) attempt(ctx context.Context, items []*item, attempt int) {
	type leg struct {
		d     dest
		items []*item
	}
	local := map[*replica.Replica]*leg{}
	remote := map[string][]*item{}
	for _, it := range items {
		it.res, it.resp, it.err, it.by = nil, nil, nil, nil
		it.via, it.viaLeader = nil, ""
		d, err := n.destFor(it.rt)
		switch {
		case err != nil:
			it.err = err
		case d.g != nil && d.g.IsLeader():
			if local[d.g] == nil {
				local[d.g] = &leg{d: d}
			}
			local[d.g].items = append(local[d.g].items, it)
		case it.rt.forwarded:
			it.err = ErrNotLeader
		default:
			if addr, leaderID := n.forwardAddr(d, attempt); addr == "" {
				it.err = fmt.Errorf("%w: no leader of group %d known (leader id %q)", ErrNotProposed, d.id, leaderID)
			} else {
				it.via, it.viaLeader = d.g, leaderID
				remote[addr] = append(remote[addr], it)
				if it.rt.data {
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
		legs = append(legs, func() { n.forwardTo(ctx, n.peerPorts.at(addr), its) })
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
func (n *Node) decideHere(ctx context.Context, d dest, items []*item) {
	var ps []*proposal
	for _, it := range items {
		if it.env != nil {
			ps = append(ps, &proposal{env: it.env})
		}
	}
	n.proposeAll(ctx, d, ps)
	for _, it := range items {
		if it.env != nil {
			p := ps[0]
			ps = ps[1:]
			it.res, it.err, it.by = p.res, p.err, d.g
			n.decisions.record(d.id, p.res) // hot keys and rates (decisions.go)
		} else {
			it.err = it.local(ctx, d)
		}
		if isRouteError(it.err) {
			it.err = fmt.Errorf("%w: %v", ErrNotProposed, it.err)
		}
	}
}

// forwardTo sends items to the leader p, the others one call each. A lone
// Admit rides p's queue, sharing AdmitBatch calls with other callers'; the
// Admits of a leg with several (a client's AdmitBatch on a follower) are
// already a batch and go at once in a call of their own: queued behind the
// calls in flight they waited a round trip more (about 15% fewer
// decisions/s for batches of 100, measured with quorate-bench).
func (n *Node) forwardTo(ctx context.Context, p *peerClient, items []*item) {
	var queued []*fwdItem
	for _, it := range items {
		if it.admit != nil {
			queued = append(queued, newFwdItem(it.admit))
		}
	}
	switch {
	case len(queued) == 1:
		p.admits.Add(queued...)
	case len(queued) > 1:
		go n.peerPorts.sendForwards(p, slices.Clone(queued)) // sendForwards reuses its slice
	}
	for _, it := range items {
		if it.admit == nil {
			it.err = classifyRemote(it.forward(ctx, p))
			continue
		}
		q := queued[0]
		queued = queued[1:]
		it.resp, it.err = it.waitForward(ctx, q)
	}
}

// errLeaderChanged ends the wait for a forwarded Admit whose group has
// another leader now.
var errLeaderChanged = errors.New("the group's leader changed")

// waitForward waits for the answer to the forwarded Admit q. An item with a
// request ID waits only until this node's replica of the group takes
// another node than it.viaLeader for the leader: then the outcome is
// unknown (or, if q was not sent yet, it was certainly not applied), and
// the item is sent to the new leader, whose answer is the first one's,
// rather than waiting for a leader that died or is paused.
func (it *item) waitForward(ctx context.Context, q *fwdItem) (*quoratev1.AdmitResponse, error) {
	if !it.rt.idempotent || it.via == nil || it.via.Leader == nil {
		// Without a request ID a retry could spend twice: the old
		// leader's answer (or its failure) is the only one to have.
		return q.wait(ctx)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(it.via.Leader.Context(), func() { cancel(errLeaderChanged) })
	defer stop()
	if it.via.LeaderID() != it.viaLeader {
		cancel(errLeaderChanged)
	}
	resp, err := q.wait(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(wctx), errLeaderChanged) {
		class := ErrOutcomeUnknown
		if errors.Is(err, ErrNotProposed) {
			class = ErrNotProposed
		}
		return nil, fmt.Errorf("%w: %v while the request was forwarded to %s", class, errLeaderChanged, it.viaLeader)
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
func (n *Node) proposeAll(ctx context.Context, d dest, ps []*proposal) {
	for _, p := range ps {
		p.out = keyRequestID(p.env)
	}
	n.proposeRound(ctx, d, ps)
	var again []*proposal
	for _, p := range ps {
		if errors.Is(p.err, fsm.ErrUnknownPolicy) && d.id != shard.MetaGroup {
			again = append(again, p)
		}
	}
	if len(again) > 0 {
		n.proposeRound(ctx, d, again)
	}
}

// proposeRound proposes those of ps whose policies d's group knows (or now
// copied from the meta group); the others get knowPolicies' error.
func (n *Node) proposeRound(ctx context.Context, d dest, ps []*proposal) {
	waits := make([]func() (any, error), len(ps))
	var ops []*groupcommit.Op
	for i, p := range ps {
		if p.err = n.knowPolicies(ctx, d, p.out); p.err != nil {
			continue
		}
		p.out.MapEpoch = d.epoch
		if fsm.Batchable(p.out) {
			op := groupcommit.NewOp(p.out)
			ops = append(ops, op)
			waits[i] = func() (any, error) { return waitOp(ctx, op) }
		} else {
			waits[i] = n.applyAlone(ctx, d.g, p.out)
		}
	}
	if len(ops) > 0 {
		d.g.Batch.Add(ops...)
	}
	for i, p := range ps {
		if waits[i] != nil {
			p.res, p.err = waits[i]()
		}
	}
}

// proposeTo is proposeAll of one command. Errors: ErrNotLeader and other
// ErrNotProposed (certainly not applied), ErrOutcomeUnknown, or the FSM's
// refusal.
func (n *Node) proposeTo(ctx context.Context, d dest, env *raftcmdv1.Envelope) (any, error) {
	p := &proposal{env: env}
	n.proposeAll(ctx, d, []*proposal{p})
	return p.res, p.err
}

// propose is proposeTo the meta group.
func (n *Node) propose(ctx context.Context, env *raftcmdv1.Envelope) (any, error) {
	return n.proposeTo(ctx, n.metaDest(), env)
}

// onLeader runs one request on the leader of rt's group: local when this
// node leads it, else remote against the leader (over the peer port's
// forwarding channel), with decide's routing and retries.
func (n *Node) onLeader(ctx context.Context, rt routing,
	local func(ctx context.Context, d dest) error, remote func(ctx context.Context, p *peerClient) error) error {
	it := &item{rt: rt, local: local, forward: remote}
	n.decide(ctx, []*item{it})
	return it.err
}
