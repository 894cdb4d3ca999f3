package node

import (
	"context"

	"sync"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// MaxAdmitBatch is the most requests one AdmitBatch call may carry.
const MaxAdmitBatch = 1000

// AdmitBatch decides each request as Admit would, concurrently, and answers
// every one in request order.
func (h *admissionHandler) AdmitBatch(ctx context.Context, req *connect.Request[quoratev1.AdmitBatchRequest]) (*connect.Response[quoratev1.AdmitBatchResponse], error) {
	n := h.n
	reqs := req.Msg.GetRequests()
	if len(reqs) == 0 || len(reqs) > MaxAdmitBatch {
		return nil, n.toConnectError(badRequest("requests", "must hold 1 to %d requests (got %d)", MaxAdmitBatch, len(reqs)))
	}
	out := make([]*quoratev1.AdmitBatchResult, len(reqs))
	var wg sync.WaitGroup
	for i, m := range reqs {
		wg.Go(func() {
			one := connect.NewRequest(m)
			if f := req.Header().Get(forwardedHeader); f != "" {
				one.Header().Set(forwardedHeader, f)
			}
			resp, err := h.admitOne(ctx, one)
			if err != nil {
				out[i] = batchError(err)
				return
			}
			out[i] = &quoratev1.AdmitBatchResult{Result: &quoratev1.AdmitBatchResult_Response{Response: resp.Msg}}
		})
	}
	wg.Wait()
	return connect.NewResponse(&quoratev1.AdmitBatchResponse{Results: out}), nil
}

func (h *admissionHandler) admitOne(ctx context.Context, req *connect.Request[quoratev1.AdmitRequest]) (*connect.Response[quoratev1.AdmitResponse], error) {
	cmd, err := admitCommand(req.Msg)
	if err != nil {
		return nil, h.n.toConnectError(err)
	}
	return h.admit(ctx, req, cmd)
}

// batchError is the AdmitBatchError form of a Connect error from the node's
// error table.
func batchError(err error) *quoratev1.AdmitBatchResult {
	e := &quoratev1.AdmitBatchError{Code: connect.CodeOf(err).String(), Message: err.Error()}
	if ce, ok := err.(*connect.Error); ok {
		e.Message = ce.Message()
	}
	if fv, ok := errorDetail[*quoratev1.FieldViolation](err); ok {
		e.Field = fv.GetField()
	}
	e.OutcomeUnknown = IsOutcomeUnknown(err)
	return &quoratev1.AdmitBatchResult{Result: &quoratev1.AdmitBatchResult_Error{Error: e}}
}
