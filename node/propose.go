package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"connectrpc.com/connect"
	"github.com/cenkalti/backoff/v5"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

var (
	// ErrNotProposed is returned when a command was certainly not applied:
	// there was no leader, or the node asked was not the leader, within the
	// request's deadline. Retrying is safe.
	ErrNotProposed = errors.New("node: not proposed")
	// ErrNotLeader is returned by a node asked to decide as leader (a
	// forwarded request) that is not the leader. It wraps ErrNotProposed.
	ErrNotLeader = fmt.Errorf("%w: not the leader", ErrNotProposed)
	// ErrOutcomeUnknown is returned when a command may or may not have been
	// applied: leadership was lost after it was proposed, the deadline passed
	// while it was committing, or the leader it was forwarded to failed
	// mid-call. Only a retry with the same request ID is safe.
	ErrOutcomeUnknown = errors.New("node: outcome unknown")
)

// forwardedHeader marks a request forwarded by another node to this one as
// leader; such a request is never forwarded again.
const forwardedHeader = "Quorate-Forwarded-By"

// propose stamps env with the leader's time, appends it to the log and waits
// until it is applied here, returning the FSM's result. Errors: ErrNotLeader
// (not proposed), ErrOutcomeUnknown, or the FSM's refusal.
//
// The group is the one onLeader chose for the request (carried in ctx), else
// the meta group; data commands are stamped with that choice's map epoch.
func (n *Node) propose(ctx context.Context, env *raftcmdv1.Envelope) (any, error) {
	return n.proposeTo(ctx, n.destOf(ctx), env)
}

// proposeTo is propose to the group of d, with the request's key folded
// into its request ID (keyRequestID). A command naming a policy the
// group does not have is not proposed when the meta group, caught up, does
// not have it either: it is answered fsm.ErrUnknownPolicy without a log
// entry (unless a request ID of it is recorded: the FSM answers a repeat
// from its record, whatever became of the policy). When the meta group has
// it, a data group gets the meta table first (it is copied shortly after
// each change), and a command the group refused for want of it (a change
// racing the check) is proposed again: the refused one changed nothing.
func (n *Node) proposeTo(ctx context.Context, d dest, env *raftcmdv1.Envelope) (any, error) {
	env, err := n.keyRequestID(ctx, d, env)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotProposed, err)
	}
	if err := n.knowPolicies(ctx, d, env); err != nil {
		return nil, err
	}
	res, err := n.proposeOnce(ctx, d, env)
	if errors.Is(err, fsm.ErrUnknownPolicy) && d.id != shard.MetaGroup {
		if serr := n.knowPolicies(ctx, d, env); serr != nil {
			return nil, serr
		}
		res, err = n.proposeOnce(ctx, d, env)
	}
	return res, err
}

// knowPolicies brings the group of d (led here) to know every policy env
// names, or returns fsm.ErrUnknownPolicy when the cluster does not have
// one, or ErrNotProposed when it could not tell now. It costs two map
// lookups when the group has the policies.
func (n *Node) knowPolicies(ctx context.Context, d dest, env *raftcmdv1.Envelope) error {
	names, caller, requestID := policyNames(env)
	if _, missing := d.g.fsm.MissingPolicy(names); !missing {
		return nil
	}
	// The policy may be newer than this node's meta replica: catch up
	// with the meta leader first (a read index), and with this group (a
	// record of the request ID acknowledged by an earlier leader).
	serr := n.catchUpMeta(ctx)
	if serr == nil && requestID != "" {
		serr = n.caughtUp(ctx, d.g)
	}
	if serr == nil {
		if requestID != "" && d.g.fsm.Recorded(caller, requestID) {
			return nil
		}
		if name, missing := n.meta.fsm.MissingPolicy(names); missing {
			return fmt.Errorf("%w %s", fsm.ErrUnknownPolicy, admission.Quote(name))
		}
		if d.id != shard.MetaGroup {
			serr = n.syncPolicies(ctx, d.g)
		}
	}
	if serr != nil {
		// Nothing was applied, and the group could not be brought up to
		// date now (a leader change, a leadership transfer): retry rather
		// than answer that the policy does not exist.
		return fmt.Errorf("%w: copying the policy table: %v", ErrNotProposed, serr)
	}
	return nil
}

// policyNames returns the policies a command names, and its request ID.
func policyNames(env *raftcmdv1.Envelope) (names []string, caller, requestID string) {
	switch b := env.GetBody().(type) {
	case *raftcmdv1.Envelope_Admit:
		names = append(make([]string, 0, 1+len(b.Admit.GetAlso())), b.Admit.GetPolicy())
		for _, c := range b.Admit.GetAlso() {
			names = append(names, c.GetPolicy())
		}
		return names, b.Admit.GetCaller(), b.Admit.GetRequestId()
	case *raftcmdv1.Envelope_Peek:
		return []string{b.Peek.GetPolicy()}, "", ""
	case *raftcmdv1.Envelope_Reserve:
		return []string{b.Reserve.GetPolicy()}, b.Reserve.GetCaller(), b.Reserve.GetRequestId()
	case *raftcmdv1.Envelope_Lease:
		names = []string{b.Lease.GetPolicy()}
		if rp := b.Lease.GetReservePolicy(); rp != "" {
			names = append(names, rp)
		}
		return names, b.Lease.GetCaller(), b.Lease.GetRequestId()
	}
	return nil, "", ""
}

func (n *Node) proposeOnce(ctx context.Context, d dest, env *raftcmdv1.Envelope) (any, error) {
	env.MapEpoch = d.epoch
	if fsm.Batchable(env) {
		return n.submit(ctx, d.g, env)
	}
	env.NowUnixNano = n.now().UnixNano()
	type applied struct {
		res any
		err error
	}
	done := make(chan applied, 1)
	go func() {
		res, err := n.applyEntry(d.g, env, func() { n.hooks.run(&n.hooks.afterPropose, env) })
		if err == nil {
			if e, ok := res.(error); ok {
				res, err = nil, e
			} else {
				n.hooks.run(&n.hooks.afterApply, env)
			}
		}
		done <- applied{res, err}
	}()
	select {
	case a := <-done:
		return a.res, a.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %v while the entry was committing", ErrOutcomeUnknown, ctx.Err())
	}
}

// routing says how onLeader may treat a request.
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

// onLeader runs local when this node leads, or remote against the leader
// (over the peer port's forwarding channel) otherwise, and retries while the request was certainly not
// applied (ErrNotProposed) and ctx allows; an idempotent request is also
// retried after an unknown outcome. A forwarded request is never forwarded
// again: if this node does not lead, it answers ErrNotLeader so the
// forwarding node retries.
func (n *Node) onLeader(ctx context.Context, r routing,
	local func(context.Context) error, remote func(ctx context.Context, p *peerClient) error) error {
	var unknown error // the last attempt whose outcome is unknown, if any
	attempt := -1
	err, stopped := retry(ctx, doubling(5*time.Millisecond, 100*time.Millisecond), func() error {
		attempt++
		d, err := n.destFor(r)
		switch {
		case err != nil:
		case d.g != nil && d.g.isLeader():
			if err = local(withDest(ctx, d)); isRouteError(err) {
				err = fmt.Errorf("%w: %v", ErrNotProposed, err)
			}
		case r.forwarded:
			if unknown != nil {
				// An earlier attempt here may have applied: say so, or the
				// forwarding node would report "not proposed".
				return backoff.Permanent(unknown)
			}
			return backoff.Permanent(ErrNotLeader)
		default:
			if addr, leaderID := n.forwardAddr(d, attempt); addr == "" {
				err = fmt.Errorf("%w: no leader of group %d known (leader id %q)", ErrNotProposed, d.id, leaderID)
			} else {
				err = classifyRemote(remote(ctx, n.fwd.get("http://"+addr)))
			}
		}
		wasUnknown := errors.Is(err, ErrOutcomeUnknown) || isOutcomeUnknown(err)
		if wasUnknown {
			unknown = err
		}
		if !errors.Is(err, ErrNotProposed) && !(r.idempotent && wasUnknown) {
			return backoff.Permanent(err)
		}
		return err
	})
	if stopped != nil {
		if unknown != nil {
			// A later "not proposed" does not undo an earlier attempt
			// that may have been applied.
			err = unknown
		}
		return fmt.Errorf("%w (%v)", err, stopped)
	}
	return err
}

// isOutcomeUnknown reports whether err is an Unavailable Connect error
// carrying the OutcomeUnknown detail (the leader's own answer to a forwarded
// call).
func isOutcomeUnknown(err error) bool {
	return connect.CodeOf(err) == connect.CodeUnavailable && IsOutcomeUnknown(err)
}

// leader returns the leader's API address (empty when unknown or not yet
// registered) and ID.
func (n *Node) leader() (apiAddr, id string) {
	_, lid := n.meta.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	m, _ := n.meta.fsm.Node(string(lid))
	return m.APIAddr, string(lid)
}

// classifyRemote sorts the error of a call forwarded to the leader: the
// leader's own answer passes through, except that "not leader" means not
// proposed; a call that never reached the leader was not proposed; any other
// failure of the call leaves the outcome unknown.
func classifyRemote(err error) error {
	if err == nil || errors.Is(err, ErrNotProposed) || errors.Is(err, ErrOutcomeUnknown) {
		return err // already sorted (a forwarded batch's answer)
	}
	var la *leaderAnswer
	if errors.As(err, &la) {
		return la.ce
	}
	var ce *connect.Error
	if errors.As(err, &ce) && connect.IsWireError(ce) {
		if _, notLeader := errorDetail[*quoratev1.NotLeader](ce); notLeader && ce.Code() == connect.CodeUnavailable {
			return fmt.Errorf("%w: %v", ErrNotProposed, ce)
		}
		return ce
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%w: leader unreachable: %v", ErrNotProposed, err)
	}
	return fmt.Errorf("%w: forwarding to the leader: %v", ErrOutcomeUnknown, err)
}

// requestContext applies the server's RequestTimeout to ctx and keeps a
// margin before the caller's own deadline, so that the server still answers
// — with what it knows, e.g. OutcomeUnknown — before the caller gives up.
func (n *Node) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	timeout := n.cfg.RequestTimeout
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d)
		margin := min(max(left/20, 5*time.Millisecond), 100*time.Millisecond)
		timeout = min(timeout, left-margin)
	}
	return context.WithTimeout(ctx, timeout)
}
