package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/groupcommit"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// MaxAdmitBatch is the most requests one AdmitBatch call may carry.
const MaxAdmitBatch = 1000

// batchItem is one request of an AdmitBatch on its way to a decision.
type batchItem struct {
	i       int // index in the call
	m       *quoratev1.AdmitRequest
	cmd     *raftcmdv1.Admit
	env     *raftcmdv1.Envelope // cmd as proposed here (keyRequestID)
	resp    *quoratev1.AdmitResponse
	err     error // the last attempt's error
	unknown error // the last attempt whose outcome is unknown, if any
}

// AdmitBatch decides each request as Admit would and answers every one in
// request order. Requests are grouped by the Raft group of their key: those
// of a group this node leads go into its log together (a few entries), those
// of other groups are forwarded to each leader in one call per leader. A
// request that was certainly not applied (no leader, leadership moved, a
// stale shard map) is routed again until the deadline; one whose outcome is
// unknown is retried only when it carries a request ID, like Admit.
func (h *admissionHandler) AdmitBatch(ctx context.Context, req *connect.Request[quoratev1.AdmitBatchRequest]) (*connect.Response[quoratev1.AdmitBatchResponse], error) {
	n := h.n
	reqs := req.Msg.GetRequests()
	if len(reqs) == 0 || len(reqs) > MaxAdmitBatch {
		return nil, n.toConnectError(badRequest("requests", "must hold 1 to %d requests (got %d)", MaxAdmitBatch, len(reqs)))
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	out := make([]*quoratev1.AdmitBatchResult, len(reqs))
	items := make([]*batchItem, 0, len(reqs))
	for i, m := range reqs {
		cmd, err := admitCommand(m)
		if err != nil {
			out[i] = batchError(n.toConnectError(err))
			continue
		}
		items = append(items, &batchItem{i: i, m: m, cmd: cmd})
	}
	n.decideBatch(ctx, items, req.Header().Get(forwardedHeader) != "")
	for _, it := range items {
		if it.err != nil {
			out[it.i] = batchError(n.toConnectError(it.err))
		} else {
			out[it.i] = &quoratev1.AdmitBatchResult{Result: &quoratev1.AdmitBatchResult_Response{Response: it.resp}}
		}
	}
	return connect.NewResponse(&quoratev1.AdmitBatchResponse{Results: out}), nil
}

// decideBatch decides items (onLeader for many requests at once): each ends
// with resp or err set.
func (n *Node) decideBatch(ctx context.Context, items []*batchItem, forwarded bool) {
	pending := items
	attempt := -1
	_, stopped := retry(ctx, doubling(5*time.Millisecond, 100*time.Millisecond), func() error {
		attempt++
		local := map[*group][]*batchItem{}
		localDest := map[*group]dest{}
		remote := map[string][]*batchItem{}
		for _, it := range pending {
			d, err := n.destFor(routing{data: true, key: it.cmd.GetKey()})
			switch {
			case err != nil:
				it.err = err
			case d.g != nil && d.g.isLeader():
				local[d.g] = append(local[d.g], it)
				localDest[d.g] = d
			case forwarded:
				it.err = ErrNotLeader
			default:
				if addr, leaderID := n.forwardAddr(d, attempt); addr == "" {
					it.err = fmt.Errorf("%w: no leader of group %d known (leader id %q)", ErrNotProposed, d.id, leaderID)
				} else {
					remote[addr] = append(remote[addr], it)
				}
			}
		}
		var wg sync.WaitGroup
		for g, its := range local {
			wg.Go(func() { n.proposeBatch(ctx, localDest[g], its) })
		}
		for addr, its := range remote {
			wg.Go(func() { n.forwardBatch(ctx, addr, its) })
		}
		wg.Wait()

		var again []*batchItem
		for _, it := range pending {
			if it.err == nil {
				continue
			}
			unknown := errors.Is(it.err, ErrOutcomeUnknown) || isOutcomeUnknown(it.err)
			if unknown {
				it.unknown = it.err
			}
			if forwarded && errors.Is(it.err, ErrNotLeader) {
				// Never forwarded again: the forwarding node routes it anew.
				if it.unknown != nil {
					it.err = it.unknown // an earlier attempt here may have applied
				}
				continue
			}
			if errors.Is(it.err, ErrNotProposed) || (unknown && it.cmd.GetRequestId() != "") {
				again = append(again, it)
			}
		}
		pending = again
		if len(again) == 0 {
			return nil
		}
		return errBatchPending
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

// errBatchPending tells decideBatch's retry that some items are to be
// tried again.
var errBatchPending = errors.New("batch items pending")

// proposeBatch proposes items to d's group, which this node leads, all at
// once so they share entries, and waits for each. As proposeTo does for one
// command, an item naming a policy the cluster does not have is answered
// without an entry, and items the group refused for want of a policy it
// has since copied are proposed again.
func (n *Node) proposeBatch(ctx context.Context, d dest, items []*batchItem) {
	keyed := items[:0:0]
	for _, it := range items {
		env, err := n.keyRequestID(ctx, d, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Admit{Admit: it.cmd}})
		if err != nil {
			it.err = fmt.Errorf("%w: %v", ErrNotProposed, err)
			continue
		}
		it.env, keyed = env, append(keyed, it)
	}
	proposed := n.itemsWithPolicies(ctx, d, keyed)
	n.proposeItems(ctx, d, proposed)
	var unknownPolicy []*batchItem
	for _, it := range proposed {
		if errors.Is(it.err, fsm.ErrUnknownPolicy) && d.id != shard.MetaGroup {
			it.err = nil
			unknownPolicy = append(unknownPolicy, it)
		}
	}
	if len(unknownPolicy) == 0 {
		return
	}
	n.proposeItems(ctx, d, n.itemsWithPolicies(ctx, d, unknownPolicy))
}

// itemsWithPolicies returns the items whose policies d's group knows (or
// now copied from the meta group); the others get their error.
func (n *Node) itemsWithPolicies(ctx context.Context, d dest, items []*batchItem) []*batchItem {
	out := items[:0:0]
	for _, it := range items {
		if it.err = n.knowPolicies(ctx, d, it.env); it.err == nil {
			out = append(out, it)
		}
	}
	return out
}

func (n *Node) proposeItems(ctx context.Context, d dest, items []*batchItem) {
	ops := make([]*groupcommit.Op, len(items))
	for i, it := range items {
		it.env.MapEpoch = d.epoch
		ops[i] = groupcommit.NewOp(it.env)
	}
	d.g.batch.Add(ops...)
	for i, it := range items {
		res, err := waitOp(ctx, ops[i])
		switch {
		case isRouteError(err):
			it.err = fmt.Errorf("%w: %v", ErrNotProposed, err)
		case err != nil:
			it.err = err
		default:
			it.resp, it.err = admitResponse(res.(*fsm.AdmitResult)), nil
		}
	}
}

// forwardBatch forwards items to the leader at addr (a peer-mux address) in
// one AdmitBatch call and sorts its answers.
func (n *Node) forwardBatch(ctx context.Context, addr string, items []*batchItem) {
	m := &quoratev1.AdmitBatchRequest{Requests: make([]*quoratev1.AdmitRequest, len(items))}
	for i, it := range items {
		m.Requests[i] = it.m
	}
	fwd := connect.NewRequest(m)
	fwd.Header().Set(forwardedHeader, n.cfg.ID)
	resp, err := n.fwd.get("http://"+addr).admission.AdmitBatch(ctx, fwd)
	if err == nil && len(resp.Msg.GetResults()) != len(items) {
		err = fmt.Errorf("%w: the leader answered %d results for %d requests", ErrOutcomeUnknown, len(resp.Msg.GetResults()), len(items))
	}
	if err != nil {
		err = classifyRemote(err)
		for _, it := range items {
			it.err = err
		}
		return
	}
	for i, r := range resp.Msg.GetResults() {
		items[i].resp, items[i].err = batchResultAnswer(r)
	}
}

// batchError is the AdmitBatchError form of a Connect error from the node's
// error table.
func batchError(err error) *quoratev1.AdmitBatchResult {
	e := &quoratev1.AdmitBatchError{Code: connect.CodeOf(err).String(), Message: err.Error()}
	var ce *connect.Error
	if errors.As(err, &ce) {
		e.Message = ce.Message()
	}
	if fv, ok := errorDetail[*quoratev1.FieldViolation](err); ok {
		e.Field = fv.GetField()
	}
	e.OutcomeUnknown = IsOutcomeUnknown(err)
	return &quoratev1.AdmitBatchResult{Result: &quoratev1.AdmitBatchResult_Error{Error: e}}
}

// batchResultAnswer turns one result of a forwarded AdmitBatch back into an
// answer or an error: Unavailable without outcome_unknown means certainly not
// applied (ErrNotProposed), with it ErrOutcomeUnknown; any other error is
// the leader's own answer, as a Connect error with its field.
func batchResultAnswer(r *quoratev1.AdmitBatchResult) (*quoratev1.AdmitResponse, error) {
	if resp := r.GetResponse(); resp != nil {
		return resp, nil
	}
	e := r.GetError()
	if e == nil {
		return nil, fmt.Errorf("%w: the leader answered an empty result", ErrOutcomeUnknown)
	}
	var code connect.Code
	if err := code.UnmarshalText([]byte(e.GetCode())); err != nil {
		code = connect.CodeUnknown
	}
	switch {
	case code == connect.CodeUnavailable && e.GetOutcomeUnknown():
		return nil, fmt.Errorf("%w: %s", ErrOutcomeUnknown, e.GetMessage())
	case code == connect.CodeUnavailable:
		return nil, fmt.Errorf("%w: %s", ErrNotProposed, e.GetMessage())
	}
	ce := connect.NewError(code, errors.New(e.GetMessage()))
	if e.GetField() != "" {
		ce = withDetail(ce, &quoratev1.FieldViolation{Field: e.GetField(), Description: e.GetMessage()})
	}
	return nil, &leaderAnswer{ce: ce}
}

// leaderAnswer is an error the leader answered for one request of a
// forwarded batch: final, as a wire error from a unary call would be.
type leaderAnswer struct{ ce *connect.Error }

func (a *leaderAnswer) Error() string { return a.ce.Error() }
func (a *leaderAnswer) Unwrap() error { return a.ce }
