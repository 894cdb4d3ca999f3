package node

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Routes answers where each key's calls should go (AdmissionService.Routes).
func (h *admissionHandler) Routes(ctx context.Context, req *connect.Request[quoratev1.RoutesRequest]) (*connect.Response[quoratev1.RoutesResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("Routes is not served yet"))
}
