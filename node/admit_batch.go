package node

import (
	"context"
	"errors"
	"slices"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// MaxAdmitBatch is the most requests one AdmitBatch call may carry.
const MaxAdmitBatch = engine.MaxAdmitBatch

// AdmitBatch decides each request as Admit would and answers every one in
// request order. It is one call of the request engine (decide): requests
// of a group this node leads go into its log together (a few entries),
// those of other groups are forwarded to each leader, sharing its calls. A
// request that was certainly not applied (no leader, leadership moved, a
// stale shard map) is routed again until the deadline; one whose outcome is
// unknown is retried only when it carries a request ID, like Admit.
func (h *admissionHandler) AdmitBatch(ctx context.Context, req *connect.Request[quoratev1.AdmitBatchRequest]) (*connect.Response[quoratev1.AdmitBatchResponse], error) {
	n := h.n
	reqs := req.Msg.GetRequests()
	if len(reqs) == 0 || len(reqs) > MaxAdmitBatch {
		return nil, n.toConnectError(engine.BadRequest("requests", "must hold 1 to %d requests (got %d)", MaxAdmitBatch, len(reqs)))
	}
	ctx, cancel := n.engine.RequestContext(ctx)
	defer cancel()
	forwarded := req.Header().Get(engine.ForwardedHeader) != ""
	out := make([]*quoratev1.AdmitBatchResult, len(reqs))
	items := make([]*engine.Item, 0, len(reqs))
	at := make([]int, 0, len(reqs))
	for i, m := range reqs {
		cmd, err := admitCommand(m)
		if err != nil {
			out[i] = batchError(n.toConnectError(err))
			continue
		}
		if !forwarded {
			// As admit: from a grant the node holds, when it can.
			resp, err := n.local.Admit(ctx, m)
			switch {
			case err != nil:
				out[i] = batchError(n.toConnectError(err))
				continue
			case resp != nil:
				out[i] = &quoratev1.AdmitBatchResult{Result: &quoratev1.AdmitBatchResult_Response{Response: resp}}
				continue
			}
		}
		items, at = append(items, admitItem(m, cmd, forwarded)), append(at, i)
	}
	n.engine.Decide(ctx, items)
	answer := connect.NewResponse(&quoratev1.AdmitBatchResponse{Results: out})
	for j, it := range items {
		// Quorate-Leader: once per node an item was forwarded to.
		if l := it.Away.ViaLeader; l != "" && !slices.Contains(answer.Header().Values(engine.LeaderHeader), l) {
			answer.Header().Add(engine.LeaderHeader, l)
		}
		if resp, err := admitAnswer(it); err != nil {
			out[at[j]] = batchError(n.toConnectError(err))
		} else {
			out[at[j]] = &quoratev1.AdmitBatchResult{Result: &quoratev1.AdmitBatchResult_Response{Response: resp}}
		}
	}
	return answer, nil
}

// admitItem is an Admit (m, checked into cmd) as an item of the engine.
func admitItem(m *quoratev1.AdmitRequest, cmd *raftcmdv1.Admit, forwarded bool) *engine.Item {
	return &engine.Item{
		Route: engine.Routing{Data: true, Key: cmd.GetKey(), Forwarded: forwarded, Idempotent: cmd.GetRequestId() != ""},
		Here:  engine.Here{Env: &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Admit{Admit: cmd}}},
		Away:  engine.Away{Admit: m},
	}
}

// admitAnswer is the answer to a decided Admit item: the leader's forwarded
// response or this node's FSM result.
func admitAnswer(it *engine.Item) (*quoratev1.AdmitResponse, error) {
	switch {
	case it.Err != nil:
		return nil, it.Err
	case it.Away.Resp != nil:
		return it.Away.Resp, nil
	}
	return admitResponse(it.Here.Res.(*fsm.AdmitResult)), nil
}

// batchError is the AdmitBatchError form of a Connect error from the node's
// error table.
func batchError(err error) *quoratev1.AdmitBatchResult {
	e := &quoratev1.AdmitBatchError{Code: connect.CodeOf(err).String(), Message: err.Error()}
	var ce *connect.Error
	if errors.As(err, &ce) {
		e.Message = ce.Message()
	}
	if fv, ok := engine.ErrorDetail[*quoratev1.FieldViolation](err); ok {
		e.Field = fv.GetField()
	}
	e.OutcomeUnknown = engine.IsOutcomeUnknown(err)
	return &quoratev1.AdmitBatchResult{Result: &quoratev1.AdmitBatchResult_Error{Error: e}}
}
