package node

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Grant serves budget leases (AdmissionService.Grant).
func (h *admissionHandler) Grant(context.Context, *connect.Request[quoratev1.GrantRequest]) (*connect.Response[quoratev1.GrantResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("budget leases are not served by this node yet"))
}
