package node

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// MaxAdmitBatch is the most requests one AdmitBatch call may carry.
const MaxAdmitBatch = 1000

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
		return nil, n.toConnectError(badRequest("requests", "must hold 1 to %d requests (got %d)", MaxAdmitBatch, len(reqs)))
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	forwarded := req.Header().Get(forwardedHeader) != ""
	out := make([]*quoratev1.AdmitBatchResult, len(reqs))
	items := make([]*item, 0, len(reqs))
	at := make([]int, 0, len(reqs))
	for i, m := range reqs {
		cmd, err := admitCommand(m)
		if err != nil {
			out[i] = batchError(n.toConnectError(err))
			continue
		}
		items, at = append(items, admitItem(m, cmd, forwarded)), append(at, i)
	}
	n.decide(ctx, items)
	answer := connect.NewResponse(&quoratev1.AdmitBatchResponse{Results: out})
	for j, it := range items {
		// Quorate-Leader: once per node an item was forwarded to.
		if it.viaLeader != "" && !slices.Contains(answer.Header().Values(leaderHeader), it.viaLeader) {
			answer.Header().Add(leaderHeader, it.viaLeader)
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
func admitItem(m *quoratev1.AdmitRequest, cmd *raftcmdv1.Admit, forwarded bool) *item {
	return &item{
		rt:    routing{data: true, key: cmd.GetKey(), forwarded: forwarded, idempotent: cmd.GetRequestId() != ""},
		env:   &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Admit{Admit: cmd}},
		admit: m,
	}
}

// admitAnswer is the answer to a decided Admit item: the leader's forwarded
// response or this node's FSM result.
func admitAnswer(it *item) (*quoratev1.AdmitResponse, error) {
	switch {
	case it.err != nil:
		return nil, it.err
	case it.resp != nil:
		return it.resp, nil
	}
	return admitResponse(it.res.(*fsm.AdmitResult), it.by.FSM), nil
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
// the leader's own answer, final, as a Connect error with its field (which
// toConnectError passes through unchanged). batchError is its inverse.
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
	return nil, ce
}
